// #/devices/UUID: one device: what the agent reported, an operator's labels, its state
// (health, status, drain, activation, who holds it), its health with its history, its
// partitions, its programming history, its deployables and attach handles with their
// holders (an ARQ and its instance, or a claim and its consumer), and the admin's
// actions: Drain/Undrain, Mark ready/inactive, Clear health, Enable/Disable, Program…
// and Set partition layout…

import * as api from "./api.js";
import {
  h, badge, deviceStateFacts, facts, hostLink, orDash, section, short, table, time,
} from "./dom.js";
import { action } from "./actions.js";
import { claimsOf, deployablesOf, deployablesTable, handleState, handlesTable } from "./host.js";
import { deviceUsage, deviceUsageSection } from "./charts.js";

const HISTORY = 100; // audit records read per history
const KIND_NAMES = { vfs: "functions (vfs)", mdev: "vGPU (mdev)", mig: "MIG" };

// -- reading ---------------------------------------------------------------------------

// ``promise``'s answer, or {refused: the ApiError} when the API refuses or lacks it
// (403: an audit record is for admins; 404: nothing of that kind): the section says so.
async function orRefusal(promise) {
  try {
    return await promise;
  } catch (error) {
    if (error.status === 403 || error.status === 404) return { refused: error };
    throw error;
  }
}

function refusal(answer, what) {
  const error = answer.refused;
  if (error.status === 404) return h("p", { class: "muted" }, `No ${what}.`);
  return h("p", { class: "muted" }, `The API does not show you ${what} (HTTP ${error.status}): ${error.message}`);
}

function audit(objectType, uuid) {
  return api.list("v2/audit_events", "audit_events", { object_type: objectType, object_uuid: uuid, limit: HISTORY });
}

// The deployables that load images: their ``program_formats`` attribute.
function programFormats(deployable) {
  let items = [];
  try {
    items = JSON.parse(deployable.attributes_list || "[]");
  } catch {
    items = [];
  }
  const found = items.map((item) => item.program_formats).find(Boolean);
  return found ? String(found).split(",").map((f) => f.trim()).filter(Boolean) : [];
}

// -- the actions -----------------------------------------------------------------------

function post(device, verb, body) {
  return api.post(`v2/devices/${encodeURIComponent(device.uuid)}/${verb}`, body);
}

function toggle(device) {
  const enabled = device.status === "enabled";
  const verb = enabled ? "disable" : "enable";
  return action(
    enabled ? "Disable" : "Enable",
    async () => {
      await post(device, verb);
      return enabled
        ? `Device ${device.uuid} is disabled (maintaining): it takes no new binds.`
        : `Device ${device.uuid} is enabled.`;
    },
    {
      danger: enabled,
      rule: `cyborg:device:${verb}`,
      confirm: enabled
        ? `Disable device ${device.uuid}? It takes no new binds (what holds it keeps it).`
        : `Enable device ${device.uuid}? It is offered to new workloads again.`,
    },
  );
}

function drain(device) {
  if (device.maintenance) {
    return action(
      "Undrain",
      async () => {
        const answer = await post(device, "undrain");
        return `Device ${device.uuid} is undrained (${answer.status}).`;
      },
      { rule: "exosuit:device:undrain", confirm: `Undrain device ${device.uuid}? It takes new workloads again.` },
    );
  }
  return action(
    "Drain",
    async () => {
      const answer = await post(device, "drain");
      const held = answer.holders.length ? `, ${answer.holders.length} attach handles still held` : "";
      return `Device ${device.uuid} is ${answer.maintenance}${held}.`;
    },
    {
      rule: "exosuit:device:drain",
      danger: true,
      confirm: `Drain device ${device.uuid}? It takes no new workload; what holds it keeps it until released.`,
    },
  );
}

