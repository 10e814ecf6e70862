// #/hosts/NAME: one host: its report, its devices, its deployables and its attach
// handles with who holds each. (The deployables and handle tables serve the device
// page too.)

import * as api from "./api.js";
import {
  h, age, attachInfo, badge, deployableAttributes, deviceLink, facts, hostLink, joined, link, section,
  short, table, time,
} from "./dom.js";

// The deployables named by ``handles``, each read once (the API lists deployables
// without a host or device filter; a host has few).
export async function deployablesOf(handles) {
  const uuids = [...new Set(handles.map((a) => a.deployable_uuid))].sort();
  const found = await Promise.all(
    uuids.map((uuid) =>
      api.get(`v2/deployables/${encodeURIComponent(uuid)}`).catch((error) => {
        if (error.status === 404) return null; // removed since the handles were read
        throw error;
      }),
    ),
  );
  return found.filter(Boolean);
}

export function deployablesTable(deployables, handles) {
  const of = (d) => handles.filter((a) => a.deployable_uuid === d.uuid);
  return table(
    [
      { title: "Deployable", cell: (d) => h("span", { class: "wrap" }, d.name) },
      { title: "Device", cell: (d) => deviceLink((of(d)[0] || {}).device_uuid) },
      { title: "Resource class", cell: (d) => deployableAttributes(d.attributes_list).rc || "—" },
      {
        title: "Traits",
        cell: (d) => h("span", { class: "wrap" }, joined(deployableAttributes(d.attributes_list).traits)),
      },
      { title: "Units", cell: (d) => String(d.num_accelerators), class: "num" },
      {
        title: "Handles in use",
        cell: (d) => `${of(d).filter((a) => a.in_use).length} / ${of(d).length}`,
        class: "num",
      },
      { title: "Provider", cell: (d) => short(d.rp_uuid) },
    ],
    deployables,
    "No deployables.",
  );
}

function holder(handle) {
  const held = handle.holder;
  if (!held) return handle.in_use ? "in use" : "—";
  return h(
    "span",
    { class: "holder" },
    badge(held.state),
    " instance ",
    held.instance_uuid
      ? link(`#/arqs?instance=${encodeURIComponent(held.instance_uuid)}`, short(held.instance_uuid))
      : "—",
    " project ",
    short(held.project_id),
    " ARQ ",
    short(held.arq_uuid),
  );
}

// Handles by deployable, then by address (the API sorts by uuid or creation only).
function byDeployableAndAddress(a, b) {
  return (
    a.deployable_name.localeCompare(b.deployable_name) ||
    attachInfo(a.attach_info).localeCompare(attachInfo(b.attach_info), undefined, { numeric: true })
  );
}

export function handlesTable(handles) {
  return table(
    [
      { title: "Handle", cell: (a) => short(a.uuid) },
      { title: "Deployable", cell: (a) => h("span", { class: "wrap" }, a.deployable_name) },
      { title: "Type", cell: (a) => a.attach_type },
      { title: "Address", cell: (a) => h("span", { class: "wrap" }, attachInfo(a.attach_info)) },
      { title: "State", cell: (a) => badge(a.in_use ? "in use" : "free") },
      { title: "Presence", cell: (a) => badge(a.presence) },
      { title: "Held by", cell: holder },
    ],
    [...handles].sort(byDeployableAndAddress),
    "No attach handles.",
  );
}

export function devicesTable(devices, { withHost = true } = {}) {
  return table(
    [
      { title: "Type", cell: (d) => d.type },
      { title: "Model", cell: (d) => deviceLink(d.uuid, d.model || d.uuid) },
      { title: "Vendor", cell: (d) => d.vendor },
      withHost ? { title: "Host", cell: (d) => hostLink(d.hostname) } : null,
      { title: "PCI", cell: (d) => d.pci_address || "—" },
      { title: "Driver", cell: (d) => d.driver_name || "—" },
      { title: "Status", cell: (d) => badge(d.status) },
      { title: "Presence", cell: (d) => badge(d.presence) },
    ].filter(Boolean),
    devices,
    "No devices.",
  );
}

export function placement(p) {
  if (!p) return "—";
  if (p.failures) return h("span", { title: p.last_error || "" }, badge(`${p.failures} failures`, "bad"));
  return p.synced_at ? [badge("synced", "ok"), " ", time(p.synced_at)] : badge("pending", "warn");
}

export default {
  route: "/hosts/:hostname",
  title: (params) => `Host ${params.hostname}`,
  async load({ hostname }) {
    const [host, devices, handles] = await Promise.all([
      api.get(`v2/hosts/${encodeURIComponent(hostname)}`),
      api.listAll("v2/devices", "devices", { hostname, sort_key: "type", sort_dir: "asc" }),
      api.listAll("v2/attach_handles", "attach_handles", { hostname, sort_key: "uuid", sort_dir: "asc" }),
    ]);
    return { host, devices, handles, deployables: await deployablesOf(handles) };
  },
  render({ host, devices, handles, deployables }) {
    const inUse = handles.filter((a) => a.in_use).length;
    return [
      section(
        "Report",
        facts([
          ["Last report", [age(host.report_age_seconds), " ago · ", time(host.last_report_at)]],
          ["Agent version", host.agent_version || "—"],
          ["Snapshot hash", h("code", { class: "wrap" }, host.snapshot_hash || "—")],
          ["Attach handles", `${inUse} in use of ${handles.length}`],
          ["Placement", placement(host.placement)],
          ["Compute provider", host.placement ? short(host.placement.compute_rp_uuid) : "—"],
          ["Known since", time(host.created_at)],
        ]),
        host.driver_errors && host.driver_errors.length
          ? h(
              "ul",
              { class: "driver-errors" },
              host.driver_errors.map((e) => h("li", {}, badge(e.driver, "bad"), " ", e.error)),
            )
          : null,
      ),
      section("Devices", devicesTable(devices, { withHost: false })),
      section("Deployables", deployablesTable(deployables, handles)),
      section("Attach handles", handlesTable(handles)),
    ];
  },
};
