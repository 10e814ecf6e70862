"""The xilinx_fpga driver against a recorded-style sysfs tree and recorded xbmgmt output."""

from __future__ import annotations

import os
import re
import subprocess

import jsonschema
import os_traits
import pytest

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.conf import driver_settings, make_conf
from exosuit.drivers import DriverContext, load_driver
from exosuit.drivers.runner import CommandResult, RecordedRunner
from exosuit.drivers.xilinx_fpga import XilinxFpgaDriver, parse_xbmgmt_examine

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
HOST = os.path.join(FIXTURES, "fpga-alveo-host")
XBMGMT_AF = ("/opt/xilinx/xrt/bin/xbmgmt", "examine", "--device", "0000:af:00.0")
CUSTOM_TRAIT = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


def recorded() -> RecordedRunner:
    return RecordedRunner.from_file(os.path.join(HOST, "commands.json"))


def discover(runner=None, root: str = HOST, **settings) -> list[dict]:
    context = DriverContext(hostname="compute-2", sysfs_root=root,
                            runner=runner if runner is not None else recorded(),
                            settings=settings)
    return [device.to_snapshot() for device in XilinxFpgaDriver(context).discover()]


def pci(bus: str, function: str) -> dict:
    return {"domain": "0000", "bus": bus, "device": "00", "function": function}


def card(bus, numa, model, product_id, handles, firmware, vendor_board_info):
    return {
        "type": "FPGA",
        "vendor": "10ee",
        "model": model,
        "driver_name": "xilinx_fpga",
        "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci(bus, "0")},
        "pci_address": f"0000:{bus}:00.0",
        "numa_node": numa,
        "firmware_version": firmware,
        "std_board_info": {"product_id": product_id, "controller": "Processing accelerators"},
        "vendor_board_info": vendor_board_info,
        "deployables": [{
            "name": f"compute-2_0000:{bus}:00.0",
            "num_accelerators": 1,
            "driver_name": "xilinx_fpga",
            "attributes": [
                {"key": "rc", "value": "FPGA"},
                {"key": "trait0", "value": "CUSTOM_FPGA_XILINX"},
                {"key": "trait1", "value": f"CUSTOM_FPGA_PRODUCT_ID_{product_id.upper()}"},
            ],
            "attach_handles": [
                {"attach_type": "PCI", "attach_info": pci(bus, f)} for f in handles
            ],
        }],
    }


U250_PAIRED = card("3b", 0, "Alveo U250", "5004", ["0", "1"],
                   "xilinx_u250_gen3x16_xdma_shell_4_1", {
                       "mgmt_pf": "0000:3b:00.0",
                       "user_pf": "0000:3b:00.1",
                       "shell": "xilinx_u250_gen3x16_xdma_shell_4_1",
                       "shell_source": "sysfs",
                       "fpga_part": "xcu250-figd2104-2L-e",
                       "interface_uuid": "1d2e3f4a5b6c7d8e9fa0b1c2d3e4f5a6",
                   })
U250_WITHOUT_USER_PF = card("af", 1, "Alveo U250", "5004", ["0"],
                            "xilinx_u250_gen3x16_xdma_shell_4_1", {
                                "mgmt_pf": "0000:af:00.0",
                                # the running platform, not the installed base_4
                                "shell": "xilinx_u250_gen3x16_xdma_shell_4_1",
                                "sc_version": "4.6.20",
                                "shell_source": "xbmgmt",
                            })
U280_IN_A_VM = card("d8", 1, "Alveo U280", "500c", ["0", "1"], None, {
    "mgmt_pf": "0000:d8:00.0",
    "user_pf": "0000:d8:00.1",
})


def test_each_card_is_one_device_with_its_pfs_as_attach_handles():
    runner = recorded()
    assert discover(runner) == [U250_PAIRED, U250_WITHOUT_USER_PF, U280_IN_A_VM]
    # Only the card whose xclmgmt shows no feature ROM costs a tool run; the U280's
    # PFs belong to vfio-pci, where xbmgmt has nothing to talk to.
    assert runner.calls == [XBMGMT_AF]


def test_without_xbmgmt_the_shell_is_unknown_and_the_card_still_reported():
    runner = RecordedRunner({})  # no recordings: the tool is absent
    devices = discover(runner)
    assert devices[0] == U250_PAIRED  # sysfs needs no tool
    assert devices[1]["firmware_version"] is None
    assert devices[1]["vendor_board_info"] == {"mgmt_pf": "0000:af:00.0"}
    assert devices[1]["deployables"] == U250_WITHOUT_USER_PF["deployables"]
    assert runner.calls == [XBMGMT_AF]


