// The playground page: wires the conversation list, the transcript, the
// composer, the settings and the operator strip.

import { ApiError, getSession, listModels, streamChat } from "./api.js";
import { streamResponses } from "./responses.js";
import { conversationList } from "./conversations.js";
import { dialogOpen } from "./dialog.js";
import { operatorStrip } from "./operator.js";
import { Reply } from "./reply.js";
import {
  FieldError, clearFieldError, connection, markFieldError, requestOptions, restoreSettings, systemPrompt,
} from "./settings.js"; // prettier-ignore
import { ConversationStore, apiMessages, exportConversation, newConversation, randomId, titleOf } from "./store.js";
import { themePicker } from "./theme.js";
import { transcriptView } from "./view.js";

const $ = (id) => document.getElementById(id);
const MODEL_KEY = "agentgate.model";
const PROMPT_HINT = "Message the model (Enter sends, Shift+Enter for a new line, Esc stops)";

const store = new ConversationStore();
const state = {
  conversation: newConversation(),
  controller: null, // the AbortController of the reply streaming now
};
const busy = () => state.controller !== null;

const view = transcriptView($("transcript"), { edit: editAndRegenerate, canEdit: () => !busy() });
const operator = operatorStrip(connection);
const list = conversationList(store, {
  open: openConversation,
  create: () => openConversation(null),
  rename(title) {
    state.conversation.title = title;
    save();
  },
  remove() {
    store.remove(state.conversation.id);
    openConversation(store.list()[0]?.id ?? null);
  },
  exportCurrent: () => exportConversation(state.conversation, systemPrompt()),
  current: () => ({ id: state.conversation.id, title: titleOf(state.conversation) }),
  busy,
});

// -- conversations -----------------------------------------------------------------

function save() {
  try {
    store.save(state.conversation);
    $("store-error").textContent = "";
  } catch (e) {
    $("store-error").textContent = `Not kept in this browser: ${e.message}`;
  }
  list.draw();
}

function openConversation(id) {
  state.conversation = (id && store.load(id)) || newConversation();
  store.current = id ? state.conversation.id : null;
  $("session-id").value = state.conversation.sessionId || "";
  $("session-status").textContent = "";
  view.show(state.conversation.messages);
  clearSendError();
  updateComposer();
  list.draw();
  if (state.conversation.sessionId) loadSession();
}

/** Tool calls of the last reply that have no result yet (only complete calls are ever kept). */
function pendingCalls() {
  const messages = state.conversation.messages;
  const last = messages.findLastIndex((m) => m.role === "assistant");
  if (last < 0) return [];
  const answered = new Set(messages.slice(last + 1).map((m) => m.tool_call_id));
  return (messages[last].tool_calls || []).filter((call) => !answered.has(call.id));
}

function updateComposer() {
  const next = pendingCalls()[0];
  const label = next ? `Result of ${next.function.name || "the tool call"} (${next.id || "no id"})` : "Message";
  $("prompt-label").textContent = label;
  $("prompt").placeholder = next ? `${label}: sent back as a tool message` : PROMPT_HINT;
  $("regenerate").disabled = busy() || state.conversation.messages.length === 0;
}

// -- the server session --------------------------------------------------------------

/** Loads the conversation from the server's session when it holds more than this browser. */
async function loadSession() {
  const id = state.conversation.sessionId;
  const status = $("session-status");
  try {
    const session = await getSession(connection(), id);
    if (state.conversation.sessionId !== id || busy()) return;
    const messages = (session.messages || []).filter((m) => m.role !== "system");
    if (messages.length > state.conversation.messages.length) {
      state.conversation.messages = messages;
      save();
      view.show(messages);
      updateComposer();
      status.textContent = `Loaded ${messages.length} messages from the server session.`;
    } else {
      status.textContent = `In step with the server session (${session.turns} turns).`;
    }
  } catch (e) {
    if (state.conversation.sessionId !== id) return;
    if (e instanceof ApiError && e.status === 404) status.textContent = "A new session: the server creates it with the first message.";
    else if (e instanceof ApiError && e.status === 503) status.textContent = `The server keeps no sessions now: ${e.message}`;
    else status.textContent = `Could not read the session: ${e.message}`;
  }
}

function setSessionId(value) {
  state.conversation.sessionId = value;
  save();
  $("session-status").textContent = "";
  if (value) loadSession();
}

// -- chat ------------------------------------------------------------------------------

function setBusy(on) {
  $("send").disabled = on;
  $("stop").disabled = !on;
  $("transcript").setAttribute("aria-busy", String(on));
  updateComposer();
}

function clearSendError() {
  $("send-error").replaceChildren();
}

