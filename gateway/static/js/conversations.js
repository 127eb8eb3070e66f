// The conversation list (left column): one button per kept conversation,
// the current one marked with aria-current, and New / Rename / Export /
// Delete for the current one (Rename and Delete ask first).

import { ask } from "./dialog.js";

const $ = (id) => document.getElementById(id);

/**
 * @param {import("./store.js").ConversationStore} store
 * @param {{open: (id: string) => void, create: () => void, rename: (title: string) => void,
 *          remove: () => void, exportCurrent: () => void, current: () => {id: string, title: string},
 *          busy: () => boolean}} actions
 */
export function conversationList(store, actions) {
  function draw() {
    const current = actions.current();
    const items = store.list();
    if (!items.some((c) => c.id === current.id)) items.unshift({ id: current.id, title: current.title });
    $("conversation-list").replaceChildren(
      ...items.map((c) => {
        const item = document.createElement("li");
        const button = document.createElement("button");
        button.type = "button";
        button.textContent = c.title || "New conversation";
        button.title = button.textContent;
        if (c.id === current.id) button.setAttribute("aria-current", "true");
        button.addEventListener("click", () => {
          if (c.id !== actions.current().id && !actions.busy()) actions.open(c.id);
        });
        item.append(button);
        return item;
      }),
    );
  }

  $("new-conversation").addEventListener("click", () => {
    if (!actions.busy()) actions.create();
  });
  $("rename").addEventListener("click", async () => {
    const title = await ask({
      title: "Rename the conversation",
      confirm: "Rename",
      input: { label: "Title", value: actions.current().title },
    });
    if (title !== null) actions.rename(title.trim());
  });
  $("delete").addEventListener("click", async () => {
    if (actions.busy()) return;
    const yes = await ask({
      title: "Delete the conversation?",
      message: `“${actions.current().title}” and its messages are removed from this browser.`,
      confirm: "Delete",
      danger: true,
    });
    if (yes) actions.remove();
  });
  $("export").addEventListener("click", () => actions.exportCurrent());
  return { draw };
}
