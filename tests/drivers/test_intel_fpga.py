"""The intel_fpga driver against recorded-style sysfs trees (tests/fixtures/fpga-*-host)."""

from __future__ import annotations

import os
import re

import jsonschema
import os_traits
import pytest

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.drivers import DriverContext, load_driver
from exosuit.drivers.intel_fpga import (
    IntelFpgaDriver,
    function_id_trait,
    region_trait,
    trait_suffix,
)

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
CUSTOM_TRAIT = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


def discover(host: str, hostname: str = "compute-1") -> list[dict]:
    driver = IntelFpgaDriver(DriverContext(hostname=hostname,
                                           sysfs_root=os.path.join(FIXTURES, host)))
    return [device.to_snapshot() for device in driver.discover()]


def pci(bus: str, function: str, device: str = "00") -> dict:
    return {"domain": "0000", "bus": bus, "device": device, "function": function}


def attributes(*traits: str) -> list[dict]:
    return [{"key": "rc", "value": "FPGA"}] + [
        {"key": f"trait{i}", "value": t} for i, t in enumerate(traits)
    ]


D5005 = {
    "type": "FPGA",
    "vendor": "0x8086",
    "model": "Intel PAC D5005",
    "driver_name": "intel_fpga",
    "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci("3b", "0")},
    "pci_address": "0000:3b:00.0",
    "numa_node": 0,
    "firmware_version": "0x40100022c164db1",
    "std_board_info": {"product_id": "0x0b2b"},
    "vendor_board_info": {
        "layout": "dfl",
        "bitstream_id": "0x40100022c164db1",
        "bitstream_metadata": "0x1192023",
        "ports_num": "1",
        "interface_id": "9346116d5a1d4ea9ac1e2c60f1f8a4b1",
        "afu_ids": "d8424dc4a4a3c413f89e433683f9040b",
    },
    "deployables": [{
        "name": "compute-1_0000:3b:00.0",
        "num_accelerators": 1,
        "driver_name": "intel_fpga",
        "attributes": attributes(
            "CUSTOM_FPGA_INTEL",
            "CUSTOM_FPGA_INTEL_PAC_D5005",
            "CUSTOM_FPGA_FUNCTION_ID_INTEL_D8424DC4A4A3C413F89E433683F9040B",
            "CUSTOM_FPGA_REGION_INTEL_9346116D5A1D4EA9AC1E2C60F1F8A4B1",
        ),
        "attach_handles": [{"attach_type": "PCI", "attach_info": pci("3b", "0")}],
    }],
}

N3000 = {
    "type": "FPGA",
    "vendor": "0x8086",
    "model": "Intel PAC N3000",
    "driver_name": "intel_fpga",
    "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci("b1", "0")},
    "pci_address": "0000:b1:00.0",
    "numa_node": 1,
    "firmware_version": "0x23000410010309",
    "std_board_info": {"product_id": "0x0b30"},
    "vendor_board_info": {
        "layout": "dfl",
        "bitstream_id": "0x23000410010309",
        "bitstream_metadata": "0x2019082205",
        "ports_num": "2",
        "interface_id": "a6a3e44cd6e5573fa2e38e5a0cbd1cc8",
        # Only VF0's port is visible: VF1 is bound to vfio-pci.
        "afu_ids": "e1f6c5ad0fce4c5e9b5a9d0e0a9a37a1",
    },
    "deployables": [{
        "name": "compute-1_0000:b1:00.0",
        "num_accelerators": 2,
        "driver_name": "intel_fpga",
        "attributes": attributes(
            "CUSTOM_FPGA_INTEL",
            "CUSTOM_FPGA_INTEL_PAC_N3000",
            "CUSTOM_FPGA_FUNCTION_ID_INTEL_E1F6C5AD0FCE4C5E9B5A9D0E0A9A37A1",
            # Two PR regions (one per port), one interface id: one trait.
            "CUSTOM_FPGA_REGION_INTEL_A6A3E44CD6E5573FA2E38E5A0CBD1CC8",
        ),
        "attach_handles": [
            {"attach_type": "PCI", "attach_info": pci("b1", "1")},
            {"attach_type": "PCI", "attach_info": pci("b1", "2")},
        ],
    }],
}


def arria10(bus: str, numa: int, afu_id: str, handle_function: str) -> dict:
    return {
        "type": "FPGA",
        "vendor": "0x8086",
        "model": "Intel PAC Arria 10 GX",
        "driver_name": "intel_fpga",
        "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci(bus, "0")},
        "pci_address": f"0000:{bus}:00.0",
        "numa_node": numa,
        "firmware_version": "0x1000000000000412",
        "std_board_info": {"product_id": "0x09c4"},
        "vendor_board_info": {
            "layout": "intel-fpga",
            "bitstream_id": "0x1000000000000412",
            "bitstream_metadata": "0x1711291",
            "ports_num": "1",
            "interface_id": "ce489693d0794f0ba63ff6a0e5f7d9a5",
            "afu_ids": afu_id,
        },
        "deployables": [{
            "name": f"compute-1_0000:{bus}:00.0",
            "num_accelerators": 1,
            "driver_name": "intel_fpga",
            "attributes": attributes(
                "CUSTOM_FPGA_INTEL",
                "CUSTOM_FPGA_INTEL_PAC_ARRIA10",
                f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{afu_id.upper()}",
                "CUSTOM_FPGA_REGION_INTEL_CE489693D0794F0BA63FF6A0E5F7D9A5",
            ),
            "attach_handles": [{"attach_type": "PCI", "attach_info": pci(bus, handle_function)}],
        }],
    }


