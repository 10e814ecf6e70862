// #/claims: standalone claims (2.8), newest first, filtered by state, host, project and
// consumer as GET /v2/claims allows; #/claims/UUID: one claim, its devices (with their
// health, drain and activation), attach handles and ARQs, and Release.

import * as api from "./api.js";
import {
  h, attachInfo, badge, deviceLink, deviceState, facts, filterForm, hostLink, link, pills,
  section, short, table, time,
} from "./dom.js";
import { action } from "./actions.js";

// The microversion these pages are written against (claims: 2.8; devices' state: 2.9).
export const V = "2.11";
const STATES = ["pending", "bound", "failed", "released"];
const SHOWN = 200;

export const claimLink = (uuid) =>
  uuid ? link(`#/claims/${encodeURIComponent(uuid)}`, short(uuid)) : "—";

// Each device's record by UUID at ``V`` (null for one the caller may not read).
export async function devicesByUuid(uuids) {
  const unique = [...new Set(uuids.filter(Boolean))];
  const found = await Promise.all(
    unique.map((uuid) =>
      api.get(`v2/devices/${encodeURIComponent(uuid)}`, V).catch((error) => {
        if (error.status === 401) throw error;
        return null;
      }),
    ),
  );
  return Object.fromEntries(unique.map((uuid, i) => [uuid, found[i]]));
}

function releaseButton(claim) {
  if (claim.state === "released") return null;
  return action(
    "Release",
    async () => {
      await api.request("DELETE", `v2/claims/${encodeURIComponent(claim.uuid)}`, undefined, V);
      return `Claim ${claim.uuid} is released: its devices are free.`;
    },
    {
      rule: "exosuit:claim:delete",
      danger: true,
      confirm:
        `Release claim ${claim.uuid}${claim.consumer ? ` of ${claim.consumer}` : ""}? ` +
        `Its ${claim.devices.length} device(s) are freed at once: whatever uses them loses them.`,
    },
  );
}

const list = {
  route: "/claims",
  menu: "Claims",
  title: (params) => (params.state ? `Claims: ${params.state}` : "Claims"),
  async load(params) {
    const query = {
      limit: SHOWN,
      state: params.state,
      hostname: params.hostname,
      project: params.project,
      consumer: params.consumer,
    };
    const data = await api.get(api.withQuery("v2/claims", query), V);
    return { items: data.claims, more: Boolean(data.next) };
  },
  render({ items, more }, params) {
    return [
      pills("/claims", params, "state", STATES, "Claim states"),
      filterForm("/claims", params, [
        ["Host", "hostname", "compute-1"],
        ["Project", "project", "project id (admins)"],
        ["Consumer", "consumer", "ci-job-4711"],
      ]),
      h(
        "div",
        { class: "card" },
        table(
          [
            { title: "Claim", cell: (c) => claimLink(c.uuid) },
            { title: "State", cell: (c) => [badge(c.state), c.reason ? h("span", { class: "wrap error-text" }, ` ${c.reason}`) : ""] },
            { title: "Profile", cell: (c) => c.device_profile_name || "(attach handles)" },
            { title: "Host", cell: (c) => hostLink(c.hostname) },
            { title: "Consumer", cell: (c) => c.consumer || "—" },
            { title: "Project", cell: (c) => short(c.project_id) },
            { title: "Devices", cell: (c) => String(c.devices.length), class: "num" },
            { title: "Expires", cell: (c) => (c.expires_at ? time(c.expires_at) : "never") },
            { title: "Created", cell: (c) => time(c.created_at) },
          ],
          items,
          "No claims.",
        ),
      ),
      more ? h("p", { class: "muted" }, `The ${SHOWN} newest are shown.`) : null,
    ];
  },
};

export const claim = {
  route: "/claims/:uuid",
  title: (params, data) => (data ? `Claim ${data.claim.uuid.split("-")[0]}` : "Claim"),
  async load({ uuid }) {
    const found = await api.get(`v2/claims/${encodeURIComponent(uuid)}`, V);
    const devices = await devicesByUuid(found.devices.map((d) => d.device_uuid));
    return { claim: found, devices };
  },
  render({ claim: c, devices }) {
    return [
      section(
        "Claim",
        facts([
          ["UUID", h("code", { class: "wrap" }, c.uuid)],
          ["State", [badge(c.state), c.reason ? h("span", { class: "error-text" }, ` ${c.reason}`) : ""]],
          ["Host", hostLink(c.hostname)],
          ["Consumer", c.consumer || "—"],
          ["Profile", c.device_profile_name ? link(`#/profiles/${encodeURIComponent(c.device_profile_name)}`, c.device_profile_name) : "(named attach handles)"],
          ["Project", h("code", {}, c.project_id || "—")],
          ["User", h("code", {}, c.user_id || "—")],
          ["Container", c.container ? `yes (CDI ${c.cdi.state || "—"}${c.cdi.reason ? `: ${c.cdi.reason}` : ""})` : "no"],
          ["Expires", c.expires_at ? time(c.expires_at) : "never"],
          ["Created", time(c.created_at)],
          ["Released", time(c.released_at)],
        ]),
        h("div", { class: "actions" }, releaseButton(c)),
      ),
      section(
        "Devices",
        table(
          [
            {
              title: "Device",
              cell: (d) => {
                const device = devices[d.device_uuid];
                return deviceLink(d.device_uuid, device ? `${device.type} ${device.model}` : null);
              },
            },
            { title: "State", cell: (d) => (d.device_uuid ? deviceState(devices[d.device_uuid]) : "—") },
            { title: "Attach handle", cell: (d) => (d.attach_handle_uuid ? [d.attach_handle_type, " ", short(d.attach_handle_uuid)] : "—") },
            { title: "Address", cell: (d) => attachInfo(d.attach_handle_info) },
            { title: "ARQ", cell: (d) => (d.arq_uuid ? link(`#/arqs/${encodeURIComponent(d.arq_uuid)}`, short(d.arq_uuid)) : "—") },
            { title: "CDI device", cell: (d) => d.cdi_device || "—" },
          ],
          c.devices,
          "No devices (released, or not bound yet).",
        ),
      ),
    ];
  },
};

export default list;
