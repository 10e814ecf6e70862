// #/hosts/NAME: one host: its report (last report, drain, desired vs observed
// generation), its devices with their health, drain, activation and holders, its
// drivers and services, its deployables and its attach handles with who holds each
// (an ARQ and its instance, or a claim and its consumer); Drain / Undrain the host.
// (The devices, deployables and handle tables serve the fleet and device pages too.)

import * as api from "./api.js";
import {
  h, activationBadge, age, attachInfo, badge, deployableAttributes, deviceLink, deviceRowClass,
  drainBadge, facts, healthBadge, orDash, heldBadge, holderText, hostLink, joined, link, offer, section, short,
  table, time,
} from "./dom.js";
import { action } from "./actions.js";

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

// ``devices``: uuid → device, so that each deployable's device shows whether it is free.
export function deployablesTable(deployables, handles, devices = {}) {
  const of = (d) => handles.filter((a) => a.deployable_uuid === d.uuid);
  const deviceOf = (d) => {
    const uuid = (of(d)[0] || {}).device_uuid;
    return [deviceLink(uuid), devices[uuid] ? [" ", heldBadge(devices[uuid])] : ""];
  };
  return table(
    [
      { title: "Deployable", cell: (d) => h("span", { class: "wrap" }, d.name) },
      { title: "Device", cell: deviceOf },
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

// The claims holding ``handles``, each read once: uuid → claim (null when it cannot be
// read: released and forgotten, or another project's for a non-admin).
export async function claimsOf(handles) {
  const uuids = [...new Set(handles.map((a) => a.holder && a.holder.claim_uuid).filter(Boolean))].sort();
  const found = await Promise.all(
    uuids.map((uuid) =>
      api.get(`v2/claims/${encodeURIComponent(uuid)}`).catch((error) => {
        if (error.status === 404 || error.status === 403) return null;
        throw error;
      }),
    ),
  );
  return Object.fromEntries(uuids.map((uuid, i) => [uuid, found[i]]));
}

function consumerText(claim) {
  if (!claim) return "—";
  const container = claim.container ? " (container)" : "";
  return `${claim.consumer || "—"}${container}`;
}

// Who holds a handle: its ARQ's state and either the instance (Nova) or the claim and
// its consumer (a standalone workload), and the project.
export function holder(handle, claims = {}) {
  const held = handle.holder;
  if (!held) return handle.in_use ? "in use" : "—";
  const whose = held.claim_uuid
    ? [" claim ", short(held.claim_uuid), " consumer ", consumerText(claims[held.claim_uuid])]
    : [
        " instance ",
        held.instance_uuid
          ? link(`#/arqs?instance=${encodeURIComponent(held.instance_uuid)}`, short(held.instance_uuid))
          : "—",
      ];
  return h(
    "span",
    { class: "holder" },
    badge(held.state),
    " ARQ ",
    short(held.arq_uuid),
    whose,
    " project ",
    short(held.project_id),
  );
}

// Handles by deployable, then by address (the API sorts by uuid or creation only).
function byDeployableAndAddress(a, b) {
  return (
    a.deployable_name.localeCompare(b.deployable_name) ||
    attachInfo(a.attach_info).localeCompare(attachInfo(b.attach_info), undefined, { numeric: true })
  );
}

// A handle's state: "in use", "free", or "not offered" when its device takes no new
// workload (unhealthy, drained, inactive …: a free handle of it must not look free).
export function handleState(inUse, device) {
  if (inUse) return badge("in use");
  const why = device ? offer(device) : [];
  return why.length ? h("span", { title: why.join(", ") }, badge("not offered", "bad")) : badge("free");
}

// ``devices``: uuid → device, for each handle's state.
export function handlesTable(handles, claims = {}, devices = {}) {
  return table(
    [
      { title: "Handle", cell: (a) => short(a.uuid) },
      { title: "Deployable", cell: (a) => h("span", { class: "wrap" }, a.deployable_name) },
      { title: "Type", cell: (a) => a.attach_type },
      { title: "Address", cell: (a) => h("span", { class: "wrap" }, attachInfo(a.attach_info)) },
      { title: "State", cell: (a) => handleState(a.in_use, devices[a.device_uuid]) },
      { title: "Presence", cell: (a) => badge(a.presence) },
      { title: "Held by", cell: (a) => holder(a, claims) },
    ],
    [...handles].sort(byDeployableAndAddress),
    "No attach handles.",
  );
}

// Devices with their health, drain, activation and holders: a row that is not free is
// tinted, and its "Free/held" cell says why.
export function devicesTable(devices, { withHost = true, empty = "No devices." } = {}) {
  return table(
    [
      { title: "Type", cell: (d) => d.type },
      { title: "Model", cell: (d) => deviceLink(d.uuid, d.model || d.uuid) },
      { title: "Vendor", cell: (d) => d.vendor },
      withHost ? { title: "Host", cell: (d) => hostLink(d.hostname) } : null,
      { title: "PCI", cell: (d) => d.pci_address || "—" },
      { title: "Free/held", cell: heldBadge },
      { title: "Health", cell: (d) => healthBadge(d.health) },
      { title: "Status", cell: (d) => badge(d.status) },
      { title: "Drain", cell: drainBadge },
      { title: "Activation", cell: activationBadge },
      { title: "Presence", cell: (d) => badge(d.presence) },
      { title: "Driver", cell: (d) => d.driver_name || "—" },
    ].filter(Boolean),
    devices,
    empty,
    { rowClass: deviceRowClass },
  );
}

// What the agent reported of each driver, what was asked of it and whether it applied it.
function driversTable(drivers) {
  return table(
    [
      { title: "Driver", cell: (d) => d.name },
      { title: "Version", cell: (d) => d.version || "—" },
      { title: "Enabled", cell: (d) => (d.enabled === null ? "—" : badge(d.enabled ? "enabled" : "disabled")) },
      { title: "Found", cell: (d) => orDash(d.found), class: "num" },
      { title: "Error", cell: (d) => (d.error ? h("span", { class: "wrap error-text" }, d.error) : "—") },
      { title: "Reported", cell: (d) => time(d.reported_at) },
      {
        title: "Asked",
        cell: (d) =>
          d.desired
            ? `${d.desired.enabled === false ? "disabled" : "enabled"} (${d.desired.scope}` +
              `${orDash(d.desired.generation) === "—" ? "" : `, generation ${d.desired.generation}`})`
            : "—",
      },
      {
        title: "Applied",
        cell: (d) => (orDash(d.observed) === "—" ? "—" : badge(d.observed ? "applied" : "pending")),
      },
    ],
    drivers,
    "No driver reported.",
  );
}

function servicesTable(services) {
  const details = (x) =>
    Object.entries(x.details || {}).map(([key, value]) => `${key}=${value}`).join(", ") || "—";
  return table(
    [
      { title: "Device", cell: (x) => deviceLink(x.device_uuid) },
      { title: "Type", cell: (x) => x.device_type },
      { title: "Kind", cell: (x) => x.kind },
      { title: "Name", cell: (x) => x.name },
      { title: "Enabled", cell: (x) => badge(x.enabled ? "enabled" : "disabled", x.enabled ? "ok" : "plain") },
      { title: "Details", cell: (x) => h("span", { class: "wrap" }, details(x)) },
    ],
    services,
    "No services.",
  );
}

// "desired 5 · observed 4": the desired state on its way to the agent, or applied.
export function generations(host) {
  if (host.desired_generation === undefined) return "—";
  const observed = host.observed_generation;
  const behind = observed === null || observed < host.desired_generation;
  return [
    `desired ${host.desired_generation} · observed ${observed === null ? "none yet" : observed} `,
    badge(behind && host.desired_generation > 0 ? "applying" : "applied"),
    host.observed_at ? [" ", time(host.observed_at)] : "",
  ];
}

// The host's drain, as the fleet and host pages show it.
export function hostDrain(host) {
  if (!host.drained_at) return badge("not drained", "plain");
  return [badge(host.maintenance || "drained", "warn"), " since ", time(host.drained_at)];
}

function drainActions(host) {
  const name = host.hostname;
  const path = `v2/hosts/${encodeURIComponent(name)}`;
  const drained = Boolean(host.drained_at);
  return h(
    "div",
    { class: "actions" },
    drained
      ? action(
          "Undrain host",
          async () => {
            const answer = await api.post(`${path}/undrain`);
            return `Host ${name} is undrained: ${answer.devices.length} devices take new workloads again.`;
          },
          { rule: "exosuit:host:undrain", confirm: `Undrain host ${name}? Its devices take new workloads again.` },
        )
      : action(
          "Drain host",
          async () => {
            const answer = await api.post(`${path}/drain`);
            return `Host ${name} is ${answer.maintenance}: its devices take no new workload.`;
          },
          {
            rule: "exosuit:host:drain",
            danger: true,
            confirm:
              `Drain host ${name}? None of its devices takes a new workload (what holds one ` +
              "keeps it), nor will the devices it reports later.",
          },
        ),
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
    const [host, devices, handles, drivers, services] = await Promise.all([
      api.get(`v2/hosts/${encodeURIComponent(hostname)}`),
      api.listAll("v2/devices", "devices", { hostname, sort_key: "type", sort_dir: "asc" }),
      api.listAll("v2/attach_handles", "attach_handles", { hostname, sort_key: "uuid", sort_dir: "asc" }),
      api.listAll("v2/drivers", "drivers", { hostname }),
      api.listAll("v2/services", "services", { hostname }),
    ]);
    const [deployables, claims] = await Promise.all([deployablesOf(handles), claimsOf(handles)]);
    return { host, devices, handles, drivers, services, deployables, claims };
  },
  render({ host, devices, handles, drivers, services, deployables, claims }) {
    const inUse = handles.filter((a) => a.in_use).length;
    const byUuid = Object.fromEntries(devices.map((d) => [d.uuid, d]));
    return [
      section(
        "Report",
        facts([
          ["Last report", [age(host.report_age_seconds), " ago · ", time(host.last_report_at)]],
          ["Drain", hostDrain(host)],
          ["Desired state", generations(host)],
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
        drainActions(host),
      ),
      section("Devices", devicesTable(devices, { withHost: false })),
      section("Drivers", driversTable(drivers.filter((d) => d.hostname === host.hostname))),
      section("Services", servicesTable(services)),
      section("Deployables", deployablesTable(deployables, handles, byUuid)),
      section("Attach handles", handlesTable(handles, claims, byUuid)),
    ];
  },
};
