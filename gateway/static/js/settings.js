// The settings column: connection keys, sampling, output format and tools.
// Values are kept in this browser (keys as before: the API key and endpoint
// in local storage, the admin key in this tab's session storage; the rest in
// one local-storage entry) and turned into the request's fields, with a
// FieldError naming the control when a value cannot be used.

const $ = (id) => document.getElementById(id);
const KEYS = { "api-key": localStorage, endpoint: localStorage, "admin-key": sessionStorage };
const SAVED = "agentgate.settings";
const KEPT = [
  "api", "temperature", "top-p", "max-tokens", "thinking-budget", "seed", "stop-sequences", "presence-penalty",
  "frequency-penalty", "repetition-penalty", "system", "response-format", "json-schema", "tools", "tool-choice",
  "parallel-tool-calls",
]; // prettier-ignore
const NUMBERS = [
  ["temperature", "temperature", Number],
  ["top-p", "top_p", Number],
  ["max-tokens", "max_tokens", (v) => parseInt(v, 10)],
  ["thinking-budget", "thinking_token_budget", (v) => parseInt(v, 10)],
  ["seed", "seed", (v) => parseInt(v, 10)],
  ["presence-penalty", "presence_penalty", Number],
  ["frequency-penalty", "frequency_penalty", Number],
  ["repetition-penalty", "repetition_penalty", Number],
];
export const EXAMPLE_TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
];

/** A setting that cannot be used: `field` is the id of its control. */
export class FieldError extends Error {
  constructor(field, message) {
    super(message);
    this.field = field;
  }
}

function valueOf(control) {
  return control.type === "checkbox" ? control.checked : control.value;
}

/** Fills an input from `storage` (key agentgate.<id>) and keeps what is typed there; then `onChange()`. */
export function keepInput(id, storage, onChange) {
  $(id).value = storage.getItem(`agentgate.${id}`) || "";
  $(id).addEventListener("change", () => {
    const value = $(id).value.trim();
    if (value) storage.setItem(`agentgate.${id}`, value);
    else storage.removeItem(`agentgate.${id}`);
    onChange();
  });
}

/** Restores the kept values and keeps each change; `onChange(id)` hears every change. */
export function restoreSettings(onChange) {
  for (const [id, storage] of Object.entries(KEYS)) keepInput(id, storage, () => onChange(id));
  let saved = {};
  try {
    saved = JSON.parse(localStorage.getItem(SAVED) || "{}");
  } catch {
    // a damaged entry: start from the defaults
  }
  for (const id of KEPT) {
    const control = $(id);
    if (id in saved) {
      if (control.type === "checkbox") control.checked = Boolean(saved[id]);
      else control.value = saved[id];
    }
    control.addEventListener("change", () => {
      const all = Object.fromEntries(KEPT.map((k) => [k, valueOf($(k))]));
      localStorage.setItem(SAVED, JSON.stringify(all));
      clearFieldError(id);
      onChange(id);
    });
  }
  syncToolChoices(saved["tool-choice"]);
  $("tools").addEventListener("input", () => syncToolChoices());
  $("schema-field").hidden = $("response-format").value !== "json_schema";
  $("response-format").addEventListener("change", () => {
    $("schema-field").hidden = $("response-format").value !== "json_schema";
  });
  $("tools-example").addEventListener("click", () => {
    $("tools").value = JSON.stringify(EXAMPLE_TOOLS, null, 2);
    $("tools").dispatchEvent(new Event("input"));
    $("tools").dispatchEvent(new Event("change"));
  });
}

/** The connection: base "" means this page's own origin. */
export function connection() {
  return { base: $("endpoint").value.trim(), apiKey: $("api-key").value.trim(), adminKey: $("admin-key").value.trim() };
}

export function markFieldError(error) {
  const control = $(error.field);
  control.setAttribute("aria-invalid", "true");
  control.setAttribute("aria-errormessage", "send-error");
}

export function clearFieldError(id) {
  $(id)?.removeAttribute("aria-invalid");
  $(id)?.removeAttribute("aria-errormessage");
}

function parseJson(id, what) {
  const raw = $(id).value.trim();
  if (!raw) return null;
  try {
    return JSON.parse(raw);
  } catch (e) {
    throw new FieldError(id, `${what}: not JSON (${e.message})`);
  }
}

function toolNames() {
  try {
    const tools = JSON.parse($("tools").value);
    return (Array.isArray(tools) ? tools : [tools]).map((t) => t?.function?.name).filter(Boolean);
  } catch {
    return [];
  }
}

/** Tool choice offers auto/required/none and one entry per tool named in the Tools box. */
function syncToolChoices(wanted = $("tool-choice").value) {
  const select = $("tool-choice");
  const names = [...new Set(toolNames())];
  const fixed = ["auto", "required", "none"];
  select.replaceChildren(
    ...fixed.map((v) => new Option(v, v)),
    ...names.map((name) => new Option(`function: ${name}`, `function:${name}`)),
  );
  select.value = [...select.options].some((o) => o.value === wanted) ? wanted : "auto";
}

/** The request's sampling, format and tool fields; throws FieldError. */
export function requestOptions() {
  const body = {};
  for (const [id, name, parse] of NUMBERS) {
    const raw = $(id).value.trim();
    if (raw === "") continue;
    const value = parse(raw);
    if (!Number.isFinite(value)) throw new FieldError(id, `${$(id).labels[0].textContent.trim()}: not a number`);
    body[name] = value;
  }
  if (body.thinking_token_budget !== undefined && $("api").value === "responses") {
    throw new FieldError("thinking-budget", "Thinking budget: the Responses API takes no token budget; use Chat completions");
  }
  const stops = $("stop-sequences").value.split("\n").filter((s) => s !== "");
  if (stops.length) body.stop = stops;

  const format = $("response-format").value;
  if (format === "json_object") body.response_format = { type: "json_object" };
  if (format === "json_schema") {
    const schema = parseJson("json-schema", "JSON schema");
    if (!schema || typeof schema !== "object") throw new FieldError("json-schema", "JSON schema: enter a schema (a JSON object)");
    body.response_format = { type: "json_schema", json_schema: { name: "reply", schema, strict: true } };
  }

  let tools = parseJson("tools", "Tools");
  if (tools !== null) {
    if (!Array.isArray(tools)) tools = [tools];
    if (tools.some((t) => t?.type !== "function" || typeof t.function?.name !== "string")) {
      throw new FieldError("tools", 'Tools: each tool needs {"type": "function", "function": {"name": …}}');
    }
    body.tools = tools;
    const choice = $("tool-choice").value;
    body.tool_choice = choice.startsWith("function:")
      ? { type: "function", function: { name: choice.slice("function:".length) } }
      : choice;
    body.parallel_tool_calls = $("parallel-tool-calls").checked;
  }
  return body;
}

export function systemPrompt() {
  return $("system").value.trim();
}
