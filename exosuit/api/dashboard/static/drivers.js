// #/drivers: each host's driver plug-ins (what its agent reports, what an operator
// asked, whether the agent has seen it: 2.7) and the services its devices offer or could
// offer (with each device's health, drain and activation); ?hostname= shows one host.

import * as api from "./api.js";
import { h, badge, deviceLink, deviceState, filterForm, hostLink, section, table, time } from "./dom.js";
import { everyAt } from "./arqs.js";

function byHost(items) {
  const hosts = new Map();
  for (const item of items) {
    const name = item.hostname ?? "(every host)";
    if (!hosts.has(name)) hosts.set(name, []);
    hosts.get(name).push(item);
  }
  return hosts;
}

function driversTable(drivers) {
  return table(
    [
      { title: "Driver", cell: (d) => d.name },
      { title: "Version", cell: (d) => d.version || "—" },
      { title: "Enabled", cell: (d) => (d.enabled === null ? "—" : badge(d.enabled ? "enabled" : "disabled", d.enabled ? "ok" : "warn")) },
      { title: "Devices found", cell: (d) => (d.found === null ? "—" : String(d.found)), class: "num" },
      { title: "Asked", cell: (d) => (d.desired ? h("code", { class: "wrap" }, JSON.stringify(d.desired)) : "—") },
      { title: "Seen by the agent", cell: (d) => (d.observed === null ? "—" : d.observed ? "yes" : "not yet") },
      { title: "Error", cell: (d) => (d.error ? h("span", { class: "wrap error-text" }, d.error) : "—") },
      { title: "Reported", cell: (d) => time(d.reported_at) },
    ],
    drivers,
    "No driver reported.",
  );
}

function servicesTable(services, devices) {
  return table(
    [
      { title: "Service", cell: (s) => s.name },
      { title: "Kind", cell: (s) => s.kind },
      { title: "Offered", cell: (s) => badge(s.enabled ? "offered" : "not offered", s.enabled ? "ok" : "plain") },
      { title: "Device", cell: (s) => deviceLink(s.device_uuid, devices[s.device_uuid] ? `${s.device_type} ${devices[s.device_uuid].model}` : s.device_type) },
      { title: "State", cell: (s) => deviceState(devices[s.device_uuid]) },
      { title: "Driver", cell: (s) => s.driver_name || "—" },
      {
        title: "Details",
        cell: (s) => h("span", { class: "wrap" }, Object.entries(s.details || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "—"),
      },
    ],
    services,
    "No services.",
  );
}

export default {
  route: "/drivers",
  menu: "Drivers",
  title: (params) => (params.hostname ? `Drivers and services of ${params.hostname}` : "Drivers and services"),
  async load(params) {
    const query = params.hostname ? { hostname: params.hostname } : {};
    const [drivers, services, devices] = await Promise.all([
      everyAt("v2/drivers", "drivers", query),
      everyAt("v2/services", "services", query),
      everyAt("v2/devices", "devices", query),
    ]);
    return { drivers, services, devices: Object.fromEntries(devices.map((d) => [d.uuid, d])) };
  },
  render({ drivers, services, devices }, params) {
    const driversOf = byHost(drivers);
    const servicesOf = byHost(services);
    const names = [...new Set([...driversOf.keys(), ...servicesOf.keys()])].sort();
    return [
      filterForm("/drivers", params, [["Host", "hostname", "compute-1"]]),
      names.length ? null : h("p", { class: "muted" }, "No host has reported a driver."),
      names.map((name) =>
        section(
          name === "(every host)" ? name : hostLink(name),
          h("h3", {}, "Drivers"),
          driversTable(driversOf.get(name) || []),
          h("h3", {}, "Services"),
          servicesTable(servicesOf.get(name) || [], devices),
        ),
      ),
    ];
  },
};
