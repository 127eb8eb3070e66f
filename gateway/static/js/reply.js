// One assistant reply as it streams: content, tool calls merged from their
// deltas (OpenAI's shape: index, id, function name, argument fragments),
// finish reason, usage and timings.

export class Reply {
  constructor(now = performance.now()) {
    this.sentAt = now;
    this.firstTokenAt = null;
    this.lastTokenAt = null;
    this.content = "";
    this.toolCalls = [];
    this.pieces = 0; // chunks that carried text or arguments: the token count when usage is missing
    this.finishReason = null;
    this.usage = null;
    this.stopped = false;
    this.error = null;
  }

  /** Folds one chat.completion.chunk into the reply (choice 0; the page asks for n=1). */
  apply(chunk, now = performance.now()) {
    if (chunk.usage) this.usage = chunk.usage;
    for (const choice of chunk.choices || []) {
      if (choice.index !== 0) continue;
      const delta = choice.delta || {};
      let grew = false;
      if (delta.content) {
        this.content += delta.content;
        grew = true;
      }
      for (const part of delta.tool_calls || []) grew = mergeToolCall(this.toolCalls, part) || grew;
      if (grew) {
        this.pieces += 1;
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

  /** Decode rate: tokens after the first over the time from the first to the last. */
  get tokensPerSecond() {
    const span = (this.lastTokenAt ?? 0) - (this.firstTokenAt ?? 0);
    return this.tokens > 1 && span > 0 ? ((this.tokens - 1) * 1000) / span : null;
  }

  /** The message to send back in the history, or null when nothing came. */
  message() {
    if (!this.content && !this.toolCalls.length) return null;
    const message = { role: "assistant", content: this.content || null };
    if (this.toolCalls.length) message.tool_calls = this.toolCalls.filter(Boolean);
    return message;
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