function activation(device) {
  const ready = device.activation === "ready" || device.activation === "activating";
  const state = ready ? "inactive" : "ready";
  return action(
    ready ? "Mark inactive" : "Mark ready",
    async () => {
      const answer = await api.post("v2/device_activations", { state, uuids: [device.uuid] });
      const [outcome] = answer.devices;
      const why = outcome.reason ? `: ${outcome.reason}` : "";
      return `Device ${device.uuid}: ${outcome.outcome}, ${outcome.activation}${why}.`;
    },
    {
      rule: "exosuit:device:activate",
      danger: ready,
      confirm: ready
        ? `Mark device ${device.uuid} inactive? It is fully reserved and never bound until marked ready.`
        : `Mark device ${device.uuid} ready? Its driver's install step runs and it is offered.`,
    },
  );
}

function clearHealth(device) {
  if (!device.health || device.health.offered !== false) return null;
  return action(
    "Clear health",
    async () => {
      const answer = await post(device, "health", { clear: true });
      return `Device ${device.uuid} is offered again (health ${answer.state}).`;
    },
    {
      rule: "exosuit:device:health",
      danger: true,
      confirm:
        `Clear the health of device ${device.uuid}? It is offered again at once ` +
        `(its agent last reported it ${device.health.state}); only a new change to unhealthy holds it back again.`,
    },
  );
}

// A form field of a confirmation dialog.
function field(label, control) {
  control.setAttribute("aria-label", label);
  return h("label", { class: "field" }, h("span", {}, label), control);
}

// Program… a deployable with an image of the catalogue (PATCH …/program, Cyborg's body).
function programAction(deployable, images) {
  const formats = programFormats(deployable);
  if (!formats.length) return null;
  const usable = images.filter((i) => i.status === "active" && formats.includes(i.format));
  let select = null;
  return action(
    "Program…",
    async () => {
      const image = select.value;
      const answer = await api.request("PATCH", `v2/deployables/${encodeURIComponent(deployable.uuid)}/program`, [
        { path: "/program", op: "replace", value: [{ image_uuid: image }] },
      ]);
      const program = answer.program;
      return (
        `Deployable ${deployable.name}: program ${program.uuid} of image ${program.image_uuid} ` +
        `is ${program.state}.`
      );
    },
    {
      rule: "cyborg:deployable:program",
      danger: true,
      confirm: {
        question: `Program ${deployable.name} with an image? What it runs now is replaced.`,
        body: () => {
          select = h(
            "select",
            { name: "image", required: true },
            h("option", { value: "" },
              usable.length ? "choose an image" : `no active image of format ${formats.join(", ")}`),
            usable.map((i) => h("option", { value: i.uuid }, `${i.name} (${i.format}, ${i.uuid})`)),
          );
          return [field("Image", select)];
        },
      },
    },
  );
}

// Set partition layout…: a kind (vfs, mdev, mig), a vGPU type or MIG profile the device
// reports as a service, a count, on demand (PUT /v2/devices/{uuid}/partitions).
function partitionAction(device) {
  const names = { mdev: [], mig: [] };
  for (const service of device.services || []) {
    if (service.kind === "vgpu") names.mdev.push(service.name);
    if (service.kind === "mig") names.mig.push(service.name);
  }
  let form = null;
  return action(
    "Set partition layout…",
    async () => {
      const kind = form.kind.value;
      const count = Number(form.count.value);
      const layout = kind === "vfs" ? { vfs: count } : { [kind]: { [form.name.value]: count } };
      if (kind !== "vfs" && form.on_demand.checked) layout.on_demand = true;
      const answer = await api.request("PUT", `v2/devices/${encodeURIComponent(device.uuid)}/partitions`, layout);
      return `Device ${device.uuid}: partition layout ${JSON.stringify(answer.layout)} is ${answer.state}.`;
    },
    {
      rule: "exosuit:device:partitions:set",
      danger: true,
      confirm: {
        question: `Set the partition layout of device ${device.uuid}? Slices it removes must be free.`,
        body: () => {
          const kinds = ["vfs", ...Object.keys(names).filter((k) => names[k].length)];
          const name = h("select", { name: "name" }, h("option", { value: "" }, "—"));
          const fill = (kind) => name.replaceChildren(
            ...(names[kind] || []).map((n) => h("option", { value: n }, n)),
            ...(names[kind] && names[kind].length ? [] : [h("option", { value: "" }, "—")]),
          );
          const kind = h(
            "select",
            { name: "kind", onchange: (event) => fill(event.target.value) },
            kinds.map((k) => h("option", { value: k }, KIND_NAMES[k])),
          );
          const fields = [
            field("Kind", kind),
            field("vGPU type or MIG profile", name),
            field("Count", h("input", { name: "count", type: "number", min: "0", value: "1", required: true })),
            h("label", { class: "check" },
              h("input", { name: "on_demand", type: "checkbox" }), " On demand (mdev, MIG)"),
          ];
          form = { kind, name, count: fields[2].querySelector("input"), on_demand: fields[3].querySelector("input") };
          return fields;
        },
      },
    },
  );
}

