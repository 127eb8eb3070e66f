// Light or dark: "auto" follows the system; the choice is kept in local
// storage and applied as data-theme on <html> (base.css reads it), together
// with the matching code-highlighting style sheet.

const KEY = "agentgate.theme";
const dark = window.matchMedia("(prefers-color-scheme: dark)");

function apply(choice) {
  const theme = choice === "light" || choice === "dark" ? choice : dark.matches ? "dark" : "light";
  document.documentElement.dataset.theme = theme;
  for (const sheet of document.querySelectorAll("link[data-theme-sheet]")) {
    sheet.disabled = sheet.dataset.themeSheet !== theme;
  }
}

/** Fills a <select> with system/light/dark and wires it to the page's theme. */
export function themePicker(select) {
  select.replaceChildren(new Option("system", "auto"), new Option("light", "light"), new Option("dark", "dark"));
  select.value = localStorage.getItem(KEY) || "auto";
  apply(select.value);
  select.addEventListener("change", () => {
    if (select.value === "auto") localStorage.removeItem(KEY);
    else localStorage.setItem(KEY, select.value);
    apply(select.value);
  });
  dark.addEventListener("change", () => apply(select.value));
}
