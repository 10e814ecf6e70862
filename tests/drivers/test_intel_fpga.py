"""The intel_fpga driver against recorded-style sysfs trees (tests/fixtures/fpga-*-host)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess

import jsonschema
import os_traits
import pytest

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.drivers import (
    DriverContext,
    ImageFile,
    LoadedImage,
    ProgramError,
    Programmable,
    RecordedRunner,
    load_driver,
)
from exosuit.drivers.intel_fpga import (
    IntelFpgaDriver,
    function_id_trait,
    parse_fpgainfo_fme,
    region_trait,
    trait_suffix,
)
from tests.drivers.fpga_tools import FlashingRunner, make_gbs, writable_copy
from tests.drivers.topology import topology

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
CUSTOM_TRAIT = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
GBS = {"key": "program_formats", "value": "gbs"}


def recorded(host: str) -> RecordedRunner:
    return RecordedRunner.from_file(os.path.join(FIXTURES, host, "commands.json"))


def discover(host: str, hostname: str = "compute-1", runner=None) -> list[dict]:
    driver = IntelFpgaDriver(
        DriverContext(
            hostname=hostname,
            sysfs_root=os.path.join(FIXTURES, host),
            runner=runner if runner is not None else recorded(host),
        )
    )
    return [device.to_snapshot() for device in driver.discover()]


def pci(bus: str, function: str, device: str = "00") -> dict:
    return {"domain": "0000", "bus": bus, "device": device, "function": function}


def function(afu_id: str, region: str, interface_id: str) -> dict:
    """The fpga_function service of a port's loaded AFU."""
    return {
        "kind": "fpga_function",
        "name": afu_id,
        "enabled": True,
        "details": {"region": region, "interface_id": interface_id},
    }


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
    **topology("fpga-dfl-host", "0000:3b:00.0"),
    "firmware_version": "0x40100022c164db1",
    "std_board_info": {"product_id": "0x0b2b"},
    "vendor_board_info": {
        "layout": "dfl",
        "bitstream_id": "0x40100022c164db1",
        "bitstream_metadata": "0x1192023",
        "ports_num": "1",
        "interface_id": "9346116d5a1d4ea9ac1e2c60f1f8a4b1",
        "afu_ids": "d8424dc4a4a3c413f89e433683f9040b",
        # The MAX10 BMC below the FME (DFL: dfl_dev.0/spi_master/spi0/spi0.0).
        "bmc_version": "0x10002000",
        "bmcfw_version": "0x10020103",
    },
    "services": [
        function(
            "d8424dc4a4a3c413f89e433683f9040b", "dfl-port.0", "9346116d5a1d4ea9ac1e2c60f1f8a4b1"
        )
    ],
    "deployables": [
        {
            "name": "compute-1_0000:3b:00.0",
            "num_accelerators": 1,
            "driver_name": "intel_fpga",
            "attributes": attributes(
                "CUSTOM_FPGA_INTEL",
                "CUSTOM_FPGA_INTEL_PAC_D5005",
                "CUSTOM_FPGA_FUNCTION_ID_INTEL_D8424DC4A4A3C413F89E433683F9040B",
                "CUSTOM_FPGA_REGION_INTEL_9346116D5A1D4EA9AC1E2C60F1F8A4B1",
            )
            + [GBS],
            "attach_handles": [{"attach_type": "PCI", "attach_info": pci("3b", "0")}],
        }
    ],
}

N3000 = {
    "type": "FPGA",
    "vendor": "0x8086",
    "model": "Intel PAC N3000",
    "driver_name": "intel_fpga",
    "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci("b1", "0")},
    "pci_address": "0000:b1:00.0",
    "numa_node": 1,
    **topology("fpga-dfl-host", "0000:b1:00.0"),
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
        "bmc_version": "0x2000005",
        "bmcfw_version": "0x200000c",
    },
    # VF0's port (VF1's is not visible: vfio-pci holds it).
    "services": [
        function(
            "e1f6c5ad0fce4c5e9b5a9d0e0a9a37a1", "dfl-port.1", "a6a3e44cd6e5573fa2e38e5a0cbd1cc8"
        )
    ],
    "deployables": [
        {
            "name": "compute-1_0000:b1:00.0",
            "num_accelerators": 2,
            "driver_name": "intel_fpga",
            "attributes": attributes(
                "CUSTOM_FPGA_INTEL",
                "CUSTOM_FPGA_INTEL_PAC_N3000",
                "CUSTOM_FPGA_FUNCTION_ID_INTEL_E1F6C5AD0FCE4C5E9B5A9D0E0A9A37A1",
                # Two PR regions (one per port), one interface id: one trait.
                "CUSTOM_FPGA_REGION_INTEL_A6A3E44CD6E5573FA2E38E5A0CBD1CC8",
            )
            + [GBS],
            "attach_handles": [
                {"attach_type": "PCI", "attach_info": pci("b1", "1")},
                {"attach_type": "PCI", "attach_info": pci("b1", "2")},
            ],
        }
    ],
}


