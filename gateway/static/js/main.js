// The playground page: wires the chat, the settings and the operator strip.

import { ApiError, fetchMetrics, isPaused, listModels, pause, resume, streamChat } from "./api.js";
import { Reply } from "./reply.js";
import { transcriptView } from "./view.js";

const $ = (id) => document.getElementById(id);
const STORED = { "api-key": localStorage, endpoint: localStorage, "admin-key": sessionStorage };
const OPERATOR_REFRESH_MS = 1000;

const state = {
  messages: [], // the conversation sent with each request (system prompt aside)
  pendingToolCalls: [], // tool calls of the last reply still waiting for a result
  controller: null, // the AbortController of the reply streaming now
  model: null,
  pauseMode: null,
  epoch: 0, // bumped by Clear: a reply that ends after it belongs to no conversation
};
const view = transcriptView($("transcript"));

function conn() {
  return { base: $("endpoint").value.trim(), apiKey: $("api-key").value.trim(), adminKey: $("admin-key").value.trim() };
}

// -- settings ------------------------------------------------------------------

for (const [id, storage] of Object.entries(STORED)) {
  $(id).value = storage.getItem(`agentgate.${id}`) || "";
  $(id).addEventListener("change", () => {
    const value = $(id).value.trim();
    if (value) storage.setItem(`agentgate.${id}`, value);
    else storage.removeItem(`agentgate.${id}`);
    if (id !== "admin-key") loadModel();
    if (id !== "api-key") refreshOperator();
  });
}

function numberSetting(id, parse) {
  const raw = $(id).value.trim();
  const value = raw === "" ? null : parse(raw);
  return Number.isFinite(value) ? value : null;
}

/** The tools box as a list, null when empty; throws a readable error for bad JSON. */
function toolsSetting() {
  const raw = $("tools").value.trim();
  if (!raw) return null;
  let tools;
  try {
    tools = JSON.parse(raw);
  } catch (e) {
    throw new Error(`Tools: not JSON (${e.message})`);
  }
  if (!Array.isArray(tools)) tools = [tools];
  return tools;
}

function requestBody() {
  const body = { messages: [], stream: true, stream_options: { include_usage: true } };
  if (state.model) body.model = state.model;
  const system = $("system").value.trim();
  if (system) body.messages.push({ role: "system", content: system });
  body.messages.push(...state.messages);
  const temperature = numberSetting("temperature", Number);
  const maxTokens = numberSetting("max-tokens", (v) => parseInt(v, 10));
  const seed = numberSetting("seed", (v) => parseInt(v, 10));
  if (temperature !== null) body.temperature = temperature;
  if (maxTokens !== null) body.max_tokens = maxTokens;
  if (seed !== null) body.seed = seed;
  const tools = toolsSetting();
  if (tools) {
    body.tools = tools;
    body.tool_choice = $("tool-choice").value;
  }
  return body;
}

async function loadModel() {
  try {
    const models = await listModels(conn());
    state.model = models[0]?.id ?? null;
    $("model").textContent = `model: ${state.model ?? "none served"}`;
  } catch (e) {
    state.model = null;
    $("model").textContent = e.status === 401 ? "model: enter an API key" : `model: unavailable (${e.message})`;
  }
}

// -- chat ----------------------------------------------------------------------

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  $("transcript").setAttribute("aria-busy", String(busy));
}

function updatePromptLabel() {
  const next = state.pendingToolCalls[0];
  const label = next ? `Result of ${next.function.name || "the tool call"} (${next.id || "no id"})` : "Message";
  $("prompt-label").textContent = label;
  $("prompt").placeholder = next
    ? `${label}: sent back as a tool message`
    : "Message the model (Enter sends, Shift+Enter for a new line, Esc stops)";
}

