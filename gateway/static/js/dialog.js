// One modal <dialog> for confirmations and short questions (rename), built on
// first use. showModal() keeps focus inside it; Esc or Cancel says no.

let parts = null;

function build() {
  const dialog = document.createElement("dialog");
  dialog.className = "confirm";
  dialog.setAttribute("aria-labelledby", "dialog-title");
  dialog.setAttribute("aria-describedby", "dialog-message");
  dialog.innerHTML = `
    <form>
      <h2 id="dialog-title"></h2>
      <p id="dialog-message"></p>
      <label hidden><span></span><input spellcheck="false"></label>
      <div class="actions">
        <button type="button" value="cancel">Cancel</button>
        <button type="submit" class="primary">OK</button>
      </div>
    </form>`;
  document.body.append(dialog);
  const form = dialog.querySelector("form");
  const field = dialog.querySelector("label");
  return {
    dialog,
    form,
    title: dialog.querySelector("h2"),
    message: dialog.querySelector("p"),
    field,
    fieldLabel: field.querySelector("span"),
    input: field.querySelector("input"),
    cancel: dialog.querySelector('button[value="cancel"]'),
    ok: dialog.querySelector('button[type="submit"]'),
  };
}

/**
 * Asks the user; resolves to true (confirmed), or to the typed text when
 * `input` is given, and to null when cancelled.
 * @param {{title: string, message?: string, confirm?: string, danger?: boolean,
 *          input?: {label: string, value?: string}}} question
 */
export function ask({ title, message = "", confirm = "OK", danger = false, input = null }) {
  parts ??= build();
  const p = parts;
  p.title.textContent = title;
  p.message.textContent = message;
  p.ok.textContent = confirm;
  p.ok.classList.toggle("danger", danger);
  p.ok.classList.toggle("primary", !danger);
  p.field.hidden = !input;
  if (input) {
    p.fieldLabel.textContent = input.label;
    p.input.value = input.value ?? "";
  }
  return new Promise((resolve) => {
    const finish = (answer) => {
      p.form.onsubmit = p.cancel.onclick = p.dialog.oncancel = null;
      if (p.dialog.open) p.dialog.close();
      resolve(answer);
    };
    p.form.onsubmit = (event) => {
      event.preventDefault();
      finish(input ? p.input.value : true);
    };
    p.cancel.onclick = () => finish(null);
    p.dialog.oncancel = (event) => {
      event.preventDefault();
      finish(null);
    };
    p.dialog.showModal();
    (input ? p.input : p.cancel).focus();
    if (input) p.input.select();
  });
}

/** Whether a dialog is open (global keys such as Esc-to-stop leave it alone). */
export function dialogOpen() {
  return Boolean(parts?.dialog.open);
}
