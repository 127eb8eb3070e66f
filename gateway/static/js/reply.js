// One assistant reply as it streams: a reasoning model's thinking (delta.reasoning),
// content, tool calls merged from their deltas (OpenAI's shape: index, id, function
// name, argument fragments), finish reason, usage and timings.

/** A gap between tokens longer than this, and than STALL_FACTOR times the
 * median gap, is a stall (the server paused, or the request was queued): it
 * is left out of tokens/s and reported on its own. */
export const STALL_MIN_MS = 1000;
export const STALL_FACTOR = 10;

export class Reply {
  constructor(now = performance.now()) {
    this.sentAt = now;
    this.firstTokenAt = null;
    this.lastTokenAt = null;
    this.gaps = []; // ms between consecutive chunks that carried tokens
    this.reasoning = ""; // the thinking, apart from the answer (a reasoning model's)
    this.content = "";
    this.toolCalls = [];
    this.pieces = 0; // chunks that carried text or arguments: the token count when usage is missing
    this.finishReason = null;
    this.usage = null;
    this.model = null;
    this.stopped = false;
    this.error = null;
  }

  /** Folds one chat.completion.chunk into the reply (choice 0; the page asks for n=1). */
  apply(chunk, now = performance.now()) {
    if (chunk.usage) this.usage = chunk.usage;
    if (chunk.model) this.model = chunk.model;
    for (const choice of chunk.choices || []) {
      if (choice.index !== 0) continue;
      const delta = choice.delta || {};
      let grew = false;
      const thought = delta.reasoning ?? delta.reasoning_content; // the same text under two names
      if (thought) {
        this.reasoning += thought;
        grew = true;
      }
      if (delta.content) {
        this.content += delta.content;
        grew = true;
      }
      for (const part of delta.tool_calls || []) grew = mergeToolCall(this.toolCalls, part) || grew;
      if (grew) {
        this.pieces += 1;
        if (this.lastTokenAt !== null) this.gaps.push(now - this.lastTokenAt);
        this.firstTokenAt ??= now;
        this.lastTokenAt = now;
      }
      if (choice.finish_reason) this.finishReason = choice.finish_reason;
    }
  }

  /** Completion tokens: the server's count when it sent usage, else the chunks seen (an estimate). */
  get tokens() {
    return this.usage?.completion_tokens ?? this.pieces;
  }

  get ttftMs() {
    return this.firstTokenAt === null ? null : this.firstTokenAt - this.sentAt;
  }

  /** Time between the first and last token spent in stalls (see STALL_MIN_MS). */
  get stalledMs() {
    if (this.gaps.length < 2) return 0;
    const sorted = [...this.gaps].sort((a, b) => a - b);
    const limit = Math.max(STALL_MIN_MS, STALL_FACTOR * sorted[Math.floor(sorted.length / 2)]);
    return this.gaps.reduce((sum, gap) => (gap > limit ? sum + gap : sum), 0);
  }

  /** Decode rate: tokens after the first over the time from the first to the last, stalls left out. */
  get tokensPerSecond() {
    const span = (this.lastTokenAt ?? 0) - (this.firstTokenAt ?? 0) - this.stalledMs;
    return this.tokens > 1 && span > 0 ? ((this.tokens - 1) * 1000) / span : null;
  }

  /** Tool calls a tool can answer: a name, and arguments that parse as a JSON object (a call
   * cut short by max_tokens, Stop or an error has arguments that do not). */
  get completeCalls() {
    return this.toolCalls.filter((call) => call && call.function.name && parsesAsObject(call.function.arguments));
  }

  /** Tool calls left unfinished: shown, never sent back, never awaited. */
  get truncatedCalls() {
    const complete = new Set(this.completeCalls);
    return this.toolCalls.filter((call) => call && !complete.has(call));
  }

  /** The numbers the page shows (and keeps with the message as its `meta`). */
  snapshot() {
    return {
      ttftMs: this.ttftMs,
      tokensPerSecond: this.tokensPerSecond,
      tokens: this.firstTokenAt === null ? 0 : this.tokens,
      counted: Boolean(this.usage),
      stalledMs: this.stalledMs,
      finishReason: this.finishReason,
      stopped: this.stopped,
      error: this.error,
      model: this.model,
    };
  }

  /** The message to keep in the conversation (with what the page shows in `meta`), or null when nothing came. */
  message() {
    if (!this.content && !this.toolCalls.length && !this.reasoning) return null;
    const calls = this.completeCalls;
    const message = { role: "assistant", content: this.content || (calls.length ? null : "") };
    if (calls.length) message.tool_calls = calls;
    if (this.reasoning) message.reasoning = this.reasoning; // sent back: the template may reuse it
    message.meta = this.snapshot();
    const truncated = this.truncatedCalls;
    if (truncated.length) message.meta.truncatedCalls = truncated;
    return message;
  }
}

function parsesAsObject(text) {
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === "object" && !Array.isArray(value);
  } catch {
    return false;
  }
}

/** Merges one streamed tool-call delta into `calls`; true when it added anything. */
export function mergeToolCall(calls, part) {
  const index = part.index ?? calls.length;
  const call = (calls[index] ??= { id: "", type: "function", function: { name: "", arguments: "" } });
  if (part.id) call.id = part.id;
  if (part.type) call.type = part.type;
  const fn = part.function || {};
  if (fn.name) call.function.name += fn.name;
  if (fn.arguments) call.function.arguments += fn.arguments;
  return Boolean(part.id || fn.name || fn.arguments);
}
