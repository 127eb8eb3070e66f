// The operator strip (shown with an admin key): the pause state, pause in a
// chosen mode and resume, and the engines' gauges, refreshed every second.
// When the key is refused or the server cannot be reached, the strip says so
// and shows no numbers: nothing stale stays on screen.

import { ApiError, fetchMetrics, isPaused, pause, resume } from "./api.js";

const $ = (id) => document.getElementById(id);
const REFRESH_MS = 1000;
export const PAUSE_MODES = {
  keep: "keep (freeze in place)",
  wait: "wait (let running finish)",
  abort: "abort (end running)",
};

/** Fills a <select> with the pause modes. */
export function pauseModePicker(select) {
  select.replaceChildren(...Object.entries(PAUSE_MODES).map(([mode, text]) => new Option(text, mode)));
}

/** What a failed operator call means, for the pill and the message below it. */
export function operatorFailure(error) {
  if (error instanceof ApiError && error.status === 401) {
    return { pill: "admin key rejected", message: `The admin key was not accepted (the server says: ${error.message}).` };
  }
  if (error instanceof ApiError && error.status === 403) {
    return { pill: "admin key rejected", message: `This key is not the admin key (the server says: ${error.message}).` };
  }
  return { pill: "unreachable", message: `The server did not answer: ${error.message}` };
}

export function operatorStrip(connection) {
  pauseModePicker($("op-mode"));
  let refreshing = false;
  let timer = null;
  let pauseMode = null;

  function showPaused(paused) {
    if (!paused) pauseMode = null;
    const pill = $("op-state");
    pill.dataset.paused = String(paused);
    pill.dataset.state = paused ? "paused" : "serving";
    pill.textContent = paused ? `paused${pauseMode ? ` (${pauseMode})` : ""}` : "serving";
  }

  function showFailure(error) {
    const failure = operatorFailure(error);
    const pill = $("op-state");
    pill.dataset.paused = "false";
    pill.dataset.state = "error";
    pill.textContent = failure.pill;
    for (const id of ["op-running", "op-waiting", "op-kv"]) $(id).textContent = "–";
    $("op-error").textContent = failure.message;
    $("op-pause").disabled = $("op-resume").disabled = true;
  }

  async function refresh() {
    clearTimeout(timer);
    const c = connection();
    $("operator").hidden = !c.adminKey;
    if (!c.adminKey) return;
    timer = setTimeout(refresh, REFRESH_MS);
    if (refreshing || document.hidden) return;
    refreshing = true;
    try {
      const [paused, m] = await Promise.all([isPaused(c), fetchMetrics(c)]);
      if (connection().adminKey !== c.adminKey) return; // the key changed meanwhile: its own refresh reports
      showPaused(paused);
      $("op-running").textContent = m.agentgate_requests_running ?? "–";
      $("op-waiting").textContent = m.agentgate_requests_waiting ?? "–";
      const kv = m.agentgate_kv_cache_usage_ratio;
      $("op-kv").textContent = kv === undefined ? "–" : kv > 0 && kv < 0.001 ? "<0.1%" : `${(kv * 100).toFixed(1)}%`;
      $("op-error").textContent = "";
      $("op-pause").disabled = $("op-resume").disabled = false;
    } catch (e) {
      if (connection().adminKey === c.adminKey) showFailure(e);
    } finally {
      refreshing = false;
    }
  }

  async function operate(action, pending) {
    $("op-pause").disabled = $("op-resume").disabled = true;
    $("op-state").textContent = pending;
    try {
      const result = await action();
      if (result.is_paused) pauseMode = result.mode;
      showPaused(result.is_paused);
      $("op-error").textContent = "";
      $("op-pause").disabled = $("op-resume").disabled = false;
    } catch (e) {
      showFailure(e);
    } finally {
      refresh();
    }
  }

  $("op-pause").addEventListener("click", () => {
    const mode = $("op-mode").value;
    operate(() => pause(connection(), mode), `pausing (${mode})…`);
  });
  $("op-resume").addEventListener("click", () => operate(() => resume(connection()), "resuming…"));
  document.addEventListener("visibilitychange", refresh);
  return { refresh };
}