// -- drawing ---------------------------------------------------------------------------

// An operator's labels as "key=value, …" (— for none).
function labelsText(labels) {
  const pairs = Object.entries(labels || {}).map(([key, value]) => `${key}=${value}`);
  return pairs.length ? pairs.join(", ") : "—";
}

function brief(value) {
  if (value === null || value === undefined) return "—";
  return h("code", { class: "wrap" }, JSON.stringify(value));
}

function eventsTable(events, empty) {
  return table(
    [
      { title: "When", cell: (e) => time(e.time) },
      { title: "What", cell: (e) => badge(e.action, kindOfAction(e.action)) },
      { title: "Who", cell: (e) => e.actor },
      { title: "Before", cell: (e) => brief(e.before) },
      { title: "After", cell: (e) => brief(e.after) },
    ],
    events,
    empty,
  );
}

function kindOfAction(name) {
  if (/hold|fail/.test(name)) return "bad";
  if (/clear|recover|end/.test(name)) return "ok";
  return "plain";
}

// The records that speak of health: its hold, clear and recovery, and a report's change.
function healthEvents(events) {
  return events.filter(
    (e) => e.action.startsWith("health.") || /health/.test(JSON.stringify([e.before, e.after])),
  );
}

function healthSection(device, history) {
  const health = device.health || {};
  return section(
    "Health",
    facts([
      ["State", [badge(health.state || "—"), health.reason ? ` ${health.reason}` : ""]],
      ["Since", time(health.since)],
      ["Offered", health.offered === false ? badge("held back", "bad") : badge("offered", "ok")],
      ["Held back by", health.held_by || "—"],
      ["Offered since", time(health.offered_at)],
    ]),
    h("div", { class: "actions" }, clearHealth(device)),
    h("h3", {}, "History"),
    history.refused
      ? refusal(history, "the audit trail")
      : eventsTable(healthEvents(history.items), "No change of health recorded."),
  );
}

function partitionsSection(device, partitions) {
  const actions = h("div", { class: "actions" }, partitionAction(device));
  if (partitions.refused) return section("Partitions", refusal(partitions, "partitions"), actions);
  return section(
    "Partitions",
    facts([
      ["Layout", partitions.layout ? h("code", { class: "wrap" }, JSON.stringify(partitions.layout)) : "none set"],
      ["State", [badge(partitions.state || "—"), partitions.reason ? ` ${partitions.reason}` : ""]],
      ["Generation", orDash(partitions.generation)],
    ]),
    table(
      [
        { title: "Slice", cell: (x) => short(x.attach_handle_uuid) },
        { title: "Attach type", cell: (x) => x.attach_type },
        { title: "Type", cell: (x) => x.type || "—" },
        { title: "State", cell: (x) => handleState(x.in_use, device) },
      ],
      partitions.slices || [],
      "No slices.",
    ),
    actions,
  );
}

// An image's name and uuid (the uuid alone when the caller cannot see it).
function imageText(uuid, images) {
  if (!uuid) return "—";
  const image = images.find((i) => i.uuid === uuid);
  return h("code", { class: "wrap" }, image ? `${image.name} (${uuid})` : uuid);
}

