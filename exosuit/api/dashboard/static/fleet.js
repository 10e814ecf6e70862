// #/: the fleet at a glance: counts (hosts, devices by type, status and presence,
// attach handles, ARQs, jobs; the listed devices by health, drain, activation and
// free/held), the hosts with their last report and drain, the devices (a search and
// filters kept in the address: #/?health=unhealthy&host=h1), and the failed jobs.

import * as api from "./api.js";
import { h, age, badge, counts, heldOf, hostLink, link, section, table } from "./dom.js";
import { devicesTable, hostDrain, placement } from "./host.js";
import { jobsTable } from "./jobs.js";
import { fleetAllocation, fleetAllocationSection } from "./charts.js";

const SHOWN = 200;
const DEVICES_SHOWN = 500; // rows of the device table (all matching devices are counted)
const DEVICES_READ = 5000; // devices read for the table and its counts
const JOB_STATES = ["pending", "running", "failed", "succeeded"];

// The device table's filters: the address's query parameter, its label, the API's own
// query parameter where GET /v2/devices has one (else the page filters what it read),
// and the choices (null: taken from the data).
const FILTERS = [
  { name: "host", label: "Host", api: "hostname" },
  { name: "type", label: "Type", api: "type" },
  { name: "model", label: "Model" },
  { name: "vendor", label: "Vendor", api: "vendor" },
  { name: "health", label: "Health", choices: ["ok", "warning", "unhealthy", "held back"] },
  { name: "drain", label: "Drain", choices: ["none", "draining", "drained"] },
  {
    name: "activation", label: "Activation", api: "activation",
    choices: ["ready", "inactive", "activating", "deactivating"],
  },
  { name: "status", label: "Status", api: "status", choices: ["enabled", "maintaining"] },
  { name: "held", label: "Free/held", choices: ["free", "held", "not offered"] },
];

// Whether ``device`` passes the filters the API could not apply, and the search.
function matches(device, params) {
  const health = device.health || {};
  const checks = {
    model: () => device.model === params.model,
    health: () =>
      params.health === "held back" ? health.offered === false : health.state === params.health,
    drain: () => (device.maintenance || "none") === params.drain,
    held: () => heldOf(device) === params.held,
  };
  for (const [name, check] of Object.entries(checks)) {
    if (params[name] && !check()) return false;
  }
  if (params.q) {
    const text = [
      device.uuid, device.hostname, device.type, device.model, device.vendor, device.pci_address,
      device.driver_name, ...Object.entries(device.labels || {}).map(([k, v]) => `${k}=${v}`),
    ].join(" ").toLowerCase();
    return params.q.toLowerCase().split(/\s+/).filter(Boolean).every((word) => text.includes(word));
  }
  return true;
}

// The fleet's address with these filters ("#/" with none).
function addressOf(params) {
  const query = new URLSearchParams();
  for (const name of ["q", ...FILTERS.map((f) => f.name)]) {
    if (params[name]) query.set(name, params[name]);
  }
  const text = query.toString();
  return text ? `#/?${text}` : "#/";
}

function choicesOf(filter, data, params) {
  let found = filter.choices;
  if (!found) {
    const of = {
      host: () => data.hosts.items.map((x) => x.hostname),
      type: () => Object.keys(data.summary.devices.by_type),
      model: () => data.devices.map((d) => d.model),
      vendor: () => data.devices.map((d) => d.vendor),
    }[filter.name];
    found = of();
  }
  const all = new Set(found.filter(Boolean));
  if (params[filter.name]) all.add(params[filter.name]); // the one asked, even if none has it
  return filter.choices ? [...all] : [...all].sort();
}

// What is typed in the search box and not yet searched for (the page is redrawn every
// few seconds while the fleet changes: the text and the focus are kept).
let draft = { hash: null, q: "" };

// The search box and one select per filter; a change goes to the new address.
function filterForm(data, params) {
  const typing = document.activeElement && document.activeElement.name === "q";
  const q = draft.hash === location.hash ? draft.q : params.q || "";
  const go = (form) => {
    const values = Object.fromEntries(new FormData(form));
    const next = addressOf(values);
    if (next !== location.hash && !(next === "#/" && location.hash === "")) location.hash = next;
  };
  const form = h(
    "form",
    { class: "device-filters", role: "search", "aria-label": "Device filters" },
    h("label", { class: "search" }, h("span", {}, "Search"),
      h("input", {
        type: "search", name: "q", "aria-label": "Search", value: q, placeholder: "uuid, model, host, PCI, label…",
        oninput: (event) => { draft = { hash: location.hash, q: event.target.value }; },
      })),
    FILTERS.map((filter) =>
      h(
        "label",
        {},
        h("span", {}, filter.label),
        h(
          "select",
          { name: filter.name, "aria-label": filter.label, onchange: () => go(form) },
          h("option", { value: "" }, "any"),
          choicesOf(filter, data, params).map((choice) =>
            h("option", { value: choice, selected: params[filter.name] === choice }, choice),
          ),
        ),
      ),
    ),
    h("div", { class: "filter-buttons" },
      h("button", { type: "submit", class: "action" }, "Search"),
      link("#/", "Clear filters")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    draft = { hash: null, q: "" };
    go(form);
  });
  if (typing) {
    setTimeout(() => {
      const input = form.elements.q;
      if (input.isConnected) {
        input.focus();
        input.setSelectionRange(input.value.length, input.value.length);
      }
    });
  }
  return form;
}