def arria10(bus: str, numa: int, afu_id: str, handle_function: str, bmcfw: str, port: str) -> dict:
    return {
        "type": "FPGA",
        "vendor": "0x8086",
        "model": "Intel PAC Arria 10 GX",
        "driver_name": "intel_fpga",
        "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci(bus, "0")},
        "pci_address": f"0000:{bus}:00.0",
        "numa_node": numa,
        **topology("fpga-opae-host", f"0000:{bus}:00.0"),
        "firmware_version": "0x1000000000000412",
        "std_board_info": {"product_id": "0x09c4"},
        "vendor_board_info": {
            "layout": "intel-fpga",
            "bitstream_id": "0x1000000000000412",
            "bitstream_metadata": "0x1711291",
            "ports_num": "1",
            "interface_id": "ce489693d0794f0ba63ff6a0e5f7d9a5",
            "afu_ids": afu_id,
            # From `fpgainfo fme` (commands.json): the intel-fpga layout has no BMC in sysfs.
            "bmc_version": "D.1.0.5",
            "bmcfw_version": bmcfw,
        },
        "services": [function(afu_id, port, "ce489693d0794f0ba63ff6a0e5f7d9a5")],
        "deployables": [
            {
                "name": f"compute-1_0000:{bus}:00.0",
                "num_accelerators": 1,
                "driver_name": "intel_fpga",
                "attributes": attributes(
                    "CUSTOM_FPGA_INTEL",
                    "CUSTOM_FPGA_INTEL_PAC_ARRIA10",
                    f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{afu_id.upper()}",
                    "CUSTOM_FPGA_REGION_INTEL_CE489693D0794F0BA63FF6A0E5F7D9A5",
                )
                + [GBS],
                "attach_handles": [
                    {"attach_type": "PCI", "attach_info": pci(bus, handle_function)}
                ],
            }
        ],
    }


def test_dfl_host_reports_the_d5005_without_vfs_and_the_n3000_with_its_two_vfs():
    assert discover("fpga-dfl-host") == [D5005, N3000]


def test_intel_fpga_layout_host_reports_both_arria10_cards():
    assert discover("fpga-opae-host") == [
        # No VFs: the PF is the attach handle and its port gives the function.
        arria10("5e", 0, "d8424dc4a4a3c413f89e433683f9040b", "0", "D.1.0.12", "intel-fpga-port.0"),
        # One VF: the VF is the attach handle; the port (and AFU) sit below the VF.
        arria10("d8", 1, "f7df405cbd7acf7222f144b0b93acd18", "1", "D.1.0.14", "intel-fpga-port.1"),
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
        "CUSTOM_FPGA_INTEL", "CUSTOM_FPGA_INTEL_PAC_D5005"
    )
    assert device["deployables"][0]["attach_handles"] == [
        {"attach_type": "PCI", "attach_info": pci("86", "0")}
    ]


@pytest.mark.parametrize("host", ["fpga-dfl-host", "fpga-opae-host", "fpga-alveo-host"])
def test_every_trait_is_a_valid_placement_trait(host):
    standard = set(os_traits.get_traits())
    traits = [
        a["value"]
        for d in discover(host)
        for dep in d["deployables"]
        for a in dep["attributes"]
        if a["key"].startswith("trait")
    ]
    assert traits
    for trait in traits:
        assert len(trait) <= 255
        assert CUSTOM_TRAIT.match(trait) or trait in standard, trait


