// Conversations kept in this browser (localStorage): an index of
// {id, title, updated} and one entry per conversation. A conversation holds
// its messages in OpenAI's shape, each with an optional `meta` the page shows
// (timings, finish reason, tool names) and never sends.

const INDEX = "agentgate.conversations";
const CURRENT = "agentgate.current-conversation";
const entry = (id) => `agentgate.conversation.${id}`;
const TITLE_LENGTH = 48;

/** A random id that needs no secure context (crypto.randomUUID does). */
export function randomId(prefix = "") {
  const bytes = crypto.getRandomValues(new Uint8Array(9));
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function newConversation() {
  const now = Date.now();
  return { id: randomId("c-"), title: "", created: now, updated: now, sessionId: "", messages: [] };
}

/** The title shown in the list: the given one, else the first user message, else "New conversation". */
export function titleOf(conversation) {
  if (conversation.title) return conversation.title;
  const first = conversation.messages.find((m) => m.role === "user" && typeof m.content === "string");
  const text = first?.content.replace(/\s+/g, " ").trim();
  if (!text) return "New conversation";
  return text.length > TITLE_LENGTH ? `${text.slice(0, TITLE_LENGTH - 1)}…` : text;
}

/** The messages as the API takes them: `meta` left out. */
export function apiMessages(messages) {
  return messages.map(({ meta, ...message }) => message);
}

function read(key, fallback) {
  try {
    const raw = localStorage.getItem(key);
    return raw === null ? fallback : JSON.parse(raw);
  } catch {
    return fallback;
  }
}

export class ConversationStore {
  /** The index, most recently updated first. */
  list() {
    const index = read(INDEX, []);
    return Array.isArray(index) ? index.sort((a, b) => b.updated - a.updated) : [];
  }

  load(id) {
    const conversation = read(entry(id), null);
    return conversation && Array.isArray(conversation.messages) ? conversation : null;
  }

  /** Writes the conversation and its index line; throws when storage is full or refused. */
  save(conversation) {
    conversation.updated = Date.now();
    localStorage.setItem(entry(conversation.id), JSON.stringify(conversation));
    const index = this.list().filter((c) => c.id !== conversation.id);
    index.push({ id: conversation.id, title: titleOf(conversation), updated: conversation.updated });
    localStorage.setItem(INDEX, JSON.stringify(index));
    this.current = conversation.id;
  }

  remove(id) {
    localStorage.removeItem(entry(id));
    localStorage.setItem(INDEX, JSON.stringify(this.list().filter((c) => c.id !== id)));
  }

  get current() {
    return localStorage.getItem(CURRENT);
  }

  set current(id) {
    if (id) localStorage.setItem(CURRENT, id);
    else localStorage.removeItem(CURRENT);
  }
}

/** The conversation as a JSON file to download (OpenAI-shaped messages, the page's meta kept). */
export function exportConversation(conversation, system) {
  const data = {
    object: "agentgate.conversation",
    id: conversation.id,
    title: titleOf(conversation),
    created: new Date(conversation.created).toISOString(),
    updated: new Date(conversation.updated).toISOString(),
    session_id: conversation.sessionId || null,
    system: system || null,
    messages: conversation.messages,
  };
  const blob = new Blob([JSON.stringify(data, null, 2)], { type: "application/json" });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = `${titleOf(conversation).replace(/[^\w.-]+/g, "-").replace(/^-|-$/g, "") || "conversation"}.json`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
}
