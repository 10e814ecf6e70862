// #/arqs: accelerator requests, newest first, with their state, host and instance;
// ?state=Bound (or hostname=…, instance=…) filters. Readers see their project's.

import * as api from "./api.js";
import { h, badge, hostLink, link, short, table, time } from "./dom.js";

const STATES = ["Initial", "BindStarted", "Bound", "BindFailed", "Unbound", "Deleting"];
const SHOWN = 200;

export function arqsTable(arqs, empty = "No accelerator requests.") {
  return table(
    [
      { title: "ARQ", cell: (a) => short(a.uuid) },
      { title: "State", cell: (a) => badge(a.state) },
      { title: "Profile", cell: (a) => a.device_profile_name },
      { title: "Host", cell: (a) => hostLink(a.hostname) },
      {
        title: "Instance",
        cell: (a) =>
          a.instance_uuid
            ? link(`#/arqs?instance=${encodeURIComponent(a.instance_uuid)}`, short(a.instance_uuid))
            : "—",
      },
      { title: "Project", cell: (a) => short(a.project_id) },
      {
        title: "Attach handle",
        cell: (a) => (a.attach_handle_uuid ? [a.attach_handle_type, " ", short(a.attach_handle_uuid)] : "—"),
      },
      { title: "Created", cell: (a) => time(a.created_at) },
    ],
    arqs,
    empty,
  );
}

export default {
  route: "/arqs",
  menu: "ARQs",
  title: (params) => (params.instance ? "ARQs of an instance" : "Accelerator requests"),
  async load(params) {
    return api.list("v2/accelerator_requests", "arqs", {
      limit: SHOWN,
      state: params.state,
      hostname: params.hostname,
      instance: params.instance,
    });
  },
  render({ items, more }, params) {
    return [
      h(
        "nav",
        { class: "filters", "aria-label": "ARQ states" },
        link("#/arqs", "all", { "aria-current": params.state ? false : "true" }),
        STATES.map((s) =>
          link(`#/arqs?state=${s}`, s, { "aria-current": params.state === s ? "true" : false }),
        ),
      ),
      params.instance ? h("p", {}, "Instance ", h("code", {}, params.instance)) : null,
      h("div", { class: "card" }, arqsTable(items)),
      more ? h("p", { class: "muted" }, `The ${SHOWN} newest are shown.`) : null,
    ];
  },
};