def test_a_failing_xbmgmt_gives_no_shell():
    runner = RecordedRunner({" ".join(XBMGMT_AF): {"returncode": 1, "stdout": "",
                                                    "stderr": "ERROR: device busy"}})
    assert discover(runner)[1]["firmware_version"] is None


class HangingRunner:
    """A command runner whose tool never answers (SubprocessRunner's timeout)."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def run(self, argv, *, timeout=30.0):
        self.timeouts.append(timeout)
        raise subprocess.TimeoutExpired(list(argv), timeout)


def test_a_hanging_xbmgmt_gives_no_shell_after_the_configured_timeout():
    runner = HangingRunner()
    assert discover(runner, tool_timeout=5)[1]["firmware_version"] is None
    assert runner.timeouts == [5.0]


def test_options_come_from_the_driver_config_group():
    conf = make_conf(**{"xilinx_fpga.xbmgmt_path": "/usr/local/bin/xbmgmt"})
    settings = driver_settings(conf, "xilinx_fpga")
    assert settings == {"xbmgmt_path": "/usr/local/bin/xbmgmt", "tool_timeout": 30}
    runner = RecordedRunner({})
    discover(runner, **settings)
    assert runner.calls == [("/usr/local/bin/xbmgmt", *XBMGMT_AF[1:])]
    runner = RecordedRunner({})
    assert discover(runner, xbmgmt_path="")[1]["firmware_version"] is None
    assert runner.calls == []


def test_other_vendors_fpgas_and_non_accelerator_functions_are_ignored():
    addresses = [h["attach_info"] for d in discover() for h in d["deployables"][0]
                 ["attach_handles"]]
    # Not the Intel D5005 (8086:0b2b, class 1200), not the Xilinx memory controller
    # (10ee:7024, class 0580, no XRT driver), not the NIC nor the root ports.
    assert addresses == [pci("3b", "0"), pci("3b", "1"), pci("af", "0"),
                         pci("d8", "0"), pci("d8", "1")]
    for host in ("fpga-dfl-host", "fpga-opae-host"):
        assert discover(RecordedRunner({}), root=os.path.join(FIXTURES, host)) == []


def test_every_trait_is_a_valid_placement_trait():
    standard = set(os_traits.get_traits())
    traits = [a["value"] for d in discover() for a in d["deployables"][0]["attributes"]
              if a["key"].startswith("trait")]
    assert len(traits) == 6
    for trait in traits:
        assert CUSTOM_TRAIT.match(trait) or trait in standard, trait


def test_xbmgmt_parser_takes_the_running_platform_or_the_device_header():
    header_only = CommandResult(("xbmgmt",), 0, "1/1 [0000:AF:00.0] : xilinx_u250_xdma_201830_2\n")
    assert parse_xbmgmt_examine(header_only, "0000:af:00.0") == {
        "shell": "xilinx_u250_xdma_201830_2", "shell_source": "xbmgmt"}
    other_device = CommandResult(("xbmgmt",), 0, "[0000:3b:00.0] : xilinx_u250_xdma_201830_2\n")
    assert parse_xbmgmt_examine(other_device, "0000:af:00.0") == {}
    installed_only = CommandResult(("xbmgmt",), 0, (
        "Flashable partitions installed in system\n"
        "  Platform             : xilinx_u250_gen3x16_base_4\n"))
    assert parse_xbmgmt_examine(installed_only, "0000:af:00.0") == {}


def test_snapshot_from_the_installed_entry_point_matches_the_schema():
    context = DriverContext(hostname="compute-2", sysfs_root=HOST, runner=recorded())
    snapshot = build_snapshot("compute-2", [load_driver("xilinx_fpga", context)])
    jsonschema.validate(snapshot, schemas.inventory_schema())
    assert snapshot["driver_errors"] == []
    assert snapshot["devices"] == [U250_PAIRED, U250_WITHOUT_USER_PF, U280_IN_A_VM]


@pytest.mark.parametrize("runner", [None, RecordedRunner({})], ids=["recorded", "no-tool"])
def test_discovery_is_repeatable(runner):
    assert discover(runner) == discover(runner)
