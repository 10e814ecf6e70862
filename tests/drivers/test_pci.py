"""The pci driver: Nova's device_spec selection, on recorded-style trees and on this
machine's own /sys."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.conf import driver_settings, make_conf
from exosuit.drivers import DriverContext, load_driver
from exosuit.drivers.device_spec import DeviceSpecError, parse_device_specs
from exosuit.drivers.pci import PciDriver
from exosuit.drivers.pci_classes import class_name, device_type
from tests.conftest import require
from tests.drivers.topology import topology

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
NIC_HOST = os.path.join(FIXTURES, "sriov-nic-host")
NVME_HOST = os.path.join(FIXTURES, "nvme-host")


def discover(root: str, *specs, **settings) -> list[dict]:
    settings["device_spec"] = [s if isinstance(s, str) else json.dumps(s) for s in specs]
    context = DriverContext(hostname="compute-1", sysfs_root=root, settings=settings)
    return [device.to_snapshot() for device in PciDriver(context).discover()]


def addresses(root: str, *specs, **settings) -> list[str]:
    return [d["pci_address"] for d in discover(root, *specs, **settings)]


def cpid(address: str) -> dict:
    domain, bus, rest = address.split(":")
    device, function = rest.split(".")
    return {"domain": domain, "bus": bus, "device": device, "function": function}


T4 = {
    "type": "GPU",
    "vendor": "10de",
    "model": "1eb8",
    "driver_name": "pci",
    "controlpath_id": {"cpid_type": "PCI", "cpid_info": cpid("0000:3b:00.0")},
    "pci_address": "0000:3b:00.0",
    "numa_node": 0,
    **topology("nvme-host", "0000:3b:00.0"),
    "firmware_version": None,
    "std_board_info": {
        "vendor_id": "10de",
        "product_id": "1eb8",
        "class": "030200",
        "controller": "3D controller",
        "subsystem_vendor_id": "10de",
        "subsystem_device_id": "12a2",
        "revision": "a1",
    },
    "vendor_board_info": {},
    "deployables": [
        {
            "name": "compute-1_0000:3b:00.0",
            "num_accelerators": 1,
            "driver_name": "pci",
            "attributes": [
                {"key": "rc", "value": "CUSTOM_PCI"},
                {"key": "trait0", "value": "OWNER_CYBORG"},
                {"key": "trait1", "value": "CUSTOM_PCI_NVIDIA"},
                {"key": "trait2", "value": "CUSTOM_PCI_PRODUCT_ID_1EB8"},
            ],
            "attach_handles": [{"attach_type": "PCI", "attach_info": cpid("0000:3b:00.0")}],
        }
    ],
}


def test_a_selected_gpu_is_one_device_with_one_pci_attach_handle():
    assert discover(NVME_HOST, {"vendor_id": "10de"}) == [T4]


def test_nothing_is_reported_without_a_spec():
    assert discover(NVME_HOST) == []
    assert discover(NIC_HOST) == []


# Table: spec → the functions it selects on the SR-IOV host (Nova's matching rules).
SELECTIONS = {
    "vendor": ({"vendor_id": "102b"}, ["0000:03:00.0"]),
    "vendor with 0x and capitals": ({"vendor_id": "0x14E4"}, ["0000:04:00.0", "0000:04:00.1"]),
    "vendor and product (VFs)": (
        {"vendor_id": "8086", "product_id": "1889"},
        ["0000:3b:01.0", "0000:3b:01.1"],
    ),
    "product only": ({"product_id": "101e"}, ["0000:af:00.2", "0000:af:00.3"]),
    "glob bus": (
        {"address": "0000:3b:*.*"},
        ["0000:3b:00.0", "0000:3b:00.1", "0000:3b:01.0", "0000:3b:01.1"],
    ),
    "glob with empty fields": ({"address": ":3b:00."}, ["0000:3b:00.0", "0000:3b:00.1"]),
    "glob slot and function only": ({"address": "01.1"}, ["0000:3b:01.1"]),
    "glob function": (
        {"address": "*:*:*.1"},
        ["0000:04:00.1", "0000:3b:00.1", "0000:3b:01.1", "0000:af:00.1"],
    ),
    "single address of a PF with VFs selects its VFs too": (
        {"address": "0000:af:00.0"},
        ["0000:af:00.0", "0000:af:00.2", "0000:af:00.3"],
    ),
    "single address of a function without VFs": ({"address": "0000:af:00.3"}, ["0000:af:00.3"]),
    "PF address with the VF product id selects only VFs": (
        {"address": "0000:3b:00.0", "product_id": "1889"},
        ["0000:3b:01.0", "0000:3b:01.1"],
    ),
    "regex": ({"address": {"bus": "af", "function": "[2-7]"}}, ["0000:af:00.2", "0000:af:00.3"]),
    "regex is matched from the start only": (
        {"address": {"bus": "3", "slot": "01"}},
        ["0000:3b:01.0", "0000:3b:01.1"],
    ),
    "regex of one PF address selects its VFs too": (
        {"address": {"domain": "0000", "bus": "3b", "slot": "00", "function": "0"}},
        ["0000:3b:00.0", "0000:3b:01.0", "0000:3b:01.1"],
    ),
    "devname of a PF selects it and its VFs": (
        {"devname": "ens1f0"},
        ["0000:3b:00.0", "0000:3b:01.0", "0000:3b:01.1"],
    ),
    "devname of a VF": ({"devname": "ens1f0v1"}, ["0000:3b:01.1"]),
    "devname of a plain NIC": ({"devname": "eno2"}, ["0000:04:00.1"]),
    "unknown devname selects nothing": ({"devname": "eth9"}, []),
    "no match": ({"vendor_id": "1af4"}, []),
    "a list of specs": (
        '[{"vendor_id": "102b"}, {"address": "0000:5e:00.0"}]',
        ["0000:03:00.0", "0000:5e:00.0"],
    ),
}


@pytest.mark.parametrize("spec,expected", SELECTIONS.values(), ids=SELECTIONS.keys())
def test_device_spec_selects_what_nova_would(spec, expected):
    assert addresses(NIC_HOST, spec) == expected


def test_a_function_selected_by_several_specs_is_reported_once_with_the_first_spec():
    devices = discover(
        NIC_HOST,
        {"address": "0000:03:00.0", "resource_class": "first"},
        {"vendor_id": "102b", "resource_class": "second"},
    )
    assert [d["pci_address"] for d in devices] == ["0000:03:00.0"]
    assert devices[0]["deployables"][0]["attributes"][0] == {"key": "rc", "value": "CUSTOM_FIRST"}


def test_non_accelerators_are_reported_only_when_a_spec_selects_them():
    # Everything on bus 00: the host bridge, the SATA controller, the root ports.
    assert addresses(NIC_HOST, {"address": "0000:00:*.*"}) == [
        "0000:00:00.0",
        "0000:00:17.0",
        "0000:00:1c.0",
        "0000:00:1c.5",
    ]
    types = {d["pci_address"]: d["type"] for d in discover(NIC_HOST, {"address": "*:00:*.*"})}
    assert types == {
        "0000:00:00.0": "PCI",
        "0000:00:17.0": "STORAGE",
        "0000:00:1c.0": "PCI",
        "0000:00:1c.5": "PCI",
    }


def test_matrox_console_has_cyborgs_vendor_name_and_other_vendors_their_id():
    traits = {
        d["pci_address"]: [a["value"] for a in d["deployables"][0]["attributes"][1:]]
        for d in discover(NIC_HOST, {"vendor_id": "102b"}, {"devname": "ens4f0v1"})
    }
    assert traits == {
        "0000:03:00.0": ["OWNER_CYBORG", "CUSTOM_PCI_MATROX", "CUSTOM_PCI_PRODUCT_ID_0536"],
        "0000:af:00.3": ["OWNER_CYBORG", "CUSTOM_PCI_15B3", "CUSTOM_PCI_PRODUCT_ID_101E"],
    }


def test_spec_tags_set_resource_class_traits_and_type_normalized_as_nova_does():
    (device,) = discover(
        NVME_HOST,
        {
            "vendor_id": "10de",
            "resource_class": "PGPU",
            "traits": "HW_GPU_API_VULKAN, my-awesome gpu,CUSTOM_T4,OWNER_CYBORG",
            "device_type": "accelerator",
            "physical_network": "ignored",
        },
    )
    attributes = device["deployables"][0]["attributes"]
    assert attributes == [
        {"key": "rc", "value": "PGPU"},
        {"key": "trait0", "value": "OWNER_CYBORG"},
        {"key": "trait1", "value": "CUSTOM_PCI_NVIDIA"},
        {"key": "trait2", "value": "CUSTOM_PCI_PRODUCT_ID_1EB8"},
        {"key": "trait3", "value": "HW_GPU_API_VULKAN"},
        {"key": "trait4", "value": "CUSTOM_MY_AWESOME_GPU"},
        {"key": "trait5", "value": "CUSTOM_T4"},
    ]
    assert device["type"] == "ACCELERATOR"
    (custom,) = discover(NVME_HOST, {"vendor_id": "10de", "resource_class": "t4 gpu"})
    assert custom["deployables"][0]["attributes"][0]["value"] == "CUSTOM_T4_GPU"


def test_device_type_option_sets_every_type_as_cyborg_does():
    types = [
        d["type"]
        for d in discover(NIC_HOST, {"vendor_id": "102b"}, {"devname": "eno1"}, device_type="GPU")
    ]
    assert types == ["GPU", "GPU"]
    assert [
        d["type"]
        for d in discover(NIC_HOST, {"vendor_id": "102b"}, {"devname": "eno1"}, device_type="auto")
    ] == ["GPU", "NIC"]
    with pytest.raises(DeviceSpecError):
        discover(NIC_HOST, device_type="type-PF")


def test_vf_records_its_pf_and_numa_node():
    (vf,) = discover(NIC_HOST, {"address": "0000:af:00.2"})
    assert vf["numa_node"] == 1
    assert vf["std_board_info"]["physfn"] == "0000:af:00.0"
    assert vf["type"] == "NIC"


INVALID = {
    "address and devname": '{"address": "0000:3b:00.0", "devname": "ens1f0"}',
    "function above 7": '{"address": "0000:3b:00.8"}',
    "slot above 1f": '{"address": "0000:3b:20.0"}',
    "bus not hex": '{"address": "0000:3g:00.0"}',
    "partial glob in a field": '{"address": "0000:3*:00.0"}',
    "too many fields": '{"address": "0000:00:3b:00.0"}',
    "vendor above ffff": '{"vendor_id": "10000"}',
    "vendor not a string": '{"vendor_id": 4318}',
    "bad regex": '{"address": {"bus": "(3b"}}',
    "misspelt regex key": '{"address": {"device": "00"}}',
    "not JSON": "{vendor_id: 10de}",
    "not an object": '"10de"',
    "traits not a string": '{"traits": ["CUSTOM_A"]}',
    "device_type not a word": '{"device_type": "type-PF"}',
}


@pytest.mark.parametrize("text", INVALID.values(), ids=INVALID.keys())
def test_invalid_specs_are_refused_when_the_driver_starts(text):
    with pytest.raises(DeviceSpecError):
        parse_device_specs([text])
    with pytest.raises(DeviceSpecError):
        PciDriver(
            DriverContext(hostname="h", sysfs_root=NIC_HOST, settings={"device_spec": [text]})
        )


def test_cyborgs_passthrough_whitelist_option_name_still_works(tmp_path):
    config = tmp_path / "exosuit.conf"
    config.write_text('[pci]\npassthrough_whitelist = {"vendor_id": "102b"}\ndevice_type = GPU\n')
    settings = driver_settings(make_conf([str(config)]), "pci")
    assert settings == {
        "device_spec": ['{"vendor_id": "102b"}'],
        "device_type": "GPU",
        "bind_driver": "",
    }
    context = DriverContext(hostname="compute-1", sysfs_root=NIC_HOST, settings=settings)
    snapshot = build_snapshot("compute-1", [load_driver("pci", context)])
    jsonschema.validate(snapshot, schemas.inventory_schema())
    assert [(d["pci_address"], d["type"]) for d in snapshot["devices"]] == [("0000:03:00.0", "GPU")]


CLASSES = {
    "010802": ("Non-Volatile memory controller", "SSD"),
    "010601": ("SATA controller", "STORAGE"),
    "020000": ("Ethernet controller", "NIC"),
    "030000": ("VGA compatible controller", "GPU"),
    "030200": ("3D controller", "GPU"),
    "0b4000": ("Co-processor", "COPROCESSOR"),
    "108000": ("Encryption controller", "CRYPTO"),
    "120000": ("Processing accelerators", "ACCELERATOR"),
    "060000": ("Host bridge", "PCI"),
    "ffff00": ("Unassigned class", "PCI"),
    "0d1100": ("Wireless controller", "PCI"),
    "420000": ("Class 4200", "PCI"),
}


@pytest.mark.parametrize("code,expected", CLASSES.items(), ids=CLASSES.keys())
def test_class_names_and_device_types(code, expected):
    assert (class_name(code), device_type(code)) == expected


# --- this machine's own /sys ------------------------------------------------------------


def _real_functions() -> dict[str, str]:
    """vendor id of every PCI function of this machine, read without the driver."""
    base = "/sys/bus/pci/devices"
    require(os.path.isdir(base), "no /sys/bus/pci on this machine")
    found = {}
    for address in os.listdir(base):
        with open(os.path.join(base, address, "vendor")) as f:
            found[address] = f.read().strip().lower().removeprefix("0x")
    return found


def test_on_this_machine_a_vendor_spec_finds_exactly_that_vendors_functions():
    functions = _real_functions()
    for vendor in sorted(set(functions.values())):
        expected = sorted(a for a, v in functions.items() if v == vendor)
        devices = discover("/", {"vendor_id": vendor})
        assert [d["pci_address"] for d in devices] == expected, vendor
        for device in devices:
            assert device["vendor"] == vendor
            traits = [a["value"] for a in device["deployables"][0]["attributes"]]
            assert traits[2] == f"CUSTOM_PCI_{vendor.upper()}" or vendor in ("10de", "102b")
            assert traits[3] == f"CUSTOM_PCI_PRODUCT_ID_{device['model'].upper()}"
    jsonschema.validate(
        build_snapshot(
            "h",
            [
                PciDriver(
                    DriverContext(hostname="h", settings={"device_spec": ['{"vendor_id": "*"}']})
                )
            ],
        ),
        schemas.inventory_schema(),
    )


def test_on_this_machine_virtio_functions_are_found_and_the_host_bridge_is_not():
    functions = _real_functions()
    virtio = sorted(a for a, v in functions.items() if v == "1af4")
    if not virtio:
        pytest.skip("no virtio (1af4) PCI functions on this machine")
    found = addresses("/", {"vendor_id": "1af4"})
    assert found == virtio
    others = set(functions) - set(virtio)
    assert not others & set(found)
    assert addresses("/", {"vendor_id": "1af4", "product_id": "ffff"}) == []


def test_on_this_machine_devname_resolves_through_the_interface_path():
    interfaces = {}
    _real_functions()  # requires /sys/bus/pci
    for ifname in sorted(os.listdir("/sys/class/net")):
        real = os.path.realpath(os.path.join("/sys/class/net", ifname))
        parts = [p for p in real.split("/") if p.count(":") == 2 and "." in p]
        if parts:
            interfaces[ifname] = parts[-1]
    if not interfaces:
        pytest.skip("no PCI network interface on this machine")
    for ifname, address in interfaces.items():
        assert address in addresses("/", {"devname": ifname}), ifname
