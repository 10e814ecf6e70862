"""The intel_qat driver against hand-written sysfs trees (their READMEs say what they hold).

tests/fixtures/intel-qat-host: a Sapphire Rapids host with the in-tree qat_4xxx driver,
PF 0000:6b:00.0 (up, "sym;dc", 4 VFs on vfio-pci), PF 0000:70:00.0 (down, "asym;dc",
SR-IOV off), and a DSA engine and an E810 NIC that are not QAT.

tests/fixtures/intel-qat-c62x-host: a Cascade Lake host with Intel's out-of-tree driver,
C62x PF 0000:3d:00.0 with 2 VFs and PF 0000:3f:00.0 without, no qat/ attributes, and
the firmware version in debugfs.
"""

from __future__ import annotations

import os
import re
import shutil

import jsonschema
import os_traits
import pytest

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.drivers import DriverContext, load_driver
from exosuit.drivers.intel_qat import QAT_GENERATIONS, IntelQatDriver, service_traits
from tests.drivers.topology import topology

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
HOST = os.path.join(FIXTURES, "intel-qat-host")
C62X_HOST = os.path.join(FIXTURES, "intel-qat-c62x-host")


def discover(root: str = HOST, hostname: str = "qat-1") -> dict[str, dict]:
    context = DriverContext(hostname=hostname, sysfs_root=root)
    return {d.pci_address: d.to_snapshot() for d in IntelQatDriver(context).discover()}


def pci(bus: str, device: str, function: str) -> dict:
    return {"domain": "0000", "bus": bus, "device": device, "function": function}


def deployable(host: str, bus: str, device: str, function: str, *traits: str) -> dict:
    return {
        "name": f"{host}_0000:{bus}:{device}.{function}",
        "num_accelerators": 1,
        "driver_name": "intel_qat",
        "attributes": (
            [{"key": "rc", "value": "CUSTOM_QAT"}]
            + [{"key": f"trait{i}", "value": t} for i, t in enumerate(traits)]
        ),
        "attach_handles": [{"attach_type": "PCI", "attach_info": pci(bus, device, function)}],
    }


def services(vfs: int, configured: str | None, up: bool = True) -> list[dict]:
    """The qat services of a PF: sym, asym, dc (then any other configured word), enabled
    when configured and up; ``configured`` None: a PF without qat/ (unknown)."""
    words = (configured or "").split(";") if configured is not None else None
    names = ["sym", "asym", "dc"] + [w for w in words or [] if w not in ("sym", "asym", "dc")]
    found = []
    for name in names:
        if words is None:
            enabled, said = up, "unknown"
        else:
            enabled, said = name in words and up, str(name in words).lower()
        details = {"vfs": str(vfs if enabled else 0), "configured": said}
        found.append({"kind": "qat", "name": name, "enabled": enabled, "details": details})
    return found


def qat(bus, model, product_id, firmware, board, deployables, services, host=HOST) -> dict:
    return {
        "type": "QAT",
        "vendor": "0x8086",
        "model": model,
        "driver_name": "intel_qat",
        "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci(bus, "00", "0")},
        "pci_address": f"0000:{bus}:00.0",
        "numa_node": 0,
        **topology(os.path.basename(host), f"0000:{bus}:00.0"),
        "firmware_version": firmware,
        "std_board_info": {"product_id": product_id},
        "vendor_board_info": board,
        "deployables": deployables,
        "services": services,
    }


SYM_DC = ("OWNER_CYBORG", "CUSTOM_QAT_DC", "CUSTOM_QAT_SYM")


def test_4xxx_host_gives_one_deployable_per_vf_and_the_pf_without_vfs_whole():
    assert discover() == {
        "0000:6b:00.0": qat(
            "6b",
            "Intel QAT 4xxx",
            "0x4940",
            None,
            {
                "kernel_driver": "4xxx",
                "state": "up",
                "cfg_services": "sym;dc",
                "sriov_totalvfs": "16",
                "sriov_numvfs": "4",
                "vf_kernel_drivers": "vfio-pci",
            },
            [deployable("qat-1", "6b", "00", str(fn), *SYM_DC) for fn in range(1, 5)],
            services(4, "sym;dc"),
        ),
        "0000:70:00.0": qat(
            "70",
            "Intel QAT 4xxx",
            "0x4940",
            None,
            {
                "kernel_driver": "4xxx",
                "state": "down",
                "cfg_services": "asym;dc",
                "sriov_totalvfs": "16",
                "sriov_numvfs": "0",
            },
            [
                deployable(
                    "qat-1", "70", "00", "0", "OWNER_CYBORG", "CUSTOM_QAT_ASYM", "CUSTOM_QAT_DC"
                )
            ],
            services(0, "asym;dc", up=False),
        ),
    }