@pytest.mark.parametrize(
    "value, suffix",
    [
        ("d8424dc4a4a3c413f89e433683f9040b", "D8424DC4A4A3C413F89E433683F9040B"),
        ("d8424dc4-a4a3-c413-f89e-433683f9040b", "D8424DC4A4A3C413F89E433683F9040B"),
        ("{D8424DC4-A4A3-C413-F89E-433683F9040B}", "D8424DC4A4A3C413F89E433683F9040B"),
        ("0xd8424dc4a4a3c413f89e433683f9040b\n", "D8424DC4A4A3C413F89E433683F9040B"),
        ("nlb-mode.3", "NLB_MODE_3"),
        ("--", ""),
    ],
)
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
    context = DriverContext(
        hostname="compute-1",
        sysfs_root=os.path.join(FIXTURES, "fpga-dfl-host"),
        runner=recorded("fpga-dfl-host"),
    )
    driver = load_driver("intel_fpga", context)
    snapshot = build_snapshot("compute-1", [driver])
    jsonschema.validate(snapshot, schemas.inventory_schema())
    assert snapshot["driver_errors"] == []
    # The snapshot names the plug-in that found each device (the agent adds it), and its
    # health unless ok: the N3000's port dfl-port.1 has errors latched (fpga-dfl-host's
    # README).
    health = {"state": "unhealthy", "reason": "FPGA port dfl-port.1 has errors latched (0x11)"}
    assert snapshot["devices"] == [
        {**D5005, "plugin": "intel_fpga"},
        {**N3000, "plugin": "intel_fpga", "health": health},
    ]


def test_discovery_is_repeatable_and_empty_without_fpgas(tmp_path):
    assert discover("fpga-dfl-host") == discover("fpga-dfl-host")
    assert IntelFpgaDriver(DriverContext(hostname="h", sysfs_root=str(tmp_path))).discover() == []


# -- programming -------------------------------------------------------------------------

D5005_INTERFACE = "9346116d-5a1d-4ea9-ac1e-2c60f1f8a4b1"
ARRIA10_INTERFACE = "ce489693-d079-4f0b-a63f-f6a0e5f7d9a5"
NEW_AFU = "7c1a0b2e-4d5f-4e6a-8b9c-0d1e2f3a4b5c"


def programmable(host: str, tmp_path, runner=None):
    """The driver on a writable copy of ``host``, whose fpgaconf changes the copy."""
    root = writable_copy(host, tmp_path)
    runner = runner if runner is not None else FlashingRunner(root)
    driver = IntelFpgaDriver(DriverContext(hostname="compute-1", sysfs_root=root, runner=runner))
    return driver, runner


def card_at(driver: IntelFpgaDriver, address: str):
    device = next(d for d in driver.discover() if d.pci_address == address)
    return device, device.deployables[0]


def gbs(tmp_path, afu: str, interface: str, name: str = "image.gbs") -> ImageFile:
    path = tmp_path / name
    data = make_gbs(path, afu, interface)
    return ImageFile(str(path), "image-uuid", hashlib.sha256(data).hexdigest(), "gbs", afu)


@pytest.mark.parametrize(
    "host, address, interface, port",
    [
        ("fpga-dfl-host", "0000:3b:00.0", D5005_INTERFACE, "dfl-port.0"),
        ("fpga-opae-host", "0000:5e:00.0", ARRIA10_INTERFACE, "intel-fpga-port.0"),
    ],
)
def test_fpgaconf_loads_the_image_and_sysfs_shows_the_new_afu(
    tmp_path, host, address, interface, port
):
    driver, runner = programmable(host, tmp_path)
    device, deployable = card_at(driver, address)
    assert isinstance(driver, Programmable)
    assert driver.loaded(device, deployable).function_id != NEW_AFU.replace("-", "")
    image = gbs(tmp_path, NEW_AFU, interface)
    driver.program(device, deployable, image)
    bus = address.split(":")[1]
    assert (
        "fpgaconf",
        "--segment",
        "0x0000",
        "--bus",
        f"0x{bus}",
        "--device",
        "0x00",
        "--function",
        "0x0",
        image.path,
    ) in runner.calls
    assert driver.loaded(device, deployable) == LoadedImage(
        function_id=NEW_AFU.replace("-", ""), interface_id=interface.replace("-", "")
    )
    after, _ = card_at(driver, address)
    traits = after.deployables[0].traits
    assert "CUSTOM_FPGA_FUNCTION_ID_INTEL_7C1A0B2E4D5F4E6A8B9C0D1E2F3A4B5C" in traits
    assert after.vendor_board_info["afu_ids"] == NEW_AFU.replace("-", "")
    # The copy changed where the port's afu_id lives; the fixture itself did not.
    assert port in {os.path.basename(os.path.dirname(p)) for p in runner.written}


def test_an_image_for_another_pr_interface_is_refused_and_the_card_untouched(tmp_path):
    driver, _ = programmable("fpga-dfl-host", tmp_path)
    device, deployable = card_at(driver, "0000:3b:00.0")
    before = driver.loaded(device, deployable)
    with pytest.raises(ProgramError, match="exited 4 .no compatible FPGA") as caught:
        driver.program(device, deployable, gbs(tmp_path, NEW_AFU, ARRIA10_INTERFACE))
    assert caught.value.untouched is True
    assert driver.loaded(device, deployable) == before


