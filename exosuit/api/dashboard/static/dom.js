// Building the page. Text always goes in as text nodes (never innerHTML), so
// whatever the API returns is shown, never interpreted.

// h("a", {href: "#/x", class: "y"}, "text", child, [more]) → an element.
// Attributes starting with "on" are event listeners; null, undefined and false
// children are skipped; arrays are flattened.
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else if (child instanceof Node) element.appendChild(child);
    else element.appendChild(document.createTextNode(String(child)));
  }
}

export const link = (href, text, attrs = {}) => h("a", { href, ...attrs }, text);
export const hostLink = (name) =>
  name ? link(`#/hosts/${encodeURIComponent(name)}`, name) : "—";
export const deviceLink = (uuid, text) =>
  uuid ? link(`#/devices/${encodeURIComponent(uuid)}`, text || short(uuid)) : "—";

// The first block of a UUID, with the whole one as a tooltip.
export function short(uuid) {
  if (!uuid) return "—";
  return h("span", { class: "uuid", title: uuid }, String(uuid).split("-")[0]);
}

// A coloured word: the kind is derived from the word unless given.
const KINDS = {
  ok: ["enabled", "present", "succeeded", "bound", "free", "reporting", "synced", "ok", "ready",
    "applied", "done"],
  warn: ["maintaining", "pending", "running", "bindstarted", "initial", "stale", "in use", "warning",
    "draining", "drained", "inactive", "activating", "deactivating", "held", "applying", "missing",
    "queued", "programming"],
  bad: ["lost", "failed", "bindfailed", "deleting", "error", "unhealthy", "not offered"],
};
export function badge(text, kind) {
  const word = String(text ?? "—");
  const found = kind || kindOf(word) || "plain";
  return h("span", { class: `badge ${found}` }, word);
}

// Seconds as "12 s", "4 min", "3 h", "2 d".
export function age(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  const s = Math.max(0, Number(seconds));
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

// An API timestamp in the browser's time zone, short; the exact value as tooltip.
export function time(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const text = date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
  return h("time", { datetime: iso, title: iso }, text);
}

// A section: a heading and its content.
export function section(title, ...content) {
  return h("section", { class: "card" }, h("h2", {}, title), ...content);
}

// A table in a box that scrolls sideways on a narrow screen (the page does not).
// columns: [{title, cell: (row) => text or node, class?}].
// ``rowClass(row)``: a class for a row (a device that is not free is tinted).
export function table(columns, rows, empty = "None.", { rowClass = null } = {}) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h(
    "div",
    { class: "scroll" },
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.class }, c.title)))),
      h(
        "tbody",
        {},
        rows.map((row) =>
          h("tr", { class: rowClass ? rowClass(row) : null },
            columns.map((c) => h("td", { class: c.class }, c.cell(row)))),
        ),
      ),
    ),
  );
}

// name → value pairs, as a definition list.
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.map(([name, value]) => [h("dt", {}, name), h("dd", {}, value ?? "—")]),
  );
}

function kindOf(word) {
  return Object.keys(KINDS).find((k) => KINDS[k].includes(String(word).toLowerCase()));
}

// Counts ({name: n}) as small chips, in ``order`` then by name; ``href(name)`` makes
// each a link. A bad state (failed, lost …) with a count is shown in red.
export function counts(map, href, order = []) {
  const rank = (name) => (order.includes(name) ? order.indexOf(name) : order.length);
  const names = Object.keys(map || {}).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  if (!names.length) return h("p", { class: "muted" }, "None.");
  return h(
    "ul",
    { class: "counts" },
    names.map((name) =>
      h(
        "li",
        { class: map[name] && kindOf(name) === "bad" ? "bad" : false },
        href ? link(href(name), name) : h("span", {}, name),
        h("strong", {}, String(map[name])),
      ),
    ),
  );
}

// A value, or "—" when there is none (null or undefined; 0 and false are values).
export const orDash = (value) => (value === null || value === undefined ? "—" : String(value));

// "a, b, c" or "—".
export const joined = (items) => (items && items.length ? items.join(", ") : "—");