def test_c62x_host_without_cfg_services_has_no_service_traits_and_has_firmware():
    assert discover(C62X_HOST, "qat-2") == {
        "0000:3d:00.0": qat(
            "3d",
            "Intel QAT c6xx",
            "0x37c8",
            "4.14.0",
            {
                "kernel_driver": "c6xx",
                "sriov_totalvfs": "16",
                "sriov_numvfs": "2",
                "vf_kernel_drivers": "c6xxvf,vfio-pci",
            },
            [
                deployable("qat-2", "3d", "01", "0", "OWNER_CYBORG"),
                deployable("qat-2", "3d", "01", "1", "OWNER_CYBORG"),
            ],
            services(2, None),
            host=C62X_HOST,
        ),
        "0000:3f:00.0": qat(
            "3f",
            "Intel QAT c6xx",
            "0x37c8",
            "4.14.0",
            {"kernel_driver": "c6xx", "sriov_totalvfs": "16", "sriov_numvfs": "0"},
            [deployable("qat-2", "3f", "00", "0", "OWNER_CYBORG")],
            services(0, None),
            host=C62X_HOST,
        ),
    }


def test_vfs_are_never_devices_and_a_pf_with_vfs_is_not_offered_itself():
    found = discover()
    handles = [
        h["attach_info"]
        for h in (h for d in found["0000:6b:00.0"]["deployables"] for h in d["attach_handles"])
    ]
    assert pci("6b", "00", "0") not in handles
    for fn in range(1, 5):
        vf = f"0000:6b:00.{fn}"
        assert os.path.islink(os.path.join(HOST, "sys/bus/pci/devices", vf, "physfn"))
        assert vf not in found
    # The DSA engine and the NIC are Intel's too, but not QAT.
    assert set(found) == {"0000:6b:00.0", "0000:70:00.0"}


def test_services_follow_cfg_services(tmp_path):
    root = str(tmp_path / "host")
    shutil.copytree(HOST, root, symlinks=True)
    with open(os.path.join(root, "sys/bus/pci/devices/0000:6b:00.0/qat/cfg_services"), "w") as f:
        f.write("asym\n")
    found = discover(root)
    for d in found["0000:6b:00.0"]["deployables"]:
        assert [a["value"] for a in d["attributes"]] == [
            "CUSTOM_QAT",
            "OWNER_CYBORG",
            "CUSTOM_QAT_ASYM",
        ]
    assert found["0000:6b:00.0"]["vendor_board_info"]["cfg_services"] == "asym"


def test_disabling_sriov_turns_the_vfs_back_into_the_pf(tmp_path):
    root = str(tmp_path / "host")
    shutil.copytree(HOST, root, symlinks=True)
    pf = os.path.join(root, "sys/bus/pci/devices/0000:6b:00.0")
    for fn in range(1, 5):  # what `echo 0 > sriov_numvfs` leaves
        os.remove(os.path.join(pf, f"virtfn{fn - 1}"))
        os.remove(os.path.join(root, f"sys/bus/pci/devices/0000:6b:00.{fn}"))
    with open(os.path.join(pf, "sriov_numvfs"), "w") as f:
        f.write("0\n")
    assert discover(root)["0000:6b:00.0"]["deployables"] == [
        deployable("qat-1", "6b", "00", "0", *SYM_DC)
    ]


@pytest.mark.parametrize(
    "cfg_services, traits",
    [
        ("sym;asym", ("CUSTOM_QAT_ASYM", "CUSTOM_QAT_SYM")),
        ("dc", ("CUSTOM_QAT_DC",)),
        ("dcc", ("CUSTOM_QAT_DCC",)),
        ("sym;asym;decomp", ("CUSTOM_QAT_ASYM", "CUSTOM_QAT_DECOMP", "CUSTOM_QAT_SYM")),
        ("cy;dc", ("CUSTOM_QAT_ASYM", "CUSTOM_QAT_DC", "CUSTOM_QAT_SYM")),
        ("", ()),
        (None, ()),
    ],
)
def test_service_traits(cfg_services, traits):
    assert service_traits(cfg_services) == traits


def test_generations_pair_each_pf_with_its_vf_id():
    ids = [(g.name, g.pf_id, g.vf_id) for g in QAT_GENERATIONS]
    assert ids == [
        ("dh895xcc", "0435", "0443"),
        ("c6xx", "37c8", "37c9"),
        ("c3xxx", "19e2", "19e3"),
        ("4xxx", "4940", "4941"),
        ("401xx", "4942", "4943"),
        ("402xx", "4944", "4945"),
        ("420xx", "4946", "4947"),
        ("6xxx", "4948", "4949"),
    ]


def test_a_host_without_qat_gives_nothing():
    assert discover(os.path.join(FIXTURES, "nvidia-gpu-host")) == {}


def test_snapshot_from_the_entry_point_matches_the_schema_with_valid_traits():
    loaded = load_driver("intel_qat", DriverContext(hostname="qat-1", sysfs_root=HOST))
    assert isinstance(loaded, IntelQatDriver)
    snapshot = build_snapshot("qat-1", [loaded])
    jsonschema.validate(snapshot, schemas.inventory_schema())
    assert snapshot["driver_errors"] == []
    assert len(snapshot["devices"]) == 2
    standard = set(os_traits.get_traits())
    for device in snapshot["devices"]:
        for d in device["deployables"]:
            for attribute in d["attributes"][1:]:
                assert attribute["value"] in standard or re.fullmatch(
                    r"CUSTOM_[A-Z0-9_]+", attribute["value"]
                )


def test_discovery_is_repeatable():
    driver = IntelQatDriver(DriverContext(hostname="qat-1", sysfs_root=HOST))
    assert driver.discover() == driver.discover()
