// The transcript: user, tool and assistant messages. Assistant text is
// rendered as sanitized Markdown (markdown.js); a reply updates in place as it
// streams (text, tool calls, TTFT and tokens/s), then is redrawn from the
// message kept in the conversation. User messages can be edited, every
// message copied.

import { copyButton, renderMarkdown } from "./markdown.js";

const RENDER_EVERY_MS = 60; // Markdown is re-rendered at most this often while a reply streams

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function textOf(message) {
  return typeof message.content === "string" ? message.content : "";
}

/**
 * @param {HTMLElement} root
 * @param {{edit: (index: number, text: string) => void, canEdit: () => boolean}} actions
 */
export function transcriptView(root, actions) {
  // Keeps the newest text in view, unless the reader has scrolled up.
  const atBottom = () => root.scrollHeight - root.scrollTop - root.clientHeight < 48;
  const follow = (force = false, was = atBottom()) => {
    if (force || was) root.scrollTop = root.scrollHeight;
  };

  function article(role, title) {
    const node = element("article", `msg ${role}`);
    node.append(element("h2", "who", title));
    return node;
  }

  function userMessage(message, index) {
    const node = article(message.role, message.role === "tool" ? toolTitle(message) : "You");
    const content = element("div", "content plain", textOf(message));
    const bar = element("div", "msg-actions");
    bar.append(copyButton(() => textOf(message), message.role === "tool" ? "Copy tool result" : "Copy message"));
    if (message.role === "user") {
      const edit = element("button", "small", "Edit");
      edit.type = "button";
      edit.setAttribute("aria-label", "Edit message");
      edit.addEventListener("click", () => {
        if (actions.canEdit()) startEdit(node, content, bar, message, index);
      });
      bar.append(edit);
    }
    node.append(content, bar);
    return node;
  }

  function startEdit(node, content, bar, message, index) {
    const box = element("textarea", "edit-box");
    box.value = textOf(message);
    box.rows = Math.min(12, Math.max(3, box.value.split("\n").length + 1));
    box.setAttribute("aria-label", "Edit message");
    const save = element("button", "small primary", "Save & regenerate");
    const cancel = element("button", "small", "Cancel");
    save.type = cancel.type = "button";
    const editor = element("div", "editor");
    const buttons = element("div", "msg-actions");
    buttons.append(save, cancel);
    editor.append(box, buttons);
    content.hidden = bar.hidden = true;
    node.append(editor);
    const close = () => {
      editor.remove();
      content.hidden = bar.hidden = false;
    };
    save.addEventListener("click", () => {
      const text = box.value.trim();
      if (!text) return;
      close();
      actions.edit(index, text);
    });
    cancel.addEventListener("click", close);
    box.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        close();
        bar.querySelector("button:last-child")?.focus();
      } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        save.click();
      }
    });
    box.focus();
  }

  /** An assistant message: kept (`message.meta`) or streaming (`live` is the Reply). */
  function assistantMessage(message, live = null) {
    const node = article("assistant", "Assistant");
    const thinking = element("details", "reasoning");
    const thought = element("div", "thought");
    thinking.append(element("summary", "", "Thinking"), thought);
    thinking.hidden = true;
    const content = element("div", "content markdown");
    const calls = element("ol", "tool-calls");
    const stats = element("p", "stats");
    const bar = element("div", "msg-actions");
    node.append(thinking, content, calls, stats, bar);
    let rendered = null;
    let thinkingShown = null; // while streaming: null until the thinking starts
    let renderedAt = 0;
    let timer = null;
    const renderText = (text, now = false) => {
      if (text === rendered) return;
      clearTimeout(timer);
      const wait = RENDER_EVERY_MS - (performance.now() - renderedAt);
      if (!now && wait > 0) {
        timer = setTimeout(() => renderText(text, true), wait);
        return;
      }
      const was = atBottom();
      renderMarkdown(content, text);
      rendered = text;
      renderedAt = performance.now();
      follow(false, was);
    };
    const show = (text, toolCalls, truncated, meta, final, reasoning = "") => {
      thinking.hidden = !reasoning; // collapsed above the answer; open while only the thinking has come
      if (thought.textContent !== reasoning) thought.textContent = reasoning;
      // open once, while it thinks; folded once when the answer starts (then the reader decides)
      if (!final && reasoning && thinkingShown === null) thinking.open = thinkingShown = true;
      if (!final && thinkingShown && (text || toolCalls.length)) thinking.open = thinkingShown = false;
      renderText(text || "", final);
      renderToolCalls(calls, toolCalls, truncated, final, meta);
      stats.textContent = statsLine(meta, final);
      if (final) {
        node.removeAttribute("aria-busy");
        node.dataset.state = meta.error ? "error" : meta.stopped ? "stopped" : "done";
        if (meta.error) stats.setAttribute("role", "alert");
        if (text && !bar.childElementCount) bar.append(copyButton(() => text, "Copy reply"));
      }
    };
    if (live) {
      node.setAttribute("aria-busy", "true");
      show("", [], [], live.snapshot(), false);
      return {
        node,
        update(reply, final = false) {
          const was = atBottom();
          show(reply.content, final ? reply.completeCalls : reply.toolCalls, final ? reply.truncatedCalls : [],
               reply.snapshot(), final, reply.reasoning); // prettier-ignore
          follow(false, was);
        },
      };
    }
    const meta = message.meta || {};
    show(textOf(message), message.tool_calls || [], meta.truncatedCalls || [], meta, true, message.reasoning || "");
    return { node };
  }

  function messageNode(message, index) {
    return message.role === "assistant" ? assistantMessage(message).node : userMessage(message, index);
  }

  return {
    /** Draws a whole conversation. */
    show(messages) {
      root.replaceChildren(...messages.map(messageNode));
      follow(true);
    },

    /** Appends one kept message. */
    add(message, index) {
      root.append(messageNode(message, index));
      follow(true);
    },

    /** A reply that streams in; `done(message)` redraws it from the kept message. */
    addReply(reply) {
      const live = assistantMessage(null, reply);
      root.append(live.node);
      follow(true);
      return {
        update: live.update,
        done(message) {
          live.node.replaceWith(assistantMessage(message).node);
        },
      };
    },
  };
}

