// The dashboard: a page registry, a router on the URL's hash, and a refresh loop.
//
// A page is a module whose default export is
//   { route: "/hosts/:hostname",           // the hash path; ":name" parts become params
//     menu: "Fleet",                        // optional: a link in the top menu
//     title(params, data) { return "…" },   // the heading and the tab's title
//     async load(params) { return data },   // fetch from the API (api.js)
//     render(data, params) { return node } } // build the DOM (dom.js; text only)
// and is listed in PAGES below. The loop calls load() every REFRESH_MS while the tab
// is visible and redraws when the data changed; a 401 shows the sign-in form.

import * as api from "./api.js";
import { h } from "./dom.js";
import { forgetPermissions, loadPermissions, notify } from "./actions.js";
import fleet from "./fleet.js";
import host from "./host.js";
import device from "./device.js";
import arqs, { arq } from "./arqs.js";
import jobs, { job } from "./jobs.js";
import claims, { claim } from "./claims.js";
import images, { image } from "./images.js";
import drivers from "./drivers.js";
import audit, { event as auditEvent } from "./audit.js";
import profiles, { profile } from "./profiles.js";

const PAGES = [
  fleet, host, device,
  claims, claim, arqs, arq, profiles, profile, images, image, drivers, audit, auditEvent, jobs, job,
];
window.exosuitPages = PAGES.map((p) => p.route); // the registry, for the browser walk (tests/api/dashboard/test_walk.py)
const REFRESH_MS = 5000;

const main = document.getElementById("page");
const refreshed = document.getElementById("refreshed");
let timer = null;
let generation = 0; // the latest show(); an older one's answer is dropped
let shown = null; // what is on screen: the hash and its data, as JSON
let signingIn = false;

function routeOf(page) {
  const names = [];
  const pattern = page.route.replace(/:(\w+)/g, (_, name) => {
    names.push(name);
    return "([^/]+)";
  });
  return { regex: new RegExp(`^${pattern}/?$`), names };
}
const ROUTES = PAGES.map((page) => ({ page, ...routeOf(page) }));

