// #/arqs: accelerator requests, newest first, with their state, host, device (its health,
// drain and activation), instance or claim; ?state=Bound (or hostname=…, instance=…,
// device_profile_name=…) filters. #/arqs/UUID: one ARQ. Readers see their project's
// (the attach handles and devices need a manager: without them, no device is shown).

import * as api from "./api.js";
import {
  h, attachInfo, badge, deviceLink, deviceState, facts, filterForm, hostLink, link, pills,
  section, short, table, time,
} from "./dom.js";
import { V, claimLink, devicesByUuid } from "./claims.js";

const STATES = ["Initial", "BindStarted", "Bound", "BindFailed", "Unbound", "Deleting"];
const SHOWN = 200;

const arqLink = (uuid) => link(`#/arqs/${encodeURIComponent(uuid)}`, short(uuid));

function instanceCell(a) {
  if (a.instance_uuid) {
    return link(`#/arqs?instance=${encodeURIComponent(a.instance_uuid)}`, short(a.instance_uuid));
  }
  return a.claim_uuid ? ["claim ", claimLink(a.claim_uuid)] : "—";
}

// Every item of a list at ``V``, page after page (up to ``max``).
export async function everyAt(path, key, query = {}, max = 5000) {
  const items = [];
  let url = api.withQuery(path, { limit: 1000, ...query });
  while (url && items.length < max) {
    const data = await api.get(url, V);
    items.push(...data[key]);
    url = data.next ? path + new URL(data.next).search : null;
  }
  return items;
}

// {attach handle uuid → device record} for the ARQs holding one; {} when the caller may
// not read attach handles or devices (a project reader).
async function devicesOfArqs(arqs) {
  if (!arqs.some((a) => a.attach_handle_uuid)) return {};
  try {
    const [handles, devices] = await Promise.all([
      everyAt("v2/attach_handles", "attach_handles", { in_use: "true" }),
      everyAt("v2/devices", "devices"),
    ]);
    const byUuid = Object.fromEntries(devices.map((d) => [d.uuid, d]));
    return Object.fromEntries(handles.map((ah) => [ah.uuid, byUuid[ah.device_uuid] || null]));
  } catch (error) {
    if (error.status === 401) throw error;
    return {};
  }
}

export function arqsTable(arqs, devices = {}, empty = "No accelerator requests.") {
  return table(
    [
      { title: "ARQ", cell: (a) => arqLink(a.uuid) },
      { title: "State", cell: (a) => badge(a.state) },
      { title: "Profile", cell: (a) => a.device_profile_name },
      { title: "Host", cell: (a) => hostLink(a.hostname) },
      {
        title: "Device",
        cell: (a) => {
          const device = devices[a.attach_handle_uuid];
          return device ? [deviceLink(device.uuid, `${device.type} ${device.model}`), " ", deviceState(device)] : "—";
        },
      },
      { title: "Instance or claim", cell: instanceCell },
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

export const arq = {
  route: "/arqs/:uuid",
  title: (params, data) => (data ? `ARQ ${data.arq.uuid.split("-")[0]}` : "Accelerator request"),
  async load({ uuid }) {
    const found = await api.get(`v2/accelerator_requests/${encodeURIComponent(uuid)}`, V);
    let handle = null;
    if (found.attach_handle_uuid) {
      handle = await api
        .get(`v2/attach_handles/${encodeURIComponent(found.attach_handle_uuid)}`, V)
        .catch((error) => {
          if (error.status === 401) throw error;
          return null;
        });
    }
    const devices = handle ? await devicesByUuid([handle.device_uuid]) : {};
    return { arq: found, device: handle ? devices[handle.device_uuid] : null, handle };
  },
  render({ arq: a, device, handle }) {
    return section(
      "Accelerator request",
      facts([
        ["UUID", h("code", { class: "wrap" }, a.uuid)],
        ["State", badge(a.state)],
        ["Profile", [a.device_profile_name ? link(`#/profiles/${encodeURIComponent(a.device_profile_name)}`, a.device_profile_name) : "—", a.device_profile_group_id === null ? "" : ` group ${a.device_profile_group_id}`]],
        ["Host", hostLink(a.hostname)],
        ["Device", device ? [deviceLink(device.uuid, `${device.type} ${device.model}`), " ", deviceState(device)] : handle ? deviceLink(handle.device_uuid) : "—"],
        ["Resource provider", h("code", {}, a.device_rp_uuid || "—")],
        ["Instance", a.instance_uuid ? link(`#/arqs?instance=${encodeURIComponent(a.instance_uuid)}`, a.instance_uuid) : "—"],
        ["Claim", claimLink(a.claim_uuid)],
        ["Project", h("code", {}, a.project_id || "—")],
        ["Attach handle", a.attach_handle_uuid ? [a.attach_handle_type, " ", h("code", {}, a.attach_handle_uuid), " ", attachInfo(a.attach_handle_info)] : "—"],
        ["Created", time(a.created_at)],
        ["Updated", time(a.updated_at)],
      ]),
    );
  },
};

export default {
  route: "/arqs",
  menu: "ARQs",
  title: (params) => (params.instance ? "ARQs of an instance" : "Accelerator requests"),
  async load(params) {
    const query = {
      limit: SHOWN,
      state: params.state,
      hostname: params.hostname,
      instance: params.instance,
      device_profile_name: params.device_profile_name,
    };
    const data = await api.get(api.withQuery("v2/accelerator_requests", query), V);
    return { items: data.arqs, more: Boolean(data.next), devices: await devicesOfArqs(data.arqs) };
  },
  render({ items, more, devices }, params) {
    return [
      pills("/arqs", params, "state", STATES, "ARQ states"),
      filterForm("/arqs", params, [
        ["Host", "hostname", "compute-1"],
        ["Instance", "instance", "instance UUID"],
        ["Profile", "device_profile_name", "profile name"],
      ]),
      params.instance ? h("p", {}, "Instance ", h("code", {}, params.instance)) : null,
      h("div", { class: "card" }, arqsTable(items, devices)),
      more ? h("p", { class: "muted" }, `The ${SHOWN} newest are shown.`) : null,
    ];
  },
};
