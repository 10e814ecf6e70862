"""The xilinx_fpga driver against a recorded-style sysfs tree and recorded xbmgmt output."""

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
from exosuit.conf import driver_settings, make_conf
from exosuit.drivers import (
    DriverContext,
    ImageFile,
    LoadedImage,
    ProgramError,
    Programmable,
    load_driver,
)
from exosuit.drivers.runner import CommandResult, RecordedRunner
from exosuit.drivers.xilinx_fpga import (
    XilinxFpgaDriver,
    parse_xbmgmt_examine,
    parse_xbutil_xclbin_uuid,
)
from tests.drivers.fpga_tools import FlashingRunner, make_xclbin, writable_copy
from tests.drivers.topology import topology

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
HOST = os.path.join(FIXTURES, "fpga-alveo-host")
XBMGMT_AF = ("/opt/xilinx/xrt/bin/xbmgmt", "examine", "--device", "0000:af:00.0")
CUSTOM_TRAIT = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


def recorded() -> RecordedRunner:
    return RecordedRunner.from_file(os.path.join(HOST, "commands.json"))


def discover(runner=None, root: str = HOST, **settings) -> list[dict]:
    context = DriverContext(
        hostname="compute-2",
        sysfs_root=root,
        runner=runner if runner is not None else recorded(),
        settings=settings,
    )
    return [device.to_snapshot() for device in XilinxFpgaDriver(context).discover()]


def pci(bus: str, function: str) -> dict:
    return {"domain": "0000", "bus": bus, "device": "00", "function": function}


XCLBIN = {"key": "program_formats", "value": "xclbin"}
LOADED_XCLBIN = "4e2b2f6c-1a2b-4c3d-8e4f-5a6b7c8d9e0f"


def card(bus, numa, model, product_id, handles, firmware, vendor_board_info, extra=()):
    services = {}
    if "xclbin_uuid" in vendor_board_info:  # the loaded xclbin, with the shell's interface
        interface = vendor_board_info.get("interface_uuid")
        services["services"] = [
            {
                "kind": "fpga_function",
                "name": vendor_board_info["xclbin_uuid"],
                "enabled": True,
                "details": {"interface_id": interface} if interface else {},
            }
        ]
    return {
        **services,
        "type": "FPGA",
        "vendor": "10ee",
        "model": model,
        "driver_name": "xilinx_fpga",
        "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci(bus, "0")},
        "pci_address": f"0000:{bus}:00.0",
        "numa_node": numa,
        **topology("fpga-alveo-host", f"0000:{bus}:00.0"),
        "firmware_version": firmware,
        "std_board_info": {"product_id": product_id, "controller": "Processing accelerators"},
        "vendor_board_info": vendor_board_info,
        "deployables": [
            {
                "name": f"compute-2_0000:{bus}:00.0",
                "num_accelerators": 1,
                "driver_name": "xilinx_fpga",
                "attributes": [
                    {"key": "rc", "value": "FPGA"},
                    {"key": "trait0", "value": "CUSTOM_FPGA_XILINX"},
                    {"key": "trait1", "value": f"CUSTOM_FPGA_PRODUCT_ID_{product_id.upper()}"},
                    *extra,
                ],
                "attach_handles": [
                    {"attach_type": "PCI", "attach_info": pci(bus, f)} for f in handles
                ],
            }
        ],
    }


