// #/: the fleet at a glance: counts (hosts, devices by type, status and presence,
// attach handles, ARQs, jobs), the hosts with their last report, the devices, and
// the failed jobs.

import * as api from "./api.js";
import { h, age, badge, counts, hostLink, link, section, table } from "./dom.js";
import { devicesTable, placement } from "./host.js";
import { jobsTable } from "./jobs.js";
import { fleetAllocation, fleetAllocationSection } from "./charts.js";

const SHOWN = 200;
const JOB_STATES = ["pending", "running", "failed", "succeeded"];

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
  async load() {
    const [summary, hosts, devices, failed, allocation] = await Promise.all([
      api.get("v2/summary"),
      api.list("v2/hosts", "hosts", { limit: SHOWN }),
      api.list("v2/devices", "devices", { limit: SHOWN, sort_key: "hostname", sort_dir: "asc" }),
      api.list("v2/jobs", "jobs", { state: "failed", limit: 20 }),
      fleetAllocation(),
    ]);
    return { summary, hosts, devices, failed, allocation };
  },
  render({ summary, hosts, devices, failed, allocation }) {
    const s = summary;
    const jobs = s.jobs.by_state;
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
      section("Hosts", hostsTable(hosts.items), more(hosts, s.hosts.total, "hosts")),
      section("Devices", devicesTable(devices.items), more(devices, s.devices.total, "devices")),
      section(
        "Failed jobs",
        jobsTable(failed.items, "No failed jobs."),
        jobs.failed > failed.items.length ? link("#/jobs?state=failed", `All ${jobs.failed} failed jobs`) : null,
      ),
      fleetAllocationSection(allocation),
    ];
  },
};