function programmingSection(deployables, programs, histories, images) {
  const rows = deployables.filter((d) => programFormats(d).length || programs[d.uuid]);
  if (!rows.length) return section("Programming", h("p", { class: "muted" }, "Nothing on this device loads images."));
  return section(
    "Programming",
    rows.map((d) => {
      const program = programs[d.uuid];
      const history = histories[d.uuid];
      return h(
        "div",
        { class: "program" },
        h("h3", {}, d.name),
        facts([
          ["Loaded image", imageText(d.bitstream_id, images)],
          ["Formats", programFormats(d).join(", ") || "—"],
          [
            "Latest program",
            program && !program.refused
              ? [
                  badge(program.state), " image ", imageText(program.image_uuid, images),
                  program.reason ? ` ${program.reason}` : "", " · ", time(program.updated_at),
                ]
              : "none",
          ],
        ]),
        h("div", { class: "actions" }, programAction(d, images)),
        history.refused
          ? refusal(history, "the audit trail")
          : eventsTable(history.items.filter((e) => e.action.startsWith("program.")), "No program recorded."),
      );
    }),
  );
}

export default {
  route: "/devices/:uuid",
  title: (params, data) =>
    data ? `${data.device.type} ${data.device.model} on ${data.device.hostname}` : "Device",
  async load({ uuid }) {
    const path = `v2/devices/${encodeURIComponent(uuid)}`;
    const [device, handles, partitions, history] = await Promise.all([
      api.get(path),
      api.listAll("v2/attach_handles", "attach_handles", { device_uuid: uuid, sort_key: "uuid", sort_dir: "asc" }),
      orRefusal(api.get(`${path}/partitions`)),
      orRefusal(audit("device", uuid)),
    ]);
    const [deployables, claims] = await Promise.all([deployablesOf(handles), claimsOf(handles)]);
    const programmable = deployables.filter((d) => programFormats(d).length);
    const [programs, histories, images] = await Promise.all([
      Promise.all(deployables.map((d) => orRefusal(api.get(`v2/deployables/${encodeURIComponent(d.uuid)}/program`)))),
      Promise.all(deployables.map((d) => orRefusal(audit("deployable", d.uuid)))),
      programmable.length ? api.listAll("v2/images", "images", {}).catch(() => []) : [],
    ]);
    const byUuid = (answers) =>
      Object.fromEntries(deployables.map((d, i) => [d.uuid, answers[i]]));
    const programsOf = byUuid(programs.map((p) => (p.refused ? null : p.program || p)));
    return {
      device, handles, claims, partitions, history, deployables, images,
      programs: programsOf, histories: byUuid(histories), usage: await deviceUsage(uuid),
    };
  },
  render({ device, handles, claims, partitions, history, deployables, programs, histories, images, usage }) {
    return [
      section(
        "Device",
        facts([
          ["UUID", h("code", { class: "wrap" }, device.uuid)],
          ["Host", hostLink(device.hostname)],
          ["Type", device.type],
          ["Vendor", device.vendor],
          ["Model", device.model],
          ["PCI address", device.pci_address],
          ["NUMA node", device.numa_node === null ? "—" : String(device.numa_node)],
          ["Driver", device.driver_name],
          ["Firmware", device.firmware_version],
          ...deviceStateFacts(device),
          ["Presence", [badge(device.presence), device.presence_reason ? ` ${device.presence_reason}` : ""]],
          ["Labels", labelsText(device.labels)],
          ["Board", h("code", { class: "wrap" }, device.std_board_info || "—")],
          ["Vendor board", h("code", { class: "wrap" }, device.vendor_board_info || "—")],
          ["Known since", time(device.created_at)],
        ]),
        h("div", { class: "actions" }, drain(device), activation(device), toggle(device)),
      ),
      healthSection(device, history),
      partitionsSection(device, partitions),
      programmingSection(deployables, programs, histories, images),
      section("Deployables", deployablesTable(deployables, handles, { [device.uuid]: device })),
      section("Attach handles", handlesTable(handles, claims, { [device.uuid]: device })),
      deviceUsageSection(usage),
    ];
  },
};
