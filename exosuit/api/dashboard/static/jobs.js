// #/jobs: the conductor's job queue, newest first; ?state=failed (or pending, running,
// succeeded) and ?kind= filter. #/jobs/ID: one job, its payload and its last error
// whole. A failed job has Retry (admins only). Periodic jobs (one row per kind, with
// a fixed negative id: doc/conductor.md) are named "periodic", not by that id.

import * as api from "./api.js";
import { h, badge, facts, filterForm, link, pills, section, table, time, whole } from "./dom.js";
import { action } from "./actions.js";

const STATES = ["pending", "running", "failed", "succeeded"];
const SHOWN = 200;
const V = "2.11";

export const isPeriodic = (job) => job.id < 0;

// The job's name in a list: its id, or "periodic" for a periodic kind's row.
export function jobLink(job) {
  const href = `#/jobs/${encodeURIComponent(job.id)}`;
  return isPeriodic(job)
    ? link(href, "periodic", { title: `job ${job.id}: the schedule of ${job.kind}` })
    : link(href, String(job.id));
}

const jobName = (job) => (isPeriodic(job) ? `Periodic job ${job.kind}` : `Job ${job.id}`);

export function retryButton(job) {
  return action(
    "Retry",
    async () => {
      await api.request("POST", `v2/jobs/${encodeURIComponent(job.id)}/retry`, undefined, V);
      return `${jobName(job)} (${job.kind}) is pending again.`;
    },
    {
      rule: "exosuit:job:retry",
      confirm: `Run ${jobName(job).toLowerCase()} (${job.kind}) again? Its attempts are reset and it is due now.`,
    },
  );
}

export function jobsTable(jobs, empty = "No jobs.") {
  return table(
    [
      { title: "Job", cell: jobLink },
      { title: "Kind", cell: (j) => link(`#/jobs?kind=${encodeURIComponent(j.kind)}`, j.kind) },
      { title: "Key", cell: (j) => h("span", { class: "wrap" }, j.key || "—") },
      { title: "State", cell: (j) => badge(j.state) },
      { title: "Attempts", cell: (j) => String(j.attempts), class: "num" },
      { title: "Worker", cell: (j) => j.worker || "—" },
      { title: "Run after", cell: (j) => time(j.run_after) },
      { title: "Last error", cell: (j) => (j.last_error ? h("span", { class: "wrap error-text" }, j.last_error) : "—") },
      { title: "Updated", cell: (j) => time(j.updated_at || j.created_at) },
      { title: "", cell: (j) => (j.state === "failed" ? retryButton(j) : "") },
    ],
    jobs,
    empty,
  );
}

export const job = {
  route: "/jobs/:id",
  title: (params, data) => (data ? `${jobName(data)}: ${data.kind}` : `Job ${params.id}`),
  async load({ id }) {
    return api.get(`v2/jobs/${encodeURIComponent(id)}`, V);
  },
  render(j) {
    return [
      section(
        "Job",
        facts([
          ["Id", [String(j.id), isPeriodic(j) ? h("span", { class: "muted" }, " (periodic: its row is its schedule)") : ""]],
          ["Kind", link(`#/jobs?kind=${encodeURIComponent(j.kind)}`, j.kind)],
          ["Key", h("code", { class: "wrap" }, j.key || "—")],
          ["State", badge(j.state)],
          ["Attempts", String(j.attempts)],
          ["Worker", j.worker || "—"],
          ["Run after", time(j.run_after)],
          ["Lease expires", time(j.lease_expires_at)],
          ["Created", time(j.created_at)],
          ["Updated", time(j.updated_at)],
        ]),
        h("div", { class: "actions" }, j.state === "failed" ? retryButton(j) : null),
      ),
      section(
        "Last error",
        j.last_error
          ? whole(j.last_error, "error-text")
          : h("p", { class: "muted" }, "None."),
      ),
      section("Payload", whole(JSON.stringify(j.payload, null, 2))),
    ];
  },
};

export default {
  route: "/jobs",
  menu: "Jobs",
  title: (params) =>
    [params.state ? `Jobs: ${params.state}` : "Jobs", params.kind ? ` (${params.kind})` : ""].join(""),
  async load(params) {
    const query = { limit: SHOWN, state: params.state, kind: params.kind };
    const data = await api.get(api.withQuery("v2/jobs", query), V);
    return { items: data.jobs, more: Boolean(data.next) };
  },
  render({ items, more }, params) {
    return [
      pills("/jobs", params, "state", STATES, "Job states"),
      filterForm("/jobs", params, [["Kind", "kind", "placement_sync"]]),
      h("div", { class: "card" }, jobsTable(items)),
      more ? h("p", { class: "muted" }, `The ${SHOWN} newest are shown.`) : null,
    ];
  },
};
