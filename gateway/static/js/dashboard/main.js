// The operator dashboard: polls /dashboard/stats every second from the moment it
// opens (a loopback server with no keys answers without one), asks for the admin
// key only once the server refuses with 401/403 and says so, plots the last minutes, lists the running requests, shows KV retention for
// agent programs, and pauses, resumes and aborts through the operator routes,
// each after a confirmation.

import { ApiError, abortRequests, dashboardStats, pause, resume } from "../api.js";
import { ask } from "../dialog.js";
import { operatorFailure, pauseModePicker } from "../operator.js";
import { keepInput } from "../settings.js";
import { themePicker } from "../theme.js";
import { Chart } from "./charts.js";
import { drawRetention } from "./retention.js";
import { Timeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
const STORED = { "admin-key": sessionStorage, endpoint: localStorage }; // shared with the playground

const timeline = new Timeline(Number($("window").value));
const span = () => timeline.windowSeconds;
const charts = {
  load: new Chart($("plot-load"), { window: span }),
  kv: new Chart($("plot-kv"), { unit: "%", digits: 1, max: 1, window: span }),
  prefix: new Chart($("plot-prefix"), { unit: "%", digits: 0, max: 100, window: span }),
  tps: new Chart($("plot-tps"), { digits: 1, window: span }),
  ttft: new Chart($("plot-ttft"), { unit: " ms", digits: 0, window: span }),
  itl: new Chart($("plot-itl"), { unit: " ms", digits: 1, window: span }),
};
let timer = null;
let polling = false;

function connection() {
  return { base: $("endpoint").value.trim(), apiKey: "", adminKey: $("admin-key").value.trim() };
}

function setControls(enabled) {
  for (const node of document.querySelectorAll(".operate button, #requests button")) node.disabled = !enabled;
}

function showState(text, state) {
  $("state").textContent = text;
  $("state").dataset.state = state;
  $("state").dataset.paused = String(state === "paused");
}

function forget() {
  for (const chart of Object.values(charts)) chart.clear();
  timeline.reset();
  $("requests").replaceChildren();
  $("requests-count").textContent = "";
  $("retention").replaceChildren();
  $("updated").textContent = "";
}

function formatAge(seconds) {
  return seconds < 60 ? `${seconds.toFixed(1)} s` : `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

const PAUSE_STATES = { paused_all: "nothing runs", paused_new: "new requests wait" };

function drawRequests(requests, engines) {
  $("requests-count").textContent = `(${requests.length})`;
  $("requests").replaceChildren(
    ...requests.map((r) => {
      const row = document.createElement("tr");
      const engine = `engine ${engines.indexOf(r.engine) + 1}`;
      const cells = [r.id, engine, r.session ?? "–", r.owner, r.adapter ?? "–", formatAge(r.age), r.prompt_tokens, r.output_tokens];
      cells.forEach((value, i) => {
        const cell = document.createElement(i === 0 ? "th" : "td");
        if (i === 0) cell.scope = "row";
        if (i === 1) cell.title = r.engine;
        if (i >= 4) cell.className = "num";
        cell.textContent = String(value);
        row.append(cell);
      });
      const action = document.createElement("td");
      const abort = document.createElement("button");
      abort.type = "button";
      abort.className = "small danger";
      abort.textContent = "Abort";
      abort.setAttribute("aria-label", `Abort ${r.id}`);
      abort.addEventListener("click", () => confirmAbort({ request_ids: [r.id] }, `request ${r.id}`));
      action.append(abort);
      row.append(action);
      return row;
    }),
  );
}

/** Whether a failed poll was the server asking for a key (401) or a different one (403). */
function keyRefused(error) {
  return error instanceof ApiError && (error.status === 401 || error.status === 403);
}

async function poll() {
  clearTimeout(timer);
  const c = connection();
  timer = setTimeout(poll, POLL_MS);
  if (polling || document.hidden) return;
  polling = true;
  try {
    const snapshot = await dashboardStats(c);
    if (connection().adminKey !== c.adminKey) return;
    timeline.push(snapshot);
    for (const [name, chart] of Object.entries(charts)) chart.update(timeline.series(name));
    drawRequests(snapshot.requests, snapshot.engines.map((e) => e.address));
    drawRetention($("retention"), snapshot.retention);
    const modes = [...new Set(snapshot.engines.map((e) => PAUSE_STATES[e.paused]).filter(Boolean))];
    showState(snapshot.paused ? `paused: ${modes.join(", ")}` : "serving", snapshot.paused ? "paused" : "serving");
    const engines = snapshot.engines.length;
    const cut = `${snapshot.budget_closed} repl${snapshot.budget_closed === 1 ? "y" : "ies"} cut by their budget`;
    $("updated").textContent = `replica ${snapshot.replica} · ${engines} engine${engines > 1 ? "s" : ""} · ${cut} · ${new Date(snapshot.time * 1000).toLocaleTimeString()}`;
    $("error").textContent = "";
    setControls(true);
  } catch (e) {
    if (connection().adminKey !== c.adminKey) return;
    setControls(false);
    forget();
    if (!c.adminKey && keyRefused(e)) {
      // This server has keys: nothing to show until one is typed (its change polls again).
      clearTimeout(timer);
      showState("enter the admin key", "unknown");
      $("error").textContent = `This server asks for the admin key (it answered ${e.status}: ${e.message}). Enter it above.`;
      return;
    }
    const failure = operatorFailure(e);
    showState(failure.pill, "error");
    $("error").textContent = failure.message;
  } finally {
    polling = false;
  }
}

async function operate(question, action) {
  if (!(await ask(question))) return;
  try {
    $("notice").textContent = await action();
    $("error").textContent = "";
  } catch (e) {
    $("error").textContent = operatorFailure(e).message;
  }
  poll();
}

function confirmAbort(filter, what) {
  operate(
    { title: `Abort ${what}?`, message: "Its streams end now with finish reason “abort”.", confirm: "Abort", danger: true },
    async () => {
      const result = await abortRequests(connection(), filter);
      const ids = result.aborted ?? [];
      return `Aborted ${ids.length} request(s)${ids.length ? `: ${ids.join(", ")}` : ""}.`;
    },
  );
}

$("pause").addEventListener("click", () => {
  const mode = $("pause-mode").value;
  const what = { keep: "Running requests freeze in place", wait: "Running requests finish", abort: "Running requests end now" };
  operate(
    { title: `Pause every engine (${mode})?`, message: `${what[mode]}; new requests wait until you resume.`, confirm: "Pause" },
    async () => ((await pause(connection(), mode)).is_paused ? `Paused (${mode}).` : "Not paused."),
  );
});
$("resume").addEventListener("click", () =>
  operate({ title: "Resume every engine?", confirm: "Resume" }, async () =>
    (await resume(connection())).is_paused ? "Still paused." : "Resumed.",
  ),
);
$("abort-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const kind = $("abort-kind").value;
  const value = $("abort-value").value.trim();
  if (!value) return;
  const filter = kind === "request_ids" ? { request_ids: [value] } : { [kind]: value };
  const label = kind === "request_ids" ? `request ${value}` : kind === "session_id" ? `the requests of session ${value}` : "the requests of that API key";
  confirmAbort(filter, label);
});
$("connection").addEventListener("submit", (event) => event.preventDefault());
$("window").addEventListener("change", () => {
  timeline.windowSeconds = Number($("window").value);
});
for (const [id, storage] of Object.entries(STORED)) {
  keepInput(id, storage, () => {
    forget();
    poll();
  });
}
themePicker($("theme"));
pauseModePicker($("pause-mode"));
$("theme").addEventListener("change", () => Object.values(charts).forEach((chart) => chart.restyle()));
document.addEventListener("visibilitychange", poll);
poll();
