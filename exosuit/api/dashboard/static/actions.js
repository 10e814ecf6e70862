// Buttons that change something through the API. Everyone sees them; the API's
// policy decides: a refusal (403 for a reader or a manager) is shown as the API
// words it, and nothing changes. Either way the page refreshes at once.

import { h } from "./dom.js";

// The line under the header, kept across refreshes (the page itself is redrawn).
export function notify(message, kind = "ok") {
  const notice = document.getElementById("notice");
  notice.replaceChildren(
    h("span", {}, message),
    h("button", { type: "button", class: "close", "aria-label": "Dismiss", onclick: () => {
      notice.hidden = true;
    } }, "×"),
  );
  notice.className = kind;
  notice.hidden = false;
}

// A button running ``run()`` (a promise of the success message) once per click.
export function action(label, run, { danger = false } = {}) {
  const button = h("button", { type: "button", class: danger ? "action danger" : "action" }, label);
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      notify(await run(), "ok");
    } catch (error) {
      const status = error.status ? ` (HTTP ${error.status})` : "";
      notify(`${label} refused${status}: ${error.message}`, "error");
    } finally {
      button.disabled = false;
      document.dispatchEvent(new Event("exosuit:refresh"));
    }
  });
  return button;
}