def test_dfl_host_reports_the_d5005_without_vfs_and_the_n3000_with_its_two_vfs():
    assert discover("fpga-dfl-host") == [D5005, N3000]


def test_intel_fpga_layout_host_reports_both_arria10_cards():
    assert discover("fpga-opae-host") == [
        # No VFs: the PF is the attach handle and its port gives the function.
        arria10("5e", 0, "d8424dc4a4a3c413f89e433683f9040b", "0"),
        # One VF: the VF is the attach handle; the port (and AFU) sit below the VF.
        arria10("d8", 1, "f7df405cbd7acf7222f144b0b93acd18", "1"),
    ]


def test_other_vendors_bridges_nics_and_vfs_are_not_devices():
    addresses = [d["pci_address"] for d in discover("fpga-dfl-host")]
    # Not the Silicom N5010 (1c2c:1000) although dfl-pci gave it a DFL region, not the
    # N3000's XL710 functions (8086:0d58) nor the Intel root ports, not the VFs.
    assert addresses == ["0000:3b:00.0", "0000:b1:00.0"]
    assert discover("fpga-opae-host")[0]["pci_address"] == "0000:5e:00.0"
    assert "0000:18:00.0" not in [d["pci_address"] for d in discover("fpga-opae-host")]


def test_a_known_board_without_an_fpga_driver_is_reported_without_fpga_details():
    # On the Alveo host a D5005 is bound to vfio-pci: no DFL region, no firmware.
    (device,) = discover("fpga-alveo-host")
    assert device["pci_address"] == "0000:86:00.0"
    assert device["firmware_version"] is None
    assert device["vendor_board_info"] == {}
    assert device["deployables"][0]["attributes"] == attributes(
        "CUSTOM_FPGA_INTEL", "CUSTOM_FPGA_INTEL_PAC_D5005")
    assert device["deployables"][0]["attach_handles"] == [
        {"attach_type": "PCI", "attach_info": pci("86", "0")}]


@pytest.mark.parametrize("host", ["fpga-dfl-host", "fpga-opae-host", "fpga-alveo-host"])
def test_every_trait_is_a_valid_placement_trait(host):
    standard = set(os_traits.get_traits())
    traits = [a["value"] for d in discover(host) for dep in d["deployables"]
              for a in dep["attributes"] if a["key"].startswith("trait")]
    assert traits
    for trait in traits:
        assert len(trait) <= 255
        assert CUSTOM_TRAIT.match(trait) or trait in standard, trait


@pytest.mark.parametrize("value, suffix", [
    ("d8424dc4a4a3c413f89e433683f9040b", "D8424DC4A4A3C413F89E433683F9040B"),
    ("d8424dc4-a4a3-c413-f89e-433683f9040b", "D8424DC4A4A3C413F89E433683F9040B"),
    ("{D8424DC4-A4A3-C413-F89E-433683F9040B}", "D8424DC4A4A3C413F89E433683F9040B"),
    ("0xd8424dc4a4a3c413f89e433683f9040b\n", "D8424DC4A4A3C413F89E433683F9040B"),
    ("nlb-mode.3", "NLB_MODE_3"),
    ("--", ""),
])
def test_ids_are_normalised_to_trait_suffixes(value, suffix):
    assert trait_suffix(value) == suffix


def test_function_and_region_traits_never_take_cyborgs_malformed_form():
    # Cyborg's bind code makes CUSTOM_FPGA_FUNCTION_ID_INTEL_D8424DC4_-A4A3_-… from a
    # dashed id; the same AFU must give the same valid trait in both spellings.
    dashed = function_id_trait("d8424dc4-a4a3-c413-f89e-433683f9040b")
    assert dashed == function_id_trait("D8424DC4A4A3C413F89E433683F9040B")
    assert dashed == "CUSTOM_FPGA_FUNCTION_ID_INTEL_D8424DC4A4A3C413F89E433683F9040B"
    assert region_trait("  ") is None
    assert len(function_id_trait("x" * 400)) == 255
    assert CUSTOM_TRAIT.match(function_id_trait("x" * 400))


def test_snapshot_from_the_installed_entry_point_matches_the_schema():
    context = DriverContext(hostname="compute-1",
                            sysfs_root=os.path.join(FIXTURES, "fpga-dfl-host"))
    driver = load_driver("intel_fpga", context)
    snapshot = build_snapshot("compute-1", [driver])
    jsonschema.validate(snapshot, schemas.inventory_schema())
    assert snapshot["driver_errors"] == []
    assert snapshot["devices"] == [D5005, N3000]


def test_discovery_is_repeatable_and_empty_without_fpgas(tmp_path):
    assert discover("fpga-dfl-host") == discover("fpga-dfl-host")
    assert IntelFpgaDriver(DriverContext(hostname="h", sysfs_root=str(tmp_path))).discover() == []