// An attach handle's or a device's PCI address from Cyborg's {domain, bus, device,
// function}; any other shape as compact JSON.
export function attachInfo(info) {
  if (info && typeof info === "object" && "bus" in info && "function" in info) {
    return `${info.domain || "0000"}:${info.bus}:${info.device}.${info.function}`;
  }
  if (info === null || info === undefined) return "—";
  return typeof info === "string" ? info : JSON.stringify(info);
}

// Cyborg's attributes_list (a JSON string of one-key objects) as {rc, traits}.
export function deployableAttributes(attributesList) {
  let items = [];
  try {
    items = JSON.parse(attributesList || "[]");
  } catch {
    items = [];
  }
  const result = { rc: null, traits: [] };
  for (const item of items) {
    for (const [key, value] of Object.entries(item)) {
      if (key === "rc") result.rc = value;
      else if (key.startsWith("trait")) result.traits.push(value);
    }
  }
  return result;
}

// -- a device's state: wherever a device is shown ------------------------------------
//
// Health, drain, activation and who holds it, each as a badge, so that an unhealthy,
// drained, inactive or held device never looks like a free one. ``offer(device)``
// says whether a new workload could take it, and why not.

const HEALTH_KIND = { ok: "ok", warning: "warn", unhealthy: "bad" };

// The health badge: its state, "held back" when it is not offered; the reason as tooltip.
export function healthBadge(health) {
  if (!health) return badge("—");
  const held = health.offered === false;
  const text = held ? `${health.state} · held back` : health.state;
  const kind = health.state === "unhealthy" || held ? "bad" : HEALTH_KIND[health.state] || "plain";
  return h("span", { title: health.reason || "" }, badge(text, kind));
}

// "draining" / "drained" while under maintenance, else "—".
export function drainBadge(device) {
  return device.maintenance ? badge(device.maintenance, "warn") : "—";
}

export function activationBadge(device) {
  if (!device.activation) return "—";
  return h("span", { title: device.activation_reason || "" }, badge(device.activation));
}

// Who holds the device: each holder's ARQ (and instance) or claim, in brief.
export function holderText(holder) {
  if (holder.claim_uuid) return `claim ${holder.claim_uuid}`;
  const instance = holder.instance_uuid ? ` instance ${holder.instance_uuid}` : "";
  return `ARQ ${holder.arq_uuid}${instance}`;
}

// Why a new workload could not take the device ([] when it could).
export function offer(device) {
  const why = [];
  if (device.presence && device.presence !== "present") why.push(device.presence);
  if (device.status && device.status !== "enabled") why.push(device.maintenance || device.status);
  if (device.activation && device.activation !== "ready") why.push(device.activation);
  if (device.health && device.health.offered === false) why.push(`${device.health.state}, held back`);
  else if (device.health && device.health.state === "unhealthy") why.push("unhealthy");
  return why;
}

// "held" (by how many), "free", or "not offered" (with why): one word per device.
export function heldOf(device) {
  if ((device.holders || []).length) return "held";
  return offer(device).length ? "not offered" : "free";
}

export function heldBadge(device) {
  const holders = device.holders || [];
  if (holders.length) {
    return h("span", { title: holders.map(holderText).join("\n") }, badge(`held ${holders.length}`, "warn"));
  }
  const why = offer(device);
  return why.length ? h("span", { title: why.join(", ") }, badge("not offered", "bad")) : badge("free", "ok");
}

// A row's tint: "bad" for an unhealthy or lost one, "warn" for a held or not offered one.
export function deviceRowClass(device) {
  if ((device.health && device.health.state === "unhealthy") || device.presence === "lost") return "row-bad";
  return heldOf(device) === "free" ? null : "row-warn";
}

// The whole of a device's state as facts (the device page).
export function deviceStateFacts(device) {
  const health = device.health || {};
  return [
    ["Health", [healthBadge(device.health), health.reason ? ` ${health.reason}` : ""]],
    ["Status", [badge(device.status), device.status_reason ? ` ${device.status_reason}` : ""]],
    ["Drain", drainBadge(device)],
    ["Activation", [activationBadge(device), device.activation_reason ? ` ${device.activation_reason}` : ""]],
    ["Free/held", (device.holders || []).length
      ? h("ul", { class: "plain-list" }, device.holders.map((x) => h("li", {}, holderText(x))))
      : heldBadge(device)],
  ];
}

// -- shared by the list pages (claims, ARQs, images, drivers, audit, jobs, profiles) --

