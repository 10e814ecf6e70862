// #/images: the image catalogue (FPGA bitstreams and the like, 2.6) the caller sees,
// filtered by status, visibility, name, vendor, function and format. #/images/UUID: one
// image, its checksums and signature, the projects it is shared with, and the
// deployables whose loaded bitstream it is (with their device's health, drain and
// activation).

import * as api from "./api.js";
import {
  h, badge, deviceLink, deviceState, facts, filterForm, hostLink, link, pills, section,
  short, table, time,
} from "./dom.js";
import { V, devicesByUuid } from "./claims.js";
import { everyAt } from "./arqs.js";

const STATUSES = ["queued", "active"];
const SHOWN = 200;

const imageLink = (image) => link(`#/images/${encodeURIComponent(image.uuid)}`, image.name);

function size(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let value = Number(bytes);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

// The deployables running the image, each with its host and device (null: the caller
// may not read deployables).
async function runningOn(uuid) {
  let deployables;
  try {
    deployables = (await everyAt("v2/deployables", "deployables")).filter((d) => d.bitstream_id === uuid);
  } catch (error) {
    if (error.status === 401) throw error;
    return null;
  }
  const handles = await Promise.all(
    deployables.map((d) =>
      api
        .get(api.withQuery("v2/attach_handles", { deployable_uuid: d.uuid, limit: 1 }), V)
        .then((data) => data.attach_handles[0] || null)
        .catch(() => null),
    ),
  );
  const devices = await devicesByUuid(handles.map((ah) => ah && ah.device_uuid));
  return deployables.map((d, i) => ({
    deployable: d,
    hostname: handles[i] ? handles[i].hostname : null,
    device: handles[i] ? devices[handles[i].device_uuid] || { uuid: handles[i].device_uuid } : null,
  }));
}

const list = {
  route: "/images",
  menu: "Images",
  title: (params) => (params.status ? `Images: ${params.status}` : "Images"),
  async load(params) {
    const query = {
      limit: SHOWN,
      status: params.status,
      visibility: params.visibility,
      name: params.name,
      vendor: params.vendor,
      function_id: params.function_id,
      format: params.format,
    };
    const data = await api.get(api.withQuery("v2/images", query), V);
    return { items: data.images, more: Boolean(data.next) };
  },
  render({ items, more }, params) {
    return [
      pills("/images", params, "status", STATUSES, "Image statuses"),
      filterForm("/images", params, [
        ["Name", "name", "demo-afu"],
        ["Visibility", "visibility", "private, shared, public"],
        ["Vendor", "vendor", "0x8086"],
        ["Function", "function_id", "function id"],
        ["Format", "format", "gbs"],
      ]),
      h(
        "div",
        { class: "card" },
        table(
          [
            { title: "Image", cell: imageLink },
            { title: "Status", cell: (i) => badge(i.status, i.status === "active" ? "ok" : undefined) },
            { title: "Visibility", cell: (i) => i.visibility },
            { title: "Format", cell: (i) => i.format },
            { title: "Vendor", cell: (i) => i.vendor || "—" },
            { title: "Board", cell: (i) => i.board || "—" },
            { title: "Function", cell: (i) => i.function_id || "—" },
            { title: "Size", cell: (i) => size(i.size), class: "num" },
            { title: "SHA-256", cell: (i) => (i.sha256 ? h("span", { class: "uuid", title: i.sha256 }, i.sha256.slice(0, 12)) : "—") },
            { title: "Signed", cell: (i) => (i.signed ? "yes" : "no") },
            { title: "Owner", cell: (i) => short(i.owner) },
            { title: "Created", cell: (i) => time(i.created_at) },
          ],
          items,
          "No images.",
        ),
      ),
      more ? h("p", { class: "muted" }, `The ${SHOWN} newest are shown.`) : null,
    ];
  },
};

export const image = {
  route: "/images/:uuid",
  title: (params, data) => (data ? `Image ${data.image.name}` : "Image"),
  async load({ uuid }) {
    const found = await api.get(`v2/images/${encodeURIComponent(uuid)}`, V);
    const [members, running] = await Promise.all([
      found.visibility === "shared"
        ? api.get(`v2/images/${encodeURIComponent(uuid)}/members`, V).then(
            (data) => ({ items: data.members }),
            (error) => {
              if (error.status === 401) throw error;
              return { error: error.message };
            },
          )
        : null,
      runningOn(found.uuid),
    ]);
    return { image: found, members, running };
  },
  render({ image: i, members, running }) {
    return [
      section(
        "Image",
        facts([
          ["UUID", h("code", { class: "wrap" }, i.uuid)],
          ["Name", i.name],
          ["Status", badge(i.status, i.status === "active" ? "ok" : undefined)],
          ["Visibility", i.visibility],
          ["Owner", h("code", {}, i.owner || "—")],
          ["Format", i.format],
          ["Vendor", i.vendor],
          ["Board", i.board],
          ["Function", i.function_id],
          ["Interface", i.interface_id],
          ["Size", size(i.size)],
          ["SHA-256", h("code", { class: "wrap" }, i.sha256 || "— (no data yet)")],
          ["Signature", i.signed ? ["verified, key ", h("code", {}, i.signature_key_id || "—")] : "unsigned"],
          ["Source", i.source],
          ["Created", time(i.created_at)],
          ["Updated", time(i.updated_at)],
        ]),
      ),
      section(
        "Shared with",
        members === null
          ? h("p", { class: "muted" }, `Not shared: the image is ${i.visibility}.`)
          : members.error
            ? h("p", { class: "error-text" }, members.error)
            : table(
                [
                  { title: "Project", cell: (m) => h("code", {}, m.project_id) },
                  { title: "Since", cell: (m) => time(m.created_at) },
                ],
                members.items,
                "No project yet.",
              ),
      ),
      section(
        "Running on",
        running === null
          ? h("p", { class: "muted" }, "Deployables are read by project managers and admins.")
          : table(
              [
                { title: "Deployable", cell: (r) => r.deployable.name },
                { title: "Host", cell: (r) => hostLink(r.hostname) },
                { title: "Device", cell: (r) => (r.device ? deviceLink(r.device.uuid, r.device.type ? `${r.device.type} ${r.device.model}` : null) : "—") },
                { title: "State", cell: (r) => (r.device ? deviceState(r.device.health ? r.device : null) : "—") },
                { title: "Resource provider", cell: (r) => short(r.deployable.rp_uuid) },
              ],
              running,
              "No deployable has it loaded.",
            ),
      ),
    ];
  },
};

export default list;
