"""Services, across the shipped drivers and the recorded trees: each driver lists the
services of doc/drivers.md ("Services, install steps and usage") for its devices, in the
documented vocabulary, and says which of the optional protocols it implements.

Each driver's own test holds its exact services; this one holds what they share.
"""

from __future__ import annotations

import os

import jsonschema
import pytest

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.drivers import (
    DriverContext,
    Installable,
    Programmable,
    RecordedRunner,
    UsageReader,
    load_driver,
)
from tests.drivers.fpga_tools import FIXTURES

EVERYTHING = '{"vendor_id": "*"}'

# kind → the driver that reports it and the details every such service carries.
KINDS = {
    "qat": ("intel_qat", {"vfs", "configured"}),
    "vgpu": ("nvidia_gpu", {"description", "available_instances", "instances"}),
    "mig": ("nvidia_gpu", {"instances"}),
    "fpga_function": ("intel_fpga", set()),
    "sriov": ("sriov_nic", {"current", "total"}),
    "nvme_namespace": ("nvme", {"capacity_bytes"}),
}

# What each shipped driver implements besides Driver.
PROTOCOLS = {
    "pci": {"Installable"},
    "nvme": set(),
    "sriov_nic": {"Installable"},
    "nvidia_gpu": {"Installable", "UsageReader"},
    "intel_qat": {"Installable", "UsageReader"},
    "intel_fpga": {"Installable", "UsageReader", "Programmable"},
    "xilinx_fpga": {"Installable", "Programmable"},
    "simulated": {"Installable", "UsageReader", "Programmable"},
}

# Per tree: the kinds its devices list (every shipped driver run on it).
EXPECTED_KINDS = {
    "fpga-alveo-host": {"fpga_function"},
    "fpga-dfl-host": {"fpga_function"},
    "fpga-opae-host": {"fpga_function"},
    "intel-qat-c62x-host": {"qat"},
    "intel-qat-host": {"qat"},
    "nvidia-gpu-host": {"vgpu", "mig"},
    "nvme-host": {"nvme_namespace"},  # its T4 has no mdev_supported_types: no vgpu
    "sriov-nic-host": {"sriov"},
}


def context(root: str, name: str) -> DriverContext:
    return DriverContext(
        hostname="compute-9",
        sysfs_root=root,
        runner=RecordedRunner.from_file(os.path.join(root, "commands.json")),
        settings={"device_spec": [EVERYTHING]} if name == "pci" else {},
    )


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_each_shipped_driver_implements_what_it_says(name):
    driver = load_driver(name, context(os.path.join(FIXTURES, "nvme-host"), name))
    found = {
        protocol.__name__
        for protocol in (Installable, UsageReader, Programmable)
        if isinstance(driver, protocol)
    }
    assert found == PROTOCOLS[name]


@pytest.mark.parametrize("host", sorted(EXPECTED_KINDS))
def test_services_use_the_documented_kinds_and_details_and_fit_the_inventory(host):
    root = os.path.join(FIXTURES, host)
    # The vendor drivers first, pci (selecting every function) last: the first keeps a
    # device two drivers find.
    names = [n for n in sorted(PROTOCOLS) if n not in ("pci", "simulated")] + ["pci"]
    drivers = [load_driver(n, context(root, n)) for n in names]
    snapshot = build_snapshot("compute-9", drivers)
    jsonschema.validate(snapshot, schemas.inventory_schema())
    kinds = set()
    for device in snapshot["devices"]:
        for service in device.get("services", []):
            kind = service["kind"]
            assert kind in KINDS, service
            driver, details = KINDS[kind]
            if kind != "fpga_function":  # intel_fpga and xilinx_fpga both report it
                assert device["driver_name"] == driver
            assert details <= set(service["details"]), service
            assert all(isinstance(v, str) for v in service["details"].values())
            assert isinstance(service["enabled"], bool)
            kinds.add(kind)
        names = [(s["kind"], s["name"]) for s in device.get("services", [])]
        assert len(names) == len(set(names)), f"{device['pci_address']} lists a service twice"
    assert kinds == EXPECTED_KINDS[host]


def test_a_device_without_services_reports_what_it_always_did():
    # The pci driver lists none: its snapshot has no services key, as before issue 11.
    root = os.path.join(FIXTURES, "nvme-host")
    (device, *_) = load_driver("pci", context(root, "pci")).discover()
    assert device.services == ()
    assert "services" not in device.to_snapshot()