async function send(text) {
  $("tools-error").textContent = "";
  let body;
  const call = state.pendingToolCalls.shift();
  const message = call ? { role: "tool", tool_call_id: call.id, content: text } : { role: "user", content: text };
  state.messages.push(message);
  try {
    body = requestBody();
  } catch (e) {
    state.messages.pop();
    if (call) state.pendingToolCalls.unshift(call);
    $("tools-error").textContent = e.message;
    return;
  }
  view.addMessage(message, call);
  $("prompt").value = "";
  updatePromptLabel();
  if (state.pendingToolCalls.length) return; // the model answers once every call has its result

  const epoch = state.epoch;
  const reply = new Reply();
  const bubble = view.addReply();
  state.controller = new AbortController();
  setBusy(true);
  try {
    for await (const chunk of streamChat(conn(), body, state.controller.signal)) {
      reply.apply(chunk);
      bubble.update(reply);
    }
  } catch (e) {
    if (e.name === "AbortError") reply.stopped = true;
    else reply.error = e instanceof ApiError || e instanceof Error ? e.message : String(e);
  } finally {
    state.controller = null;
    setBusy(false);
  }
  bubble.update(reply, true);
  if (epoch !== state.epoch) return;
  if (reply.error && !reply.message()) {
    state.messages.pop(); // not answered: the prompt goes back to the box to send again
    if (call) state.pendingToolCalls.unshift(call);
    if (!$("prompt").value) $("prompt").value = text;
  } else if (reply.message()) {
    state.messages.push(reply.message());
    if (!reply.stopped && !reply.error) state.pendingToolCalls = reply.toolCalls.filter(Boolean);
  }
  updatePromptLabel();
  $("prompt").focus();
}

function stop() {
  state.controller?.abort();
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (text && !state.controller) send(text);
});
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape") stop();
});
$("stop").addEventListener("click", stop);
$("connection").addEventListener("submit", (event) => event.preventDefault());
$("clear").addEventListener("click", () => {
  stop();
  state.epoch += 1;
  state.messages = [];
  state.pendingToolCalls = [];
  view.clear();
  updatePromptLabel();
});

// -- operator strip --------------------------------------------------------------

let refreshing = false;
let timer = null;

async function refreshOperator() {
  clearTimeout(timer);
  const c = conn();
  $("operator").hidden = !c.adminKey;
  if (!c.adminKey) return;
  timer = setTimeout(refreshOperator, OPERATOR_REFRESH_MS);
  if (refreshing || document.hidden) return;
  refreshing = true;
  try {
    const [paused, m] = await Promise.all([isPaused(c), fetchMetrics(c)]);
    showPaused(paused);
    $("op-running").textContent = m.agentgate_requests_running ?? "–";
    $("op-waiting").textContent = m.agentgate_requests_waiting ?? "–";
    const kv = m.agentgate_kv_cache_usage_ratio;
    $("op-kv").textContent = kv === undefined ? "–" : kv > 0 && kv < 0.001 ? "<0.1%" : `${(kv * 100).toFixed(1)}%`;
    $("op-error").textContent = "";
  } catch (e) {
    $("op-error").textContent = e.message;
  } finally {
    refreshing = false;
  }
}

function showPaused(paused) {
  if (!paused) state.pauseMode = null;
  const strip = $("op-state");
  strip.dataset.paused = String(paused);
  strip.textContent = paused ? `paused${state.pauseMode ? ` (${state.pauseMode})` : ""}` : "serving";
}

async function operate(action, pending) {
  $("op-pause").disabled = $("op-resume").disabled = true;
  $("op-state").textContent = pending;
  try {
    const result = await action();
    if (result.is_paused) state.pauseMode = result.mode;
    showPaused(result.is_paused);
    $("op-error").textContent = "";
  } catch (e) {
    $("op-error").textContent = e.message;
  } finally {
    $("op-pause").disabled = $("op-resume").disabled = false;
    refreshOperator();
  }
}

$("op-pause").addEventListener("click", () => {
  const mode = $("op-mode").value;
  operate(() => pause(conn(), mode), `pausing (${mode})…`);
});
$("op-resume").addEventListener("click", () => operate(() => resume(conn()), "resuming…"));
document.addEventListener("visibilitychange", refreshOperator);

updatePromptLabel();
loadModel();
refreshOperator();
