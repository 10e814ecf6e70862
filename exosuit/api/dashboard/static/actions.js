// Buttons that change something through the API.
//
// action(label, run, {rule, confirm, danger}) is the one way a page offers a change:
//   rule     the API's policy rule the change needs ("exosuit:device:drain"): the button
//            is drawn only when GET /v2/permissions says the caller passes it (the API
//            still decides: a refusal is shown as the API words it, whole);
//   confirm  the question asked first, in a <dialog> with "Cancel" and a button named
//            like the action; nothing is sent until that button is pressed; or
//            {question, body}: ``body()`` makes the dialog's form fields at each click
//            (run() reads them: program an image, set a layout);
//   danger   drawn in red (disable, release, clear …).
// Either way the page refreshes at once. The notice under the header keeps the outcome.

import * as api from "./api.js";
import { h } from "./dom.js";

// rule → true/false for the signed-in caller; null when unknown (an API without
// /v2/permissions: every button is drawn and the API's answer tells).
let permissions = null;
let permissionsOf = undefined; // the session the permissions were read for

// Read the caller's permissions once per session (app.js calls it before a page loads).
export async function loadPermissions() {
  const key = JSON.stringify(api.session.get());
  if (key === permissionsOf) return;
  try {
    const data = await api.get("v2/permissions");
    permissions = data.permissions;
  } catch (error) {
    if (error.status === 401) throw error;
    permissions = null; // 404 (older API) or a failure: let the API decide per click
  }
  permissionsOf = key;
}

// Forget them (signing out or in as someone else).
export function forgetPermissions() {
  permissions = null;
  permissionsOf = undefined;
}

// Whether the caller may do what ``rule`` guards (true when unknown).
export function allowed(rule) {
  return !rule || permissions === null || permissions[rule] !== false;
}

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

// Ask ``question`` in a modal dialog: resolves true when the button named ``label`` is
// pressed, false on Cancel or Escape. ``body``: more nodes (a form's fields) shown
// under the question.
export function confirmDialog(question, label, { danger = false, body = [] } = {}) {
  return new Promise((resolve) => {
    const yes = h("button", { type: "submit", class: danger ? "action danger" : "action", value: "yes" }, label);
    const no = h("button", { type: "submit", class: "action plain", value: "no", formnovalidate: true }, "Cancel");
    const form = h("form", { method: "dialog" }, h("p", {}, question), body, h("div", { class: "actions" }, no, yes));
    const dialog = h("dialog", { class: "confirm", "aria-label": label }, form);
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(dialog.returnValue === "yes");
    });
    document.body.appendChild(dialog);
    dialog.showModal();
  });
}

// A button running ``run()`` (a promise of the success message) once per click;
// null (nothing drawn) when the caller may not.
export function action(label, run, { danger = false, rule = null, confirm = null } = {}) {
  if (!allowed(rule)) return null;
  const button = h("button", { type: "button", class: danger ? "action danger" : "action" }, label);
  button.addEventListener("click", async () => {
    if (confirm) {
      const question = typeof confirm === "string" ? confirm : confirm.question;
      const body = typeof confirm === "object" && confirm.body ? confirm.body() : [];
      if (!(await confirmDialog(question, label, { danger, body }))) return;
    }
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
