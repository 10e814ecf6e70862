// #/devices/UUID: one device: what the agent reported, an operator's labels (2.10), its
// deployables and attach handles, and the admin's Enable/Disable.

import * as api from "./api.js";
import { h, badge, facts, hostLink, section, time } from "./dom.js";
import { action } from "./actions.js";
import { deployablesOf, deployablesTable, handlesTable } from "./host.js";

function toggle(device) {
  const enabled = device.status === "enabled";
  const verb = enabled ? "disable" : "enable";
  return action(
    enabled ? "Disable" : "Enable",
    async () => {
      await api.post(`v2/devices/${encodeURIComponent(device.uuid)}/${verb}`);
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

// An operator's labels as "key=value, …" (— for none).
function labelsText(labels) {
  const pairs = Object.entries(labels || {}).map(([key, value]) => `${key}=${value}`);
  return pairs.length ? pairs.join(", ") : "—";
}

export default {
  route: "/devices/:uuid",
  title: (params, data) =>
    data ? `${data.device.type} ${data.device.model} on ${data.device.hostname}` : "Device",
  async load({ uuid }) {
    const [device, handles] = await Promise.all([
      api.get(`v2/devices/${encodeURIComponent(uuid)}`, "2.10"),
      api.listAll("v2/attach_handles", "attach_handles", { device_uuid: uuid, sort_key: "uuid", sort_dir: "asc" }),
    ]);
    return { device, handles, deployables: await deployablesOf(handles) };
  },
  render({ device, handles, deployables }) {
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
          ["Status", badge(device.status)],
          ["Presence", [badge(device.presence), device.presence_reason ? ` ${device.presence_reason}` : ""]],
          ["Labels", labelsText(device.labels)],
          ["Board", h("code", { class: "wrap" }, device.std_board_info || "—")],
          ["Vendor board", h("code", { class: "wrap" }, device.vendor_board_info || "—")],
          ["Known since", time(device.created_at)],
        ]),
        h("div", { class: "actions" }, toggle(device)),
      ),
      section("Deployables", deployablesTable(deployables, handles)),
      section("Attach handles", handlesTable(handles)),
    ];
  },
};
