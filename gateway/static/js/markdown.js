// Model output as Markdown: marked (CommonMark + GFM) renders it, DOMPurify
// sanitizes the HTML, highlight.js colours code blocks, and every code block
// gets a Copy button. Raw HTML in the model's text is shown as text, never
// parsed; DOMPurify then removes what a link or image could still carry
// (javascript: URLs, event handlers). The libraries are vendored under
// /static/vendor (see its README.md): no CDN, the page works offline.

import DOMPurify from "../vendor/dompurify/purify.es.js";
import hljs from "../vendor/highlight/highlight.min.js";
import { Marked } from "../vendor/marked/marked.esm.js";

const marked = new Marked({
  gfm: true,
  async: false,
  renderer: {
    html({ text }) {
      return escapeHtml(text);
    },
  },
});

const PURIFY = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "option"],
  FORBID_ATTR: ["style"],
  RETURN_DOM_FRAGMENT: true,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

export function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

/** Renders `text` as sanitized Markdown into `target` (replacing its children). */
export function renderMarkdown(target, text) {
  const fragment = DOMPurify.sanitize(marked.parse(text), PURIFY);
  for (const code of fragment.querySelectorAll("pre > code")) {
    decorateCode(code, /(?:^|\s)language-(\S+)/.exec(code.className)?.[1] ?? "");
  }
  target.replaceChildren(fragment);
}

/** Highlights one code block (its fence's language, when highlight.js knows it) and adds its Copy button. */
function decorateCode(code, language) {
  const pre = code.parentElement;
  const source = code.textContent;
  const known = language && hljs.getLanguage(language) ? language : null;
  // highlight.js escapes the text it is given: its HTML holds only its own <span class="hljs-…">.
  code.innerHTML = known ? hljs.highlight(source, { language: known, ignoreIllegals: true }).value : escapeHtml(source);
  code.classList.add("hljs");
  const block = document.createElement("div");
  block.className = "code-block";
  const bar = document.createElement("div");
  bar.className = "code-bar";
  const label = document.createElement("span");
  label.textContent = language || "text";
  bar.append(label, copyButton(() => source, language ? `Copy ${language} code` : "Copy code"));
  pre.replaceWith(block);
  block.append(bar, pre);
}

/** A small "Copy" button that copies `text()` and says so. */
export function copyButton(text, label = "Copy") {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "small copy";
  button.textContent = "Copy";
  button.setAttribute("aria-label", label);
  button.addEventListener("click", async () => {
    const done = await copyText(text());
    button.textContent = done ? "Copied" : "Copy failed";
    setTimeout(() => (button.textContent = "Copy"), 1500);
  });
  return button;
}

/** The Clipboard API where the page is a secure context, else the selection fallback. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }
}
