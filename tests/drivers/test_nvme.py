"""The nvme driver on a recorded-style host: a boot drive, free drives, a drive in a
volume group, a multipath drive used as swap, a drive bound to vfio-pci."""

from __future__ import annotations

import os
import shutil

import jsonschema
import pytest

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.conf import driver_settings, make_conf
from exosuit.drivers import DriverContext, RecordedRunner, load_driver
from exosuit.drivers.nvme import HostBlockUsage, NvmeDriver, nvme_controllers
from exosuit.drivers.sysfs import Sysfs
from tests.conftest import require
from tests.drivers.topology import topology

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
HOST = os.path.join(FIXTURES, "nvme-host")


def discover(root: str = HOST, **settings) -> list[dict]:
    context = DriverContext(hostname="compute-3", sysfs_root=root, settings=settings)
    return [device.to_snapshot() for device in NvmeDriver(context).discover()]


def cpid(bus: str) -> dict:
    return {"domain": "0000", "bus": bus, "device": "00", "function": "0"}


def drive(
    bus,
    numa,
    vendor,
    product_id,
    model,
    firmware,
    serial,
    subsystem,
    revision,
    vendor_trait,
    namespace=None,
):
    """``namespace``: (its block device, its size in 512-byte sectors), its one service."""
    body = {}
    if namespace:
        name, sectors = namespace
        details = {"capacity_bytes": str(sectors * 512)}
        body["services"] = [
            {"kind": "nvme_namespace", "name": name, "enabled": True, "details": details}
        ]
    return {
        **body,
        "type": "SSD",
        "vendor": vendor,
        "model": model,
        "driver_name": "nvme",
        "controlpath_id": {"cpid_type": "PCI", "cpid_info": cpid(bus)},
        "pci_address": f"0000:{bus}:00.0",
        "numa_node": numa,
        **topology("nvme-host", f"0000:{bus}:00.0"),
        "firmware_version": firmware,
        "std_board_info": {
            "vendor_id": vendor,
            "product_id": product_id,
            "class": "010802",
            "controller": "Non-Volatile memory controller",
            "subsystem_vendor_id": subsystem[0],
            "subsystem_device_id": subsystem[1],
            "revision": revision,
        },
        "vendor_board_info": {"serial": serial} if serial else {},
        "deployables": [
            {
                "name": f"compute-3_0000:{bus}:00.0",
                "num_accelerators": 1,
                "driver_name": "nvme",
                "attributes": [
                    {"key": "rc", "value": "CUSTOM_SSD"},
                    {"key": "trait0", "value": f"CUSTOM_SSD_{vendor_trait}"},
                    {"key": "trait1", "value": f"CUSTOM_SSD_PRODUCT_ID_{product_id.upper()}"},
                ],
                "attach_handles": [{"attach_type": "PCI", "attach_info": cpid(bus)}],
            }
        ],
    }


SAMSUNG_BOOT = drive(
    "02",
    0,
    "144d",
    "a80a",
    "SAMSUNG MZQL2960HCJR-00A07",
    "GDC5602Q",
    "S64FNE0R700001",
    ("144d", "a813"),
    "00",
    "SAMSUNG",
    ("nvme0n1", 1875385008),  # 960 GB
)
INTEL_FREE = drive(
    "04",
    0,
    "8086",
    "0b60",
    "INTEL SSDPF2KX038TZ",
    "JCV10100",
    "PHAX2100000A3P8CGN",
    ("8086", "8008"),
    "00",
    "INTEL",
    ("nvme1n1", 7501476528),  # 3.84 TB
)
KIOXIA_SWAP = drive(
    "5e",
    0,
    "1e0f",
    "0007",
    "KCM61VUL3T20",
    "0105",
    "X0S0A00ATD0A",
    ("1e0f", "0001"),
    "01",
    "1E0F",
    ("nvme2n1", 6251233968),  # the multipath head: 3.2 TB
)
MICRON_LVM = drive(
    "5f",
    0,
    "1344",
    "51c3",
    "Micron_7450_MTFDKCC3T8TFR",
    "E2MU200",
    "22203A000001",
    ("1344", "2100"),
    "01",
    "1344",
    ("nvme3n1", 7501476528),
)
# Bound to vfio-pci: no nvme controller, so no model, serial, firmware or namespace from
# the kernel.
MICRON_VFIO = drive("d8", 1, "1344", "51c3", "51c3", None, None, ("1344", "2100"), "01", "1344")


def test_by_default_only_drives_the_host_does_not_use_are_offered():
    assert discover() == [INTEL_FREE, MICRON_VFIO]


def test_without_the_safety_every_nvme_controller_is_offered_and_nothing_else():
    # Not the SATA controller, the USB controller, the T4, the NIC, the VGA console.
    assert discover(skip_host_disks=False) == [
        SAMSUNG_BOOT,
        INTEL_FREE,
        KIOXIA_SWAP,
        MICRON_LVM,
        MICRON_VFIO,
    ]


def test_excluded_addresses_are_never_offered():
    assert discover(excluded_addresses=["0000:04:00.0"]) == [MICRON_VFIO]
    assert discover(skip_host_disks=False, excluded_addresses=["0000:D8:00.0"]) == [
        SAMSUNG_BOOT,
        INTEL_FREE,
        KIOXIA_SWAP,
        MICRON_LVM,
    ]
    with pytest.raises(ValueError, match="not PCI addresses: 3b:00.0"):
        discover(excluded_addresses=["3b:00.0"])