/** Shows why nothing was sent next to the Send button; a FieldError also points at its control. */
function showSendError(error) {
  const line = $("send-error");
  line.replaceChildren(error.message);
  if (error instanceof FieldError) {
    markFieldError(error);
    const go = document.createElement("button");
    go.type = "button";
    go.className = "small";
    go.textContent = "Show the field";
    go.addEventListener("click", () => {
      $("settings-panel").open = true;
      $(error.field).scrollIntoView({ block: "center" });
      $(error.field).focus();
    });
    line.append(" ", go);
  }
}

function requestBody() {
  const body = { ...requestOptions(), messages: [], stream: true, stream_options: { include_usage: true } };
  if ($("model").value) body.model = $("model").value;
  const system = systemPrompt();
  if (system) body.messages.push({ role: "system", content: system });
  body.messages.push(...apiMessages(state.conversation.messages));
  return body;
}

function send(text) {
  clearSendError();
  try {
    requestOptions(); // a setting that cannot be used stops the message here, kept in the box
  } catch (e) {
    showSendError(e);
    return;
  }
  const [call] = pendingCalls();
  const message = call
    ? { role: "tool", tool_call_id: call.id, content: text, meta: { name: call.function.name } }
    : { role: "user", content: text };
  state.conversation.messages.push(message);
  save();
  view.add(message, state.conversation.messages.length - 1);
  $("prompt").value = "";
  updateComposer();
  if (pendingCalls().length === 0) generate(); // the model answers once every call has its result
}

async function generate() {
  clearSendError();
  let body;
  try {
    body = requestBody();
  } catch (e) {
    showSendError(e);
    return;
  }
  const conversation = state.conversation;
  const reply = new Reply();
  const bubble = view.addReply(reply);
  state.controller = new AbortController();
  setBusy(true);
  let responseId = null; // the Responses API's id of this reply: the next turn chains on it
  try {
    const { signal } = state.controller;
    const chunks =
      $("api").value === "responses"
        ? streamResponses(connection(), body, conversation.messages, signal, conversation.sessionId)
        : streamChat(connection(), body, signal, conversation.sessionId);
    for await (const chunk of chunks) {
      reply.apply(chunk);
      responseId = chunk.responseId ?? responseId;
      bubble.update(reply);
    }
  } catch (e) {
    if (e.name === "AbortError") reply.stopped = true;
    else reply.error = e.message || String(e);
  } finally {
    state.controller = null;
    setBusy(false);
  }
  bubble.update(reply, true);
  const message = reply.message();
  if (message) {
    if (responseId) message.meta.responseId = responseId;
    conversation.messages.push(message);
    save();
    bubble.done(message);
  }
  updateComposer();
  $("prompt").focus();
}

function editAndRegenerate(index, text) {
  if (busy()) return;
  const messages = state.conversation.messages.slice(0, index);
  messages.push({ role: "user", content: text });
  state.conversation.messages = messages;
  save();
  view.show(messages);
  generate();
}

/** Asks again for the last reply (dropped first), or for a reply that never came. */
function regenerate() {
  if (busy() || !state.conversation.messages.length) return;
  const messages = state.conversation.messages;
  if (messages.at(-1).role === "assistant") {
    messages.pop();
    save();
    view.show(messages);
  }
  generate();
}

function stop() {
  state.controller?.abort();
}

// -- wiring ------------------------------------------------------------------------------

async function loadModels() {
  const select = $("model");
  const status = $("model-status");
  try {
    const models = await listModels(connection());
    const wanted = select.value || localStorage.getItem(MODEL_KEY);
    select.replaceChildren(...models.map((m) => new Option(m.id, m.id)));
    if (models.some((m) => m.id === wanted)) select.value = wanted;
    status.textContent = models.length ? "" : "no model served";
  } catch (e) {
    select.replaceChildren(new Option("—", ""));
    const key = connection().apiKey;
    status.textContent =
      e.status === 401 ? (key ? "API key rejected" : "enter an API key") : `models unavailable (${e.message})`;
  }
}

$("model").addEventListener("change", () => localStorage.setItem(MODEL_KEY, $("model").value));
$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (text && !busy()) send(text);
});
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && !dialogOpen()) stop();
});
$("stop").addEventListener("click", stop);
$("regenerate").addEventListener("click", regenerate);
$("connection").addEventListener("submit", (event) => event.preventDefault());
$("session-id").addEventListener("change", () => setSessionId($("session-id").value.trim()));
$("new-session").addEventListener("click", () => {
  $("session-id").value = randomId("s-");
  setSessionId($("session-id").value);
});

restoreSettings((id) => {
  if (id === "api-key" || id === "endpoint") loadModels();
  if (id === "admin-key" || id === "endpoint") operator.refresh();
  if (id === "api-key" && state.conversation.sessionId) loadSession();
  clearFieldError(id);
  clearSendError();
});
themePicker($("theme"));
if (window.matchMedia("(max-width: 800px)").matches) {
  $("conversations-panel").open = false;
  $("settings-panel").open = false;
}
openConversation(store.current);
loadModels();
operator.refresh();
