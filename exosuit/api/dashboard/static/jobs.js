// #/jobs: the conductor's job queue, newest first; ?state=failed (or pending,
// running, succeeded) filters. A failed job has a Retry button (admins only).

import * as api from "./api.js";
import { h, badge, link, table, time } from "./dom.js";
import { action } from "./actions.js";

const STATES = ["pending", "running", "failed", "succeeded"];
const SHOWN = 200;

export function retryButton(job) {
  return action("Retry", async () => {
    await api.post(`v2/jobs/${encodeURIComponent(job.id)}/retry`);
    return `Job ${job.id} (${job.kind}) is pending again.`;
  });
}

export function jobsTable(jobs, empty = "No jobs.") {
  return table(
    [
      { title: "Job", cell: (j) => String(j.id) },
      { title: "Kind", cell: (j) => j.kind },
      { title: "Key", cell: (j) => h("span", { class: "wrap" }, j.key || "—") },
      { title: "State", cell: (j) => badge(j.state) },
      { title: "Attempts", cell: (j) => String(j.attempts), class: "num" },
      { title: "Worker", cell: (j) => j.worker || "—" },
      { title: "Run after", cell: (j) => time(j.run_after) },
      { title: "Last error", cell: (j) => h("span", { class: "wrap error-text" }, j.last_error || "—") },
      { title: "Updated", cell: (j) => time(j.updated_at || j.created_at) },
      { title: "", cell: (j) => (j.state === "failed" ? retryButton(j) : "") },
    ],
    jobs,
    empty,
  );
}

export default {
  route: "/jobs",
  menu: "Jobs",
  title: (params) => (params.state ? `Jobs: ${params.state}` : "Jobs"),
  async load(params) {
    return api.list("v2/jobs", "jobs", { limit: SHOWN, state: params.state, kind: params.kind });
  },
  render({ items, more }, params) {
    return [
      h(
        "nav",
        { class: "filters", "aria-label": "Job states" },
        link("#/jobs", "all", { "aria-current": params.state ? false : "true" }),
        STATES.map((s) =>
          link(`#/jobs?state=${s}`, s, { "aria-current": params.state === s ? "true" : false }),
        ),
      ),
      h("div", { class: "card" }, jobsTable(items)),
      more ? h("p", { class: "muted" }, `The ${SHOWN} newest are shown.`) : null,
    ];
  },
};
