// #/audit: the audit trail (2.9; admins), newest first: who changed what, when. The form
// filters by object (type, UUID), host, actor, action, request and time (since, until:
// ISO 8601), exactly GET /v2/audit_events's query parameters; each filter is in the
// page's address. #/audit/ID: one record, its before and after whole.

import * as api from "./api.js";
import { h, facts, filterForm, hostLink, link, section, short, table, time, whole } from "./dom.js";

const V = "2.11";
const SHOWN = 200;
// The query parameters of GET /v2/audit_events (exosuit/api/handlers/audit.py).
const FIELDS = [
  ["Object type", "object_type", "device, claim, arq, image …"],
  ["Object UUID", "object_uuid", "UUID"],
  ["Host", "host", "compute-1"],
  ["Actor", "actor", "user:<id>, host:<name>, conductor"],
  ["Action", "action", "create, drain, release …"],
  ["User", "user_id", "user id"],
  ["Project", "project_id", "project id"],
  ["Request", "request_id", "req-…"],
  ["Since", "since", "2026-11-25T21:00:00Z"],
  ["Until", "until", "2026-11-26T00:00:00Z"],
];
// Where an object of a type has a page of its own.
const PAGES = { device: "devices", claim: "claims", arq: "arqs", image: "images" };

function objectCell(e) {
  const page = PAGES[e.object_type];
  const id = e.object_uuid
    ? page
      ? link(`#/${page}/${encodeURIComponent(e.object_uuid)}`, short(e.object_uuid))
      : short(e.object_uuid)
    : null;
  return [e.object_type, id ? " " : "", id];
}

// A record's change as "key: before → after, …" (only the keys that differ).
function change(e) {
  const before = e.before || {};
  const after = e.after || {};
  const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].filter(
    (k) => JSON.stringify(before[k]) !== JSON.stringify(after[k]),
  );
  if (!keys.length) return "—";
  // Short values in full; a long one by its key only (the record's page has it whole).
  const text = (v) => (v === undefined ? "∅" : JSON.stringify(v));
  const shown = keys.slice(0, 4).map((k) => {
    const pair = `${text(before[k])} → ${text(after[k])}`;
    return pair.length <= 40 ? `${k}: ${pair}` : k;
  });
  return shown.join("; ") + (keys.length > 4 ? `; +${keys.length - 4} more` : "");
}

// Shortcuts for the time range: ``since`` set to that long before the click, the
// address's other filters kept.
const RECENT = [["Last hour", 3600], ["Last 24 h", 86400], ["Last 7 days", 7 * 86400]];

function recent() {
  const go = (seconds) => {
    // The address's filters at the click (the page may not be redrawn for it yet).
    const query = new URLSearchParams(location.hash.split("?")[1] || "");
    query.delete("since");
    query.set("since", new Date(Date.now() - seconds * 1000).toISOString().replace(/\.\d+Z$/, "Z"));
    location.hash = `/audit?${query}`;
  };
  return h(
    "nav",
    { class: "filters", "aria-label": "Time range" },
    RECENT.map(([label, seconds]) =>
      h("button", { type: "button", class: "action plain", onclick: () => go(seconds) }, label),
    ),
  );
}

const list = {
  route: "/audit",
  menu: "Audit",
  title: () => "Audit trail",
  async load(params) {
    const query = { limit: SHOWN };
    for (const [, name] of FIELDS) query[name] = params[name];
    const data = await api.get(api.withQuery("v2/audit_events", query), V);
    return { items: data.audit_events, more: Boolean(data.next) };
  },
  render({ items, more }, params) {
    return [
      filterForm("/audit", params, FIELDS),
      recent(),
      h(
        "div",
        { class: "card" },
        table(
          [
            { title: "Id", cell: (e) => link(`#/audit/${e.id}`, String(e.id)) },
            { title: "Time", cell: (e) => time(e.time) },
            { title: "Actor", cell: (e) => e.actor },
            { title: "Action", cell: (e) => e.action },
            { title: "Object", cell: objectCell },
            { title: "Host", cell: (e) => hostLink(e.host) },
            { title: "Project", cell: (e) => short(e.project_id) },
            { title: "Change", cell: (e) => h("span", { class: "wrap" }, change(e)) },
            { title: "Request", cell: (e) => e.request_id || "—" },
          ],
          items,
          "No audit records match.",
        ),
      ),
      more ? h("p", { class: "muted" }, `The ${SHOWN} newest are shown.`) : null,
    ];
  },
};

export const event = {
  route: "/audit/:id",
  title: (params) => `Audit record ${params.id}`,
  async load({ id }) {
    return api.get(`v2/audit_events/${encodeURIComponent(id)}`, V);
  },
  render(e) {
    return [
      section(
        "Record",
        facts([
          ["Id", String(e.id)],
          ["Time", time(e.time)],
          ["Actor", e.actor],
          ["Action", e.action],
          ["Object", objectCell(e)],
          ["Host", hostLink(e.host)],
          ["User", h("code", {}, e.user_id || "—")],
          ["Project", h("code", {}, e.project_id || "—")],
          ["Request", h("code", {}, e.request_id || "—")],
        ]),
      ),
      section("Before", whole(JSON.stringify(e.before, null, 2))),
      section("After", whole(JSON.stringify(e.after, null, 2))),
    ];
  },
};

export default list;
