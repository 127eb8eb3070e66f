// The transcript: user, tool and assistant messages; replies update in place
// as they stream (text, tool calls, TTFT and tokens/s).

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function transcriptView(root) {
  function add(role, title) {
    const article = element("article", `msg ${role}`);
    article.append(element("h2", "who", title));
    root.append(article);
    return article;
  }

  // Keeps the newest text in view, unless the reader has scrolled up.
  function follow(force = false) {
    const nearBottom = root.scrollHeight - root.scrollTop - root.clientHeight < 48;
    if (force || nearBottom) root.scrollTop = root.scrollHeight;
  }

  return {
    clear() {
      root.replaceChildren();
    },

    addMessage(message, call) {
      const title = message.role === "tool" ? `Tool result · ${call?.function.name || ""}` : "You";
      add(message.role, title).append(element("div", "content", message.content));
      follow(true);
    },

    addReply() {
      const article = add("assistant", "Assistant");
      article.setAttribute("aria-busy", "true");
      const content = element("div", "content");
      const calls = element("ol", "tool-calls");
      const stats = element("p", "stats", "waiting for the first token…");
      article.append(content, calls, stats);
      follow(true);
      return {
        update(reply, final = false) {
          const atBottom = root.scrollHeight - root.scrollTop - root.clientHeight < 48;
          if (content.textContent !== reply.content) content.textContent = reply.content;
          renderToolCalls(calls, reply.toolCalls, final);
          stats.textContent = statsLine(reply, final);
          if (final) {
            article.removeAttribute("aria-busy");
            article.dataset.state = reply.error ? "error" : reply.stopped ? "stopped" : "done";
            if (reply.error) stats.setAttribute("role", "alert");
          }
          follow(atBottom);
        },
      };
    },
  };
}

function renderToolCalls(list, calls, final) {
  calls.forEach((call, index) => {
    if (!call) return;
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
    if (final) {
      try {
        args = JSON.stringify(JSON.parse(args), null, 2);
        item.dataset.valid = "true";
      } catch {
        item.dataset.valid = "false";
      }
    }
    item.querySelector(".tool-args").textContent = args;
  });
}

function statsLine(reply, final) {
  const parts = [];
  if (reply.ttftMs !== null) parts.push(`TTFT ${Math.round(reply.ttftMs)} ms`);
  const rate = reply.tokensPerSecond;
  if (rate !== null) parts.push(`${rate.toFixed(1)} tok/s`);
  if (reply.firstTokenAt !== null) parts.push(`${reply.usage ? "" : "≈"}${reply.tokens} tokens`);
  if (final) {
    if (reply.error) parts.push(`error: ${reply.error}`);
    else if (reply.stopped) parts.push("stopped");
    else if (reply.finishReason) parts.push(`finish: ${reply.finishReason}`);
  } else if (reply.firstTokenAt === null) {
    return "waiting for the first token…";
  }
  return parts.join(" · ");
}