// The listed devices by health, drain, activation and free/held, each a link to its view.
function stateTiles(devices) {
  const count = (key) => {
    const found = {};
    for (const device of devices) {
      const name = key(device);
      if (name) found[name] = (found[name] || 0) + 1;
    }
    return found;
  };
  const href = (name) => (value) => addressOf({ [name]: value });
  return [
    tile("Devices by health", devices.length,
      counts(count((d) => d.health && d.health.state), href("health"), ["unhealthy", "warning", "ok"])),
    tile("Devices by drain", devices.length,
      counts(count((d) => d.maintenance || "none"), href("drain"), ["drained", "draining", "none"])),
    tile("Devices by activation", devices.length,
      counts(count((d) => d.activation), href("activation"), ["inactive", "activating", "deactivating", "ready"])),
    tile("Devices free or held", devices.length,
      counts(count(heldOf), href("held"), ["not offered", "held", "free"])),
  ];
}

function tile(title, total, ...details) {
  return h("section", { class: "tile" }, h("h2", {}, title), h("p", { class: "total" }, String(total)), ...details);
}

function hostsTable(hosts) {
  return table(
    [
      { title: "Host", cell: (x) => hostLink(x.hostname) },
      { title: "Last report", cell: (x) => age(x.report_age_seconds) },
      { title: "Devices", cell: (x) => String(x.devices), class: "num" },
      { title: "Deployables", cell: (x) => String(x.deployables), class: "num" },
      {
        title: "Handles in use",
        cell: (x) => `${x.attach_handles.in_use} / ${x.attach_handles.total}`,
        class: "num",
      },
      {
        title: "Driver errors",
        cell: (x) =>
          x.driver_errors.length
            ? h("span", { title: x.driver_errors.map((e) => `${e.driver}: ${e.error}`).join("\n") },
                badge(String(x.driver_errors.length), "bad"))
            : "0",
        class: "num",
      },
      { title: "Drain", cell: (x) => hostDrain(x) },
      { title: "Placement", cell: (x) => placement(x.placement) },
      { title: "Agent", cell: (x) => x.agent_version || "—" },
    ],
    hosts,
    "No host has reported yet.",
  );
}

function more(list, total, what) {
  return list.more ? h("p", { class: "muted" }, `${list.items.length} of ${total} ${what} shown.`) : null;
}

export default {
  route: "/",
  menu: "Fleet",
  title: () => "Fleet",
  async load(params) {
    const query = { sort_key: "hostname", sort_dir: "asc" };
    for (const filter of FILTERS) if (filter.api && params[filter.name]) query[filter.api] = params[filter.name];
    const [summary, hosts, devices, failed, allocation] = await Promise.all([
      api.get("v2/summary"),
      api.list("v2/hosts", "hosts", { limit: SHOWN }),
      api.listAll("v2/devices", "devices", query, DEVICES_READ),
      api.list("v2/jobs", "jobs", { state: "failed", limit: 20 }),
      fleetAllocation(),
    ]);
    return { summary, hosts, devices, failed, allocation };
  },
  render(data, params) {
    const { summary, hosts, devices, failed, allocation } = data;
    const s = summary;
    const jobs = s.jobs.by_state;
    const matching = devices.filter((d) => matches(d, params));
    const filtered = ["q", ...FILTERS.map((f) => f.name)].some((name) => params[name]);
    return [
      h(
        "div",
        { class: "tiles" },
        tile(
          "Hosts",
          s.hosts.total,
          h("p", {}, badge(`${s.hosts.reporting} reporting`, "ok"), " ",
            badge(`${s.hosts.stale} stale`, s.hosts.stale ? "warn" : "plain")),
        ),
        tile("Devices by type", s.devices.total, counts(s.devices.by_type)),
        tile("Devices by state", s.devices.total, counts(s.devices.by_status), counts(s.devices.by_presence)),
        tile(
          "Attach handles",
          s.attach_handles.total,
          h("p", {}, badge(`${s.attach_handles.in_use} held`, s.attach_handles.in_use ? "warn" : "plain"), " ",
            badge(`${s.attach_handles.free} free`, "ok")),
        ),
        tile("ARQs", s.arqs.total, counts(s.arqs.by_state, (state) => `#/arqs?state=${encodeURIComponent(state)}`)),
        tile(
          "Jobs",
          Object.values(jobs).reduce((a, b) => a + b, 0),
          counts(jobs, (state) => `#/jobs?state=${encodeURIComponent(state)}`, JOB_STATES),
        ),
      ),
      h("div", { class: "tiles" }, stateTiles(devices)),
      section("Hosts", hostsTable(hosts.items), more(hosts, s.hosts.total, "hosts")),
      section(
        "Devices",
        filterForm(data, params),
        h("p", { class: "muted", id: "devices-count" },
          filtered ? `${matching.length} of ${devices.length} devices match.` : `${devices.length} devices.`,
          devices.length >= DEVICES_READ ? ` (The first ${DEVICES_READ} read.)` : "",
          matching.length > DEVICES_SHOWN ? ` The first ${DEVICES_SHOWN} are shown.` : ""),
        devicesTable(matching.slice(0, DEVICES_SHOWN), { empty: "No device matches." }),
      ),
      section(
        "Failed jobs",
        jobsTable(failed.items, "No failed jobs."),
        jobs.failed > failed.items.length ? link("#/jobs?state=failed", `All ${jobs.failed} failed jobs`) : null,
      ),
      fleetAllocationSection(allocation),
    ];
  },
};