function toolTitle(message) {
  const name = message.meta?.name;
  return ["Tool result", name, message.tool_call_id].filter(Boolean).join(" · ");
}

function renderToolCalls(list, calls, truncated, final, meta) {
  const all = [...calls.filter(Boolean), ...truncated];
  all.forEach((call, index) => {
    let item = list.children[index];
    if (!item) {
      item = element("li", "tool-call");
      item.append(element("code", "tool-name"), element("span", "tool-id"), element("pre", "tool-args"));
      list.append(item);
    }
    item.dataset.index = String(index);
    item.querySelector(".tool-name").textContent = `${call.function.name || "…"}()`;
    item.querySelector(".tool-id").textContent = call.id;
    let args = call.function.arguments;
    const cut = truncated.includes(call);
    if (final && !cut) {
      try {
        args = JSON.stringify(JSON.parse(args), null, 2);
        item.dataset.valid = "true";
      } catch {
        item.dataset.valid = "false";
      }
    }
    if (cut) {
      item.dataset.valid = "false";
      item.dataset.truncated = "true";
      let note = item.querySelector(".tool-note");
      if (!note) item.append((note = element("p", "tool-note")));
      const why = meta.stopped ? "stopped" : meta.error ? "error" : `finish: ${meta.finishReason || "none"}`;
      note.textContent = `incomplete (${why}): not sent to a tool`;
    }
    item.querySelector(".tool-args").textContent = args;
  });
  while (list.children.length > all.length) list.lastChild.remove();
}

/** "TTFT 120 ms · 19.8 tok/s · 40 tokens · stalled 2.1 s · finish: length" from a reply's numbers. */
export function statsLine(meta, final) {
  if (!final && meta.ttftMs === null) return "waiting for the first token…";
  const parts = [];
  if (meta.ttftMs !== null && meta.ttftMs !== undefined) parts.push(`TTFT ${Math.round(meta.ttftMs)} ms`);
  if (meta.tokensPerSecond) parts.push(`${meta.tokensPerSecond.toFixed(1)} tok/s`);
  if (meta.tokens) parts.push(`${meta.counted ? "" : "≈"}${meta.tokens} tokens`);
  if (meta.stalledMs) parts.push(`stalled ${(meta.stalledMs / 1000).toFixed(1)} s`);
  if (final) {
    if (meta.error) parts.push(`error: ${meta.error}`);
    else if (meta.stopped) parts.push("stopped");
    else if (meta.finishReason) parts.push(`finish: ${meta.finishReason}`);
  }
  return parts.join(" · ");
}
