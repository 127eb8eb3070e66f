// Server-sent events read from a fetch() response body, parsed by the rules
// of the HTML standard's EventSource (lines end with \r\n, \n or \r; `data:`
// lines join with \n; `:` lines are comments; a blank line ends an event).
// No reconnection: a chat completion stream is read once.

/** Yields {event, data, id} for each event in a byte stream. */
export async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SSEParser();
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        finished = true;
        yield* parser.push("", true);
        return;
      }
      yield* parser.push(value, false);
    }
  } finally {
    // The consumer stopped early (break, return or throw): drop the connection.
    if (!finished) reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}

/** Incremental parser: push() text as it arrives, get the events it completes. */
export class SSEParser {
  constructor() {
    this.buffer = "";
    this.data = [];
    this.event = "";
    this.id = "";
  }

  *push(text, end = false) {
    this.buffer += text;
    for (;;) {
      const cut = this.buffer.search(/[\r\n]/);
      if (cut < 0) break;
      // A \r at the very end may be the first half of \r\n: wait for the next chunk.
      if (this.buffer[cut] === "\r" && cut === this.buffer.length - 1 && !end) break;
      const width = this.buffer.startsWith("\r\n", cut) ? 2 : 1;
      const line = this.buffer.slice(0, cut);
      this.buffer = this.buffer.slice(cut + width);
      const event = this.line(line);
      if (event) yield event;
    }
    if (end && this.buffer) {
      // A stream that ends without a blank line ends its last event unfinished: it is dropped, as EventSource does.
      this.buffer = "";
    }
  }

  line(line) {
    if (line === "") {
      if (!this.data.length) {
        this.event = "";
        return null;
      }
      const event = { event: this.event || "message", data: this.data.join("\n"), id: this.id };
      this.data = [];
      this.event = "";
      return event;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id") this.id = value;
    return null;
  }
}