// A device's health, drain and activation as three badges (presence too, once lost),
// from a device read at 2.9 or later; "state unknown" when the caller may not read it.
export function deviceState(device) {
  if (!device) return h("span", { class: "muted" }, "state unknown");
  const health = device.health || {};
  const state = health.state || "ok";
  const held = health.offered === false ? `held back by ${health.held_by || "?"}` : null;
  // "healthy", "warning", "unhealthy · held back by agent", "held back by operator".
  const healthText = [state === "ok" ? (held ? null : "healthy") : state, held]
    .filter(Boolean)
    .join(" · ");
  const healthBadge = badge(healthText, state === "unhealthy" ? "bad" : held || state !== "ok" ? "warn" : "ok");
  if (health.reason) healthBadge.title = health.reason;
  const drain =
    device.maintenance || (device.status === "enabled" ? "in service" : device.status);
  const activation = badge(device.activation || "activation —", device.activation === "ready" ? "ok" : "warn");
  if (device.activation_reason) activation.title = device.activation_reason;
  return h(
    "span",
    { class: "holder device-state" },
    healthBadge,
    badge(drain, drain === "in service" ? "ok" : "warn"),
    activation,
    device.presence && device.presence !== "present" ? badge(device.presence) : null,
  );
}

// A filter form whose fields are ``names`` (label → query name, with placeholders):
// submitting it sets the page's address (``route`` + the non-empty fields), which
// reloads the page. The same form node is returned while the address is the same, so
// a redraw of the page (new data) keeps what is being typed.
const filterForms = new Map();
export function filterForm(route, params, fields) {
  const key = `${route}?${JSON.stringify(params)}`;
  if (filterForms.has(key)) return filterForms.get(key);
  const inputs = fields.map(([label, name, placeholder]) =>
    h("label", {}, h("span", {}, label, " "), h("input", { name, value: params[name] || "", placeholder: placeholder || "" })),
  );
  const form = h(
    "form",
    { class: "filters", role: "search" },
    inputs,
    h("button", { type: "submit", class: "action" }, "Filter"),
    h("a", { href: `#${route}` }, "Clear"),
  );
  // Laid out through the CSSOM (the Content-Security-Policy allows it), so that
  // dashboard.css needs no rule for it: fields side by side, wrapping on a phone.
  Object.assign(form.style, {
    display: "flex", flexWrap: "wrap", gap: "0.5rem 0.75rem", alignItems: "end", marginBottom: "0.75rem",
  });
  for (const label of inputs) {
    Object.assign(label.style, { display: "grid", gap: "0.15rem", fontSize: "0.9rem" });
    Object.assign(label.lastChild.style, {
      font: "inherit", padding: "0.3rem 0.5rem", border: "1px solid #d0d7de", borderRadius: "6px", width: "12rem", maxWidth: "100%",
    });
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams();
    for (const [name, value] of new FormData(form)) {
      if (String(value).trim()) query.set(name, String(value).trim());
    }
    const text = query.toString();
    location.hash = text ? `${route}?${text}` : route;
  });
  filterForms.clear(); // one form is on screen at a time
  filterForms.set(key, form);
  return form;
}

// Links that set one query parameter ``name`` of ``route`` to each of ``values`` (and
// "all": none), keeping the page's other parameters; the current one is marked.
export function pills(route, params, name, values, label) {
  const href = (value) => {
    const query = new URLSearchParams();
    for (const [key, current] of Object.entries(params)) {
      if (key !== name && current) query.set(key, current);
    }
    if (value) query.set(name, value);
    const text = query.toString();
    return `#${route}${text ? `?${text}` : ""}`;
  };
  return h(
    "nav",
    { class: "filters", "aria-label": label },
    link(href(null), "all", { "aria-current": params[name] ? false : "true" }),
    values.map((v) => link(href(v), v, { "aria-current": params[name] === v ? "true" : false })),
  );
}

// Text shown whole, its line breaks kept and wrapped at the box's edge (an error, a
// payload); set through the CSSOM, which the Content-Security-Policy allows.
export function whole(text, className = "") {
  const element = h("pre", { class: className || false }, text);
  element.style.whiteSpace = "pre-wrap";
  element.style.overflowWrap = "anywhere";
  element.style.margin = "0";
  return element;
}