U250_PAIRED = card(
    "3b",
    0,
    "Alveo U250",
    "5004",
    ["0", "1"],
    "xilinx_u250_gen3x16_xdma_shell_4_1",
    {
        "mgmt_pf": "0000:3b:00.0",
        "user_pf": "0000:3b:00.1",
        "shell": "xilinx_u250_gen3x16_xdma_shell_4_1",
        "shell_source": "sysfs",
        "fpga_part": "xcu250-figd2104-2L-e",
        "interface_uuid": "1d2e3f4a5b6c7d8e9fa0b1c2d3e4f5a6",
        # The user PF's xclbinuuid: what is loaded now.
        "xclbin_uuid": LOADED_XCLBIN,
    },
    [
        {
            "key": "trait2",
            "value": "CUSTOM_FPGA_FUNCTION_ID_XILINX_4E2B2F6C1A2B4C3D8E4F5A6B7C8D9E0F",
        },
        XCLBIN,
    ],
)
U250_WITHOUT_USER_PF = card(
    "af",
    1,
    "Alveo U250",
    "5004",
    ["0"],
    "xilinx_u250_gen3x16_xdma_shell_4_1",
    {
        "mgmt_pf": "0000:af:00.0",
        # the running platform, not the installed base_4
        "shell": "xilinx_u250_gen3x16_xdma_shell_4_1",
        "sc_version": "4.6.20",
        "shell_source": "xbmgmt",
    },
    [XCLBIN],  # xclmgmt holds its management PF: xbmgmt can load it
)
U280_IN_A_VM = card(
    "d8",
    1,
    "Alveo U280",
    "500c",
    ["0", "1"],
    None,
    {
        "mgmt_pf": "0000:d8:00.0",
        "user_pf": "0000:d8:00.1",
    },
)


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
    runner = RecordedRunner(
        {" ".join(XBMGMT_AF): {"returncode": 1, "stdout": "", "stderr": "ERROR: device busy"}}
    )
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
    assert settings == {
        "xbmgmt_path": "/usr/local/bin/xbmgmt",
        "tool_timeout": 30,
        "xbutil_path": "/opt/xilinx/xrt/bin/xbutil",
        "program_timeout": 300,
        "bind_driver": "",
    }
    runner = RecordedRunner({})
    discover(runner, **settings)
    assert runner.calls == [("/usr/local/bin/xbmgmt", *XBMGMT_AF[1:])]
    runner = RecordedRunner({})
    assert discover(runner, xbmgmt_path="")[1]["firmware_version"] is None
    assert runner.calls == []


def test_other_vendors_fpgas_and_non_accelerator_functions_are_ignored():
    addresses = [
        h["attach_info"] for d in discover() for h in d["deployables"][0]["attach_handles"]
    ]
    # Not the Intel D5005 (8086:0b2b, class 1200), not the Xilinx memory controller
    # (10ee:7024, class 0580, no XRT driver), not the NIC nor the root ports.
    assert addresses == [
        pci("3b", "0"),
        pci("3b", "1"),
        pci("af", "0"),
        pci("d8", "0"),
        pci("d8", "1"),
    ]
    for host in ("fpga-dfl-host", "fpga-opae-host"):
        assert discover(RecordedRunner({}), root=os.path.join(FIXTURES, host)) == []


def test_every_trait_is_a_valid_placement_trait():
    standard = set(os_traits.get_traits())
    traits = [
        a["value"]
        for d in discover()
        for a in d["deployables"][0]["attributes"]
        if a["key"].startswith("trait")
    ]
    assert len(traits) == 7
    for trait in traits:
        assert CUSTOM_TRAIT.match(trait) or trait in standard, trait


def test_xbmgmt_parser_takes_the_running_platform_or_the_device_header():
    header_only = CommandResult(("xbmgmt",), 0, "1/1 [0000:AF:00.0] : xilinx_u250_xdma_201830_2\n")
    assert parse_xbmgmt_examine(header_only, "0000:af:00.0") == {
        "shell": "xilinx_u250_xdma_201830_2",
        "shell_source": "xbmgmt",
    }
    other_device = CommandResult(("xbmgmt",), 0, "[0000:3b:00.0] : xilinx_u250_xdma_201830_2\n")
    assert parse_xbmgmt_examine(other_device, "0000:af:00.0") == {}
    installed_only = CommandResult(
        ("xbmgmt",),
        0,
        (
            "Flashable partitions installed in system\n"
            "  Platform             : xilinx_u250_gen3x16_base_4\n"
        ),
    )
    assert parse_xbmgmt_examine(installed_only, "0000:af:00.0") == {}


def test_snapshot_from_the_installed_entry_point_matches_the_schema():
    context = DriverContext(hostname="compute-2", sysfs_root=HOST, runner=recorded())
    snapshot = build_snapshot("compute-2", [load_driver("xilinx_fpga", context)])
    jsonschema.validate(snapshot, schemas.inventory_schema())
    assert snapshot["driver_errors"] == []
    # The snapshot names the plug-in that found each device (the agent adds it).
    assert snapshot["devices"] == [
        {**d, "plugin": "xilinx_fpga"} for d in (U250_PAIRED, U250_WITHOUT_USER_PF, U280_IN_A_VM)
    ]


@pytest.mark.parametrize("runner", [None, RecordedRunner({})], ids=["recorded", "no-tool"])
def test_discovery_is_repeatable(runner):
    assert discover(runner) == discover(runner)


# -- programming -------------------------------------------------------------------------