USES = {
    "nvme0n1": [
        "nvme0n1p1 mounted at /boot/efi",
        "nvme0n1p2 mounted at /boot",
        "nvme0n1p3 held by dm-0",
    ],
    "nvme1n1": [],
    "nvme2n1": ["nvme2n1 swap"],
    "nvme3n1": ["nvme3n1 held by dm-1"],
    "dm-0": ["dm-0 mounted at /"],
}


@pytest.mark.parametrize("disk,expected", USES.items(), ids=USES.keys())
def test_why_a_block_device_counts_as_used_by_the_host(disk, expected):
    assert HostBlockUsage(Sysfs(HOST)).reasons(disk) == expected


def test_controllers_map_pci_addresses_to_namespaces_including_multipath_heads():
    controllers = nvme_controllers(Sysfs(HOST))
    assert {a: (c.name, c.namespaces) for a, c in controllers.items()} == {
        "0000:02:00.0": ("nvme0", ("nvme0n1",)),
        "0000:04:00.0": ("nvme1", ("nvme1n1",)),
        "0000:5e:00.0": ("nvme2", ("nvme2n1",)),  # path nvme2c2n1 → head nvme2n1
        "0000:5f:00.0": ("nvme3", ("nvme3n1",)),
    }
    # The kernel pads model and serial with blanks; they are reported without.
    assert controllers["0000:04:00.0"].model == "INTEL SSDPF2KX038TZ"


def test_a_namespace_of_unknown_or_no_size_is_listed_as_such(tmp_path):
    root = copy_host(tmp_path)
    size = os.path.join(root, "sys", "class", "block", "nvme1n1", "size")
    with open(size, "w") as f:
        f.write("0\n")
    (found,) = [d for d in discover(root) if d["pci_address"] == "0000:04:00.0"]
    assert found["services"] == [
        {
            "kind": "nvme_namespace",
            "name": "nvme1n1",
            "enabled": False,
            "details": {"capacity_bytes": "0"},
        }
    ]
    os.remove(size)
    (found,) = [d for d in discover(root) if d["pci_address"] == "0000:04:00.0"]
    assert found["services"][0]["details"] == {}


def copy_host(tmp_path) -> str:
    root = str(tmp_path / "host")
    shutil.copytree(HOST, root, symlinks=True)
    return root


def test_without_a_readable_mount_table_drives_with_namespaces_count_as_used(tmp_path):
    root = copy_host(tmp_path)
    os.remove(os.path.join(root, "proc", "self", "mountinfo"))
    # Only the drive the host cannot have mounted (vfio-pci) is offered.
    assert discover(root) == [MICRON_VFIO]
    assert HostBlockUsage(Sysfs(root)).reasons("nvme1n1") == [
        "nvme1n1 may be mounted (the mount table is unreadable)"
    ]
    assert discover(root, skip_host_disks=False)[1] == INTEL_FREE


def test_a_mount_is_found_by_device_number_or_by_source_and_unescaped(tmp_path):
    root = copy_host(tmp_path)
    with open(os.path.join(root, "proc", "self", "mountinfo"), "a") as f:
        # btrfs reports an anonymous device number: only the source names the drive.
        f.write("40 22 0:51 / /srv/my\\040data rw - btrfs /dev/nvme1n1p1 rw\n")
    assert HostBlockUsage(Sysfs(root)).reasons("nvme1n1") == ["nvme1n1p1 mounted at /srv/my data"]
    assert discover(root) == [MICRON_VFIO]


def test_options_come_from_the_nvme_group_and_the_snapshot_matches_the_schema(tmp_path):
    config = tmp_path / "exosuit.conf"
    config.write_text("[nvme]\nskip_host_disks = false\nexcluded_addresses = 0000:02:00.0\n")
    settings = driver_settings(make_conf([str(config)]), "nvme")
    assert settings == {
        "skip_host_disks": False,
        "excluded_addresses": ["0000:02:00.0"],
        "smart_log": "nvme",
    }
    context = DriverContext(
        hostname="compute-3", sysfs_root=HOST, settings=settings, runner=RecordedRunner({})
    )
    snapshot = build_snapshot("compute-3", [load_driver("nvme", context)])
    jsonschema.validate(snapshot, schemas.inventory_schema())
    # The snapshot names the plug-in that found each device (the agent adds it), and the
    # health of those not ok: the Micron on vfio-pci trained its link at x2 of its x4
    # (nvme-host).
    degraded = {"state": "warning", "reason": "PCIe link x2, below its maximum x4"}
    assert snapshot["devices"] == [
        {**INTEL_FREE, "plugin": "nvme"},
        {**KIOXIA_SWAP, "plugin": "nvme"},
        {**MICRON_LVM, "plugin": "nvme"},
        {**MICRON_VFIO, "plugin": "nvme", "health": degraded},
    ]


def test_other_hosts_have_no_nvme_drives():
    assert discover(os.path.join(FIXTURES, "sriov-nic-host")) == []


def test_on_this_machine_only_nvme_class_functions_are_reported():
    require(os.path.isdir("/sys/bus/pci/devices"), "no /sys/bus/pci on this machine")
    nvme = []
    for address in sorted(os.listdir("/sys/bus/pci/devices")):
        with open(os.path.join("/sys/bus/pci/devices", address, "class")) as f:
            if f.read().strip().lower() == "0x010802":
                nvme.append(address)
    found = [d["pci_address"] for d in discover("/", skip_host_disks=False)]
    assert found == nvme
    assert set(d["pci_address"] for d in discover("/")) <= set(nvme)