// "#/hosts/a?x=1" → {page, params: {hostname: "a", x: "1"}}; page null when unknown.
function match(hash) {
  const [path, query] = (hash.replace(/^#/, "") || "/").split("?");
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  for (const { page, regex, names } of ROUTES) {
    const found = path.match(regex);
    if (found) {
      names.forEach((name, i) => {
        params[name] = decodeURIComponent(found[i + 1]);
      });
      return { page, params };
    }
  }
  return { page: null, params };
}

let menuDrawn = null; // the page and session the menu was drawn for

function drawMenu(current) {
  const account = api.session.get();
  const key = JSON.stringify([PAGES.indexOf(current), account]);
  if (key === menuDrawn) return; // redrawn only on a change: keeps keyboard focus
  menuDrawn = key;
  const menu = document.getElementById("menu");
  menu.replaceChildren(
    ...PAGES.filter((p) => p.menu).map((p) =>
      h("a", { href: `#${p.route}`, "aria-current": p === current ? "page" : false }, p.menu),
    ),
  );
  const who = document.getElementById("who");
  if (account) {
    const name = account.user
      ? `${account.user} · ${account.project}`
      : "token";
    who.replaceChildren(
      h("span", { title: (account.roles || []).join(", ") }, name),
      h("button", { type: "button", class: "link", onclick: signOut }, "Sign out"),
    );
  } else {
    who.replaceChildren();
  }
}

function draw(title, ...content) {
  document.title = `${title} · Exosuit`;
  main.replaceChildren(h("h1", {}, title), ...content.flat(Infinity).filter(Boolean));
  main.setAttribute("aria-busy", "false");
}

async function show() {
  const mine = ++generation;
  clearTimeout(timer);
  timer = null;
  const { page, params } = match(location.hash);
  drawMenu(page);
  if (!page) {
    shown = null;
    draw("Not found", h("p", {}, "No such page. ", h("a", { href: "#/" }, "Back to the fleet.")));
    return;
  }
  if (signingIn) return;
  try {
    await loadPermissions();
    const data = await page.load(params);
    if (mine !== generation) return;
    const key = location.hash + JSON.stringify(data);
    if (key !== shown) {
      draw(page.title(params, data), page.render(data, params));
      shown = key;
    }
    refreshed.textContent = `Updated ${new Date().toLocaleTimeString()} · every ${REFRESH_MS / 1000} s`;
    refreshed.dataset.state = "ok";
  } catch (error) {
    if (mine !== generation) return;
    shown = null;
    if (error.status === 401) {
      showSignIn(error.message);
      return;
    }
    draw(page.title(params, null), failure(error));
    refreshed.textContent = `Failed ${new Date().toLocaleTimeString()}: retrying`;
    refreshed.dataset.state = "error";
  } finally {
    if (mine === generation && !signingIn && !document.hidden) {
      timer = setTimeout(show, REFRESH_MS);
    }
  }
}

function failure(error) {
  const status = error.status ? `HTTP ${error.status}` : "No answer";
  const what =
    error.status === 403 ? "The API refused to show this page to you" : "The page could not load";
  return h(
    "div",
    { class: "failure", role: "alert" },
    h("p", {}, h("strong", {}, `${what} (${status}).`)),
    h("p", {}, error.message),
  );
}

// -- Keystone sign-in (only seen when the API answers 401) ---------------------------

function field(label, name, attrs = {}) {
  return h("label", {}, h("span", {}, label), h("input", { name, ...attrs }));
}

function showSignIn(reason) {
  signingIn = true;
  clearTimeout(timer);
  const message = h("p", { class: "form-error", role: "alert", hidden: true });
  const form = h(
    "form",
    { class: "sign-in", id: "sign-in" },
    field("User name", "username", { autocomplete: "username", required: true }),
    field("Password", "password", { type: "password", autocomplete: "current-password", required: true }),
    field("Project", "project_name", { required: true }),
    h(
      "details",
      {},
      h("summary", {}, "Domains"),
      field("User domain", "user_domain_name", { value: "Default" }),
      field("Project domain", "project_domain_name", { value: "Default" }),
    ),
    h("button", { type: "submit", class: "action" }, "Sign in"),
    message,
  );
  const tokenForm = h(
    "form",
    { class: "sign-in", id: "token-sign-in" },
    field("Token (openstack token issue)", "token", { required: true, autocomplete: "off" }),
    h("button", { type: "submit", class: "action" }, "Use this token"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = Object.fromEntries(new FormData(form));
    message.hidden = true;
    try {
      const answer = await api.post("dashboard", body);
      api.session.set(answer);
      signedIn();
    } catch (error) {
      message.textContent = error.message;
      message.hidden = false;
    }
  });
  tokenForm.addEventListener("submit", (event) => {
    event.preventDefault();
    api.session.set({ token: new FormData(tokenForm).get("token").trim() });
    signedIn();
  });
  draw(
    "Sign in",
    h("p", { class: "muted" }, reason),
    form,
    h("details", { class: "token" }, h("summary", {}, "Or paste a Keystone token"), tokenForm),
  );
  refreshed.textContent = "Signed out";
  refreshed.dataset.state = "signed-out";
}

function signedIn() {
  signingIn = false;
  shown = null;
  show();
}

function signOut() {
  api.session.clear();
  forgetPermissions();
  notify("Signed out.");
  showSignIn("Signed out.");
  drawMenu(match(location.hash).page);
}

// -- the loop --------------------------------------------------------------------------

window.addEventListener("hashchange", () => {
  document.getElementById("notice").hidden = true; // it spoke of the page left
  shown = null;
  show();
});
document.addEventListener("exosuit:refresh", () => show());
document.addEventListener("visibilitychange", () => {
  if (document.hidden) {
    clearTimeout(timer);
    timer = null;
    refreshed.textContent = "Paused while the tab is hidden";
  } else {
    show();
  }
});
show();
