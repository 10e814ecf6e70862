"""Topology (doc/devices.md, "Topology"): a device's pcie_root and iommu_group as its agent
reported them, shown by GET /v2/devices from 2.10, and numa_node, pcie_root, iommu_group
as agent attributes of each of its deployables, only where known. Through the API, on
three databases."""

from __future__ import annotations

import dataclasses
import json

from tests.helpers.devices import FIRST, HOST, SECOND, device, report

V2_10 = "2.10"
TOPOLOGY = {"numa_node": 1, "pcie_root": "0000:0b:00.0", "iommu_group": 12}


def placed(address: str = FIRST, **fields):
    return dataclasses.replace(device(address), **{**TOPOLOGY, **fields})


def shown(api, address: str, version: str = V2_10) -> dict:
    r = api.get("/v2/devices", version=version)
    assert r.status_code == 200, r.text
    (found,) = [d for d in r.json["devices"] if d["pci_address"] == address]
    one = api.get(f"/v2/devices/{found['uuid']}", version=version)
    assert one.status_code == 200, one.text
    assert one.json == found
    return found


def attributes(api, address: str) -> dict[str, str]:
    """The agent's attributes of the device's one deployable, as Cyborg's API lists them
    (``attributes_list``: a string holding a JSON list of one-key objects)."""
    r = api.get("/v2/deployables")
    assert r.status_code == 200, r.text
    (deployable,) = [d for d in r.json["deployables"] if d["name"] == f"fake_{address}"]
    listed = json.loads(deployable["attributes_list"])
    return {key: value for item in listed for key, value in item.items()}


def test_the_device_shows_its_root_port_and_group_from_2_10(api):
    report(api, HOST, [placed(), dataclasses.replace(device(SECOND), numa_node=None)])
    found = shown(api, FIRST)
    assert (found["numa_node"], found["pcie_root"], found["iommu_group"]) == (1, "0000:0b:00.0", 12)
    # Unknown: null, never left out.
    other = shown(api, SECOND)
    assert (other["numa_node"], other["pcie_root"], other["iommu_group"]) == (None, None, None)
    older = shown(api, FIRST, version="2.9")
    assert "pcie_root" not in older and "iommu_group" not in older
    assert older["numa_node"] == 1


def test_each_deployable_carries_the_known_topology_as_attributes(api):
    report(api, HOST, [placed(), placed(SECOND, numa_node=None, iommu_group=None)])
    assert attributes(api, FIRST) == {
        "rc": "FPGA",
        "trait0": "CUSTOM_FAKE_DEVICE",
        "numa_node": "1",
        "pcie_root": "0000:0b:00.0",
        "iommu_group": "12",
    }
    # Only what is known.
    assert attributes(api, SECOND) == {
        "rc": "FPGA",
        "trait0": "CUSTOM_FAKE_DEVICE",
        "pcie_root": "0000:0b:00.0",
    }


def test_a_changed_report_changes_the_attributes_and_the_device(api):
    report(api, HOST, [placed()])
    report(api, HOST, [placed(pcie_root="0000:3a:00.0", iommu_group=None)])
    assert attributes(api, FIRST) == {
        "rc": "FPGA",
        "trait0": "CUSTOM_FAKE_DEVICE",
        "numa_node": "1",
        "pcie_root": "0000:3a:00.0",
    }
    found = shown(api, FIRST)
    assert (found["pcie_root"], found["iommu_group"]) == ("0000:3a:00.0", None)


def test_the_attributes_api_lists_them_by_key(api):
    report(api, HOST, [placed(), placed(SECOND, pcie_root="0000:3a:00.0")])
    r = api.get("/v2/attributes?key=pcie_root")
    assert r.status_code == 200, r.text
    assert sorted(a["value"] for a in r.json["attributes"]) == ["0000:0b:00.0", "0000:3a:00.0"]
