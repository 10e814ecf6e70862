// #/profiles: device profiles (named request groups). #/profiles/NAME: one profile, its
// groups, and "Why not here?": the claim dry run (POST /v2/claims with "dry_run": true,
// 2.10) that places nothing and answers, per host and per deployable, why the profile
// could or could not be placed there (doc/devices.md, "Why not here?").

import * as api from "./api.js";
import {
  h, badge, deviceLink, deviceState, facts, hostLink, link, section, short, table, time,
} from "./dom.js";
import { action } from "./actions.js";
import { V, claimLink, devicesByUuid } from "./claims.js";

const SHOWN = 200;
// The last dry run of the profile on screen: {at, result, devices}; forgotten when
// another profile's page is opened.
const dryRuns = new Map();
let profileShown = null;

const profileLink = (name) => link(`#/profiles/${encodeURIComponent(name)}`, name);
const groupText = (group) =>
  Object.entries(group).map(([key, value]) => `${key}=${value}`).join(", ");

function verdictBadge(verdict) {
  const kind = verdict === "chosen" ? "ok" : verdict === "spare" ? "plain" : verdict === "held" || verdict === "topology" ? "warn" : "bad";
  return badge(verdict, kind);
}

function holdersCell(holders) {
  if (!holders || !holders.length) return "—";
  return holders.map((holder, i) => [
    i ? ", " : "",
    holder.claim_uuid
      ? ["claim ", claimLink(holder.claim_uuid)]
      : ["ARQ ", link(`#/arqs/${encodeURIComponent(holder.arq_uuid)}`, short(holder.arq_uuid))],
    holder.instance_uuid ? [" of instance ", short(holder.instance_uuid)] : "",
  ]);
}

function whyNotButton(profile) {
  return action(
    "Why not here?",
    async () => {
      const result = await api.request(
        "POST",
        "v2/claims",
        { device_profile_name: profile.name, dry_run: true },
        V,
      );
      const uuids = result.hosts.flatMap((host) => host.devices.map((d) => d.device_uuid));
      const devices = await devicesByUuid(uuids);
      dryRuns.set(profile.name, { at: new Date().toISOString(), result, devices });
      return result.hostname
        ? `Dry run of ${profile.name}: a claim would be placed on ${result.hostname}. Nothing was held.`
        : `Dry run of ${profile.name}: a claim would be refused: ${result.reason}`;
    },
    { rule: "exosuit:claim:create" },
  );
}

function dryRunView({ at, result, devices }) {
  const verdict = result.hostname
    ? h("p", {}, badge("placeable", "ok"), " A claim would be placed on ", hostLink(result.hostname), ", taking ", String(result.devices.length), " device(s). Nothing was held or written.")
    : h("p", {}, badge("refused", "bad"), " ", h("span", { class: "error-text" }, result.reason || "no host can take it"));
  return section(
    "Why not here?",
    h("p", { class: "muted" }, "Dry run at ", time(at), "."),
    verdict,
    result.consumer_claim ? h("p", {}, "The consumer's live claim ", claimLink(result.consumer_claim), " would be returned instead.") : null,
    table(
      [
        { title: "Host", cell: (host) => hostLink(host.hostname) },
        { title: "Verdict", cell: (host) => verdictBadge(host.verdict) },
        { title: "Why", cell: (host) => h("span", { class: "wrap" }, host.reason) },
      ],
      result.hosts,
      "No host has a device.",
    ),
    result.hosts.map((host) =>
      host.devices.length
        ? [
            h("h3", {}, `On ${host.hostname}`),
            table(
              [
                { title: "Deployable", cell: (d) => d.deployable_name },
                {
                  title: "Device",
                  cell: (d) => {
                    const device = devices[d.device_uuid];
                    return deviceLink(d.device_uuid, device ? `${device.type} ${device.model}` : null);
                  },
                },
                { title: "State", cell: (d) => deviceState(devices[d.device_uuid]) },
                { title: "Group", cell: (d) => (d.group === null ? "—" : String(d.group)), class: "num" },
                { title: "Verdict", cell: (d) => verdictBadge(d.verdict) },
                { title: "Why", cell: (d) => h("span", { class: "wrap" }, d.reason) },
                { title: "Holders", cell: (d) => holdersCell(d.holders) },
              ],
              host.devices,
            ),
          ]
        : null,
    ),
  );
}

const list = {
  route: "/profiles",
  menu: "Profiles",
  title: () => "Device profiles",
  async load() {
    profileShown = null;
    const data = await api.get(api.withQuery("v2/device_profiles", { limit: SHOWN }), V);
    return { items: data.device_profiles, more: Boolean(data.next) };
  },
  render({ items, more }) {
    return [
      h(
        "div",
        { class: "card" },
        table(
          [
            { title: "Profile", cell: (p) => profileLink(p.name) },
            { title: "Groups", cell: (p) => h("span", { class: "wrap" }, p.groups.map(groupText).join(" | ")) },
            { title: "Description", cell: (p) => h("span", { class: "wrap" }, p.description || "—") },
            { title: "UUID", cell: (p) => short(p.uuid) },
            { title: "Created", cell: (p) => time(p.created_at) },
          ],
          items,
          "No device profiles.",
        ),
      ),
      more ? h("p", { class: "muted" }, `The first ${SHOWN} are shown.`) : null,
    ];
  },
};

export const profile = {
  route: "/profiles/:name",
  title: (params) => `Profile ${params.name}`,
  async load({ name }) {
    if (name !== profileShown) dryRuns.clear();
    profileShown = name;
    const data = await api.get(`v2/device_profiles/${encodeURIComponent(name)}`, V);
    return { profile: data.device_profile, dryRun: dryRuns.get(data.device_profile.name) || null };
  },
  render({ profile: p, dryRun }) {
    return [
      section(
        "Profile",
        facts([
          ["Name", p.name],
          ["UUID", h("code", { class: "wrap" }, p.uuid)],
          ["Description", p.description],
          ["Created", time(p.created_at)],
          ["Requests", link(`#/arqs?device_profile_name=${encodeURIComponent(p.name)}`, "its accelerator requests")],
        ]),
        h("div", { class: "actions" }, whyNotButton(p)),
      ),
      section(
        "Groups",
        table(
          [
            { title: "Group", cell: (g) => String(p.groups.indexOf(g)), class: "num" },
            { title: "Asks", cell: (g) => h("span", { class: "wrap" }, groupText(g)) },
          ],
          p.groups,
          "No groups.",
        ),
      ),
      dryRun ? dryRunView(dryRun) : null,
    ];
  },
};

export default list;