SHELL_INTERFACE = "1d2e3f4a-5b6c-7d8e-9fa0-b1c2d3e4f5a6"
NEW_XCLBIN = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def flashing(tmp_path):
    root = writable_copy("fpga-alveo-host", tmp_path)
    runner = FlashingRunner(root)
    driver = XilinxFpgaDriver(DriverContext(hostname="compute-2", sysfs_root=root, runner=runner))
    return driver, runner


def at(driver, address):
    device = next(d for d in driver.discover() if d.pci_address == address)
    return device, device.deployables[0]


def xclbin(tmp_path, loaded: str = NEW_XCLBIN) -> ImageFile:
    path = tmp_path / "user.xclbin"
    data = make_xclbin(path, loaded, SHELL_INTERFACE)
    return ImageFile(str(path), "img", hashlib.sha256(data).hexdigest(), "xclbin", loaded)


def test_xbmgmt_loads_the_xclbin_and_xbutil_reads_its_uuid_back(tmp_path):
    driver, runner = flashing(tmp_path)
    device, deployable = at(driver, "0000:3b:00.0")
    assert isinstance(driver, Programmable)
    assert driver.loaded(device, deployable) == LoadedImage(
        LOADED_XCLBIN, "1d2e3f4a5b6c7d8e9fa0b1c2d3e4f5a6"
    )
    image = xclbin(tmp_path)
    driver.program(device, deployable, image)
    assert (
        "/opt/xilinx/xrt/bin/xbmgmt",
        "program",
        "--device",
        "0000:3b:00.0",
        "--user",
        image.path,
    ) in runner.calls
    assert driver.loaded(device, deployable).function_id == NEW_XCLBIN
    assert runner.calls[-1][:2] == ("/opt/xilinx/xrt/bin/xbutil", "examine")
    after, _ = at(driver, "0000:3b:00.0")
    assert after.vendor_board_info["xclbin_uuid"] == NEW_XCLBIN
    assert after.deployables[0].traits[-1] == (
        "CUSTOM_FPGA_FUNCTION_ID_XILINX_9A8B7C6D5E4F4A3B8C2D1E0F9A8B7C6D"
    )


def test_a_failing_xbmgmt_program_is_a_program_error(tmp_path):
    driver, _ = flashing(tmp_path)
    device, deployable = at(driver, "0000:af:00.0")
    with pytest.raises(ProgramError, match="xbmgmt program exited 1: ERROR: Failed to download"):
        driver.program(device, deployable, xclbin(tmp_path))
    # Without a user PF, xbutil has nothing to examine: sysfs says nothing is loaded.
    assert driver.loaded(device, deployable) is None


def test_without_xbutil_the_xclbin_is_read_from_sysfs(tmp_path):
    root = writable_copy("fpga-alveo-host", tmp_path)
    driver = XilinxFpgaDriver(
        DriverContext(hostname="h", sysfs_root=root, runner=RecordedRunner({}))
    )
    device, deployable = at(driver, "0000:3b:00.0")
    assert driver.loaded(device, deployable).function_id == LOADED_XCLBIN
    with pytest.raises(ProgramError, match="is not installed") as caught:
        driver.program(device, deployable, xclbin(tmp_path))
    assert caught.value.untouched is True


def test_cards_given_to_a_vm_are_not_programmable_and_other_formats_refused(tmp_path):
    driver, _ = flashing(tmp_path)
    device, deployable = at(driver, "0000:d8:00.0")
    assert deployable.extra_attributes == ()
    paired, paired_deployable = at(driver, "0000:3b:00.0")
    gbs = ImageFile(str(tmp_path / "x.gbs"), "u", "0" * 64, "gbs")
    with pytest.raises(ProgramError, match="loads xclbin images, not gbs"):
        driver.program(paired, paired_deployable, gbs)


def test_xbutil_parser():
    def result(stdout, code=0):
        return CommandResult(("xbutil",), code, stdout)

    assert parse_xbutil_xclbin_uuid(
        result("  Xclbin UUID : ABCDEF01-2345-6789-ABCD-EF0123456789\n")
    ) == ("abcdef01-2345-6789-abcd-ef0123456789")
    assert (
        parse_xbutil_xclbin_uuid(result("  Xclbin UUID: 00000000-0000-0000-0000-000000000000"))
        is None
    )
    assert parse_xbutil_xclbin_uuid(result("Dynamic Regions\n")) is None
    assert parse_xbutil_xclbin_uuid(result("  Xclbin UUID : 1234", code=1)) is None
