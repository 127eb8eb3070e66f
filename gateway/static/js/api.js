// The gateway's HTTP API, as the page uses it. Every call takes a connection
// {base, apiKey, adminKey}: base "" means this page's own origin.

import { sseEvents } from "./sse.js";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

export function apiUrl(conn, path) {
  return (conn.base || "").replace(/\/+$/, "") + path;
}

export function headers(key, json = false) {
  const h = {};
  if (key) h.Authorization = `Bearer ${key}`;
  if (json) h["Content-Type"] = "application/json";
  return h;
}

export async function errorFrom(response) {
  let message = "";
  try {
    message = (await response.json()).error?.message || "";
  } catch {
    // not an OpenAI error body
  }
  return new ApiError(response.status, message || `${response.status} ${response.statusText}`.trim());
}

async function request(conn, path, { key, method = "GET", body } = {}) {
  const response = await fetch(apiUrl(conn, path), {
    method,
    headers: headers(key, body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw await errorFrom(response);
  return response;
}

/** Streams /v1/chat/completions: yields each chat.completion.chunk. Abort with `signal`;
 * `sessionId` is sent as X-Session-Id. */
export async function* streamChat(conn, body, signal, sessionId = "") {
  const h = headers(conn.apiKey, true);
  if (sessionId) h["X-Session-Id"] = sessionId;
  const response = await fetch(apiUrl(conn, "/v1/chat/completions"), {
    method: "POST",
    headers: h,
    body: JSON.stringify({ ...body, stream: true }),
    signal,
  });
  if (!response.ok) throw await errorFrom(response);
  for await (const event of sseEvents(response.body)) {
    if (event.data === "[DONE]") return;
    const chunk = JSON.parse(event.data);
    if (chunk.error) throw new ApiError(chunk.error.code || 500, chunk.error.message || "stream error");
    yield chunk;
  }
}

export async function listModels(conn) {
  return (await (await request(conn, "/v1/models", { key: conn.apiKey })).json()).data;
}

/** A server session (Redis) with its messages; the owner's API key or the admin key. */
export async function getSession(conn, sessionId) {
  return (await request(conn, `/v1/sessions/${encodeURIComponent(sessionId)}`, { key: conn.apiKey })).json();
}

/** The operator dashboard's numbers (admin). */
export async function dashboardStats(conn) {
  return (await request(conn, "/dashboard/stats", { key: conn.adminKey })).json();
}

/** Aborts by request ids, session id or API key (admin); nothing named aborts all. */
export async function abortRequests(conn, filter) {
  return (await request(conn, "/abort_requests", { key: conn.adminKey, method: "POST", body: filter })).json();
}

export async function isPaused(conn) {
  return (await (await request(conn, "/is_paused", { key: conn.adminKey })).json()).is_paused;
}

export async function pause(conn, mode) {
  const path = `/pause?mode=${encodeURIComponent(mode)}`;
  return (await request(conn, path, { key: conn.adminKey, method: "POST" })).json();
}

export async function resume(conn) {
  return (await request(conn, "/resume", { key: conn.adminKey, method: "POST" })).json();
}

/** /metrics as {name or name{labels}: value}; sent with the admin key, which a server listening
 * off loopback asks for (on loopback /metrics is open and ignores it). */
export async function fetchMetrics(conn) {
  return parsePrometheus(await (await request(conn, "/metrics", { key: conn.adminKey })).text());
}

/** Prometheus text exposition format: one sample per line, `# ...` lines skipped. */
export function parsePrometheus(text) {
  const samples = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const cut = line.lastIndexOf(" ");
    if (cut > 0) samples[line.slice(0, cut).trim()] = Number(line.slice(cut + 1));
  }
  return samples;
}