@pytest.mark.parametrize(
    "host, address, status, untouched, message",
    [
        ("fpga-dfl-host", "0000:b1:00.0", 4, True, "No suitable slots found"),
        ("fpga-opae-host", "0000:d8:00.0", 5, False, "Failed to reconfigure"),
    ],
)
def test_a_recorded_fpgaconf_failure_is_a_program_error(
    tmp_path, host, address, status, untouched, message
):
    driver, _ = programmable(host, tmp_path)
    device, deployable = card_at(driver, address)
    with pytest.raises(ProgramError, match=f"fpgaconf exited {status} .*{message}") as caught:
        driver.program(device, deployable, gbs(tmp_path, NEW_AFU, ARRIA10_INTERFACE))
    assert caught.value.untouched is untouched


class HangingRunner:
    """A runner whose tool never ends (SubprocessRunner's timeout)."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def run(self, argv, *, timeout=30.0):
        self.timeouts.append(timeout)
        raise subprocess.TimeoutExpired(list(argv), timeout)


def test_without_fpgaconf_or_for_another_format_nothing_is_run(tmp_path):
    root = os.path.join(FIXTURES, "fpga-dfl-host")
    runner = RecordedRunner({})
    driver = IntelFpgaDriver(DriverContext(hostname="compute-1", sysfs_root=root, runner=runner))
    device, deployable = card_at(driver, "0000:3b:00.0")
    with pytest.raises(ProgramError, match="fpgaconf is not installed") as caught:
        driver.program(device, deployable, gbs(tmp_path, NEW_AFU, D5005_INTERFACE))
    assert caught.value.untouched is True
    xclbin = ImageFile(str(tmp_path / "x"), "u", "0" * 64, "xclbin")
    with pytest.raises(ProgramError, match="loads gbs images, not xclbin"):
        driver.program(device, deployable, xclbin)
    hanging = HangingRunner()
    driver = IntelFpgaDriver(
        DriverContext(
            hostname="compute-1",
            sysfs_root=root,
            runner=hanging,
            settings={"program_timeout": 42, "fpgaconf_path": "/usr/bin/fpgaconf"},
        )
    )
    with pytest.raises(ProgramError, match="/usr/bin/fpgaconf did not finish within 42 s"):
        driver.program(device, deployable, gbs(tmp_path, NEW_AFU, D5005_INTERFACE))
    assert hanging.timeouts[-1] == 42.0


def test_a_card_without_its_fme_cannot_be_programmed_and_reads_back_nothing():
    (device,) = discover("fpga-alveo-host")
    assert GBS not in device["deployables"][0]["attributes"]
    driver = IntelFpgaDriver(
        DriverContext(hostname="compute-1", sysfs_root=os.path.join(FIXTURES, "fpga-alveo-host"))
    )
    found = driver.discover()[0]
    assert driver.loaded(found, found.deployables[0]) is None


def test_bmc_versions_of_the_intel_fpga_layout_come_from_fpgainfo_when_it_is_there():
    without = discover("fpga-opae-host", runner=RecordedRunner({}))
    assert "bmcfw_version" not in without[0]["vendor_board_info"]
    runner = RecordedRunner({})
    IntelFpgaDriver(
        DriverContext(
            hostname="h",
            sysfs_root=os.path.join(FIXTURES, "fpga-opae-host"),
            runner=runner,
            settings={"fpgainfo_path": ""},
        )
    ).discover()
    assert runner.calls == []
    # DFL shows the BMC in sysfs: no tool is run there.
    dfl = recorded("fpga-dfl-host")
    discover("fpga-dfl-host", runner=dfl)
    assert dfl.calls == []


def test_fpgainfo_output_is_read_per_card():
    output = (
        "Board Management Controller, MAX10 NIOS FW version: D.2.0.12\n"
        "Board Management Controller, MAX10 Build version: D.2.0.5\n"
        "//****** FME ******//\n"
        "PCIe s:b:d.f                     : 0000:B1:00.0\n"
        "Bitstream Id                     : 0x23000410010309\n"
        "//****** FME ******//\n"
        "PCIe s:b:d.f                     : 0000:3B:00.0\n"
    )
    assert parse_fpgainfo_fme(output) == {
        "0000:b1:00.0": {"bmcfw_version": "D.2.0.12", "bmc_version": "D.2.0.5"}
    }
    assert parse_fpgainfo_fme("") == {}
