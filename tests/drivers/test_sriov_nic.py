"""The sriov_nic driver on a recorded-style host: an E810 with VFs on one port, a
ConnectX-6 Dx with VFs on one port, an X710 bound to vfio-pci, a plain Broadcom LOM."""

from __future__ import annotations

import os

import jsonschema
import pytest

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.conf import driver_settings, make_conf
from exosuit.drivers import DriverContext, RecordedRunner, load_driver
from exosuit.drivers.sriov_nic import SriovNicDriver, parse_ethtool_firmware, parse_mappings
from tests.conftest import require
from tests.drivers.topology import topology

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
HOST = os.path.join(FIXTURES, "sriov-nic-host")
MAPPINGS = {
    "physical_device_mappings": ["physnet1:ens1f0", "physnet-sriov_b:ens4f0np0|0000:AF:00.1"],
    "function_device_mappings": ["dpdk:ens4f0np0"],
}


ICE_FIRMWARE = "4.20 0x8001778b 1.3346.0"
MLX5_FIRMWARE = "22.36.1010 (MT_0000000359)"
TG3_FIRMWARE = "FFV21.80.8 bc 5720-v1.39"


def recorded(root: str = HOST) -> RecordedRunner:
    """ethtool's answers (commands.json): each PF interface's firmware."""
    return RecordedRunner.from_file(os.path.join(root, "commands.json"))


def discover(root: str = HOST, runner=None, **settings) -> list[dict]:
    context = DriverContext(
        hostname="compute-4",
        sysfs_root=root,
        settings=settings,
        runner=runner if runner is not None else recorded(root),
    )
    return [device.to_snapshot() for device in SriovNicDriver(context).discover()]


def cpid(address: str) -> dict:
    domain, bus, rest = address.split(":")
    device, function = rest.split(".")
    return {"domain": domain, "bus": bus, "device": device, "function": function}


def unit(address: str, traits: list[str], physnet: str | None) -> dict:
    info = cpid(address)
    if physnet:
        info["physical_network"] = physnet
    return {
        "name": f"compute-4_{address}",
        "num_accelerators": 1,
        "driver_name": "sriov_nic",
        "attributes": [{"key": "rc", "value": "CUSTOM_NIC"}]
        + [{"key": f"trait{i}", "value": t} for i, t in enumerate(traits)],
        "attach_handles": [{"attach_type": "PCI", "attach_info": info}],
    }


def nic(address, numa, vendor, product_id, subsystem, revision, interface, total, units, firmware):
    board = {
        "vendor_id": vendor,
        "product_id": product_id,
        "class": "020000",
        "controller": "Ethernet controller",
        "subsystem_vendor_id": subsystem[0],
        "subsystem_device_id": subsystem[1],
        "revision": revision,
    }
    if interface:
        board["interface"] = interface
    body = {}
    if total is not None:
        board["sriov_totalvfs"] = str(total)
        # The VF service: as many VFs as there are VF deployables, the PF's physnet.
        vfs = [u for u in units if not u["name"].endswith(address)]
        details = {"current": str(len(vfs)), "total": str(total)}
        physnet = units[0]["attach_handles"][0]["attach_info"].get("physical_network")
        if physnet:
            details["physical_network"] = physnet
        body["services"] = [
            {"kind": "sriov", "name": "vf", "enabled": bool(vfs), "details": details}
        ]
    return {
        "type": "NIC",
        "vendor": vendor,
        "model": product_id,
        "driver_name": "sriov_nic",
        "controlpath_id": {"cpid_type": "PCI", "cpid_info": cpid(address)},
        "pci_address": address,
        "numa_node": numa,
        **topology("sriov-nic-host", address),
        "firmware_version": firmware,
        "std_board_info": board,
        "vendor_board_info": {},
        "deployables": units,
        **body,
    }


def e810(physnet=None):
    traits = ["CUSTOM_VF"] + (["CUSTOM_PHYSNET1"] if physnet else [])
    return nic(
        "0000:3b:00.0",
        0,
        "8086",
        "159b",
        ("8086", "0003"),
        "02",
        "ens1f0",
        128,
        [unit("0000:3b:01.0", traits, physnet), unit("0000:3b:01.1", traits, physnet)],
        ICE_FIRMWARE,
    )


def x710():
    return nic(
        "0000:5e:00.0",
        0,
        "8086",
        "1572",
        ("8086", "0006"),
        "02",
        None,
        64,
        [unit("0000:5e:00.0", ["CUSTOM_PF"], None)],
        None,  # bound to vfio-pci: no interface for ethtool on the host
    )


def cx6(traits=("CUSTOM_VF",), physnet=None):
    return nic(
        "0000:af:00.0",
        1,
        "15b3",
        "101d",
        ("15b3", "0016"),
        "00",
        "ens4f0np0",
        8,
        [unit("0000:af:00.2", list(traits), physnet), unit("0000:af:00.3", list(traits), physnet)],
        MLX5_FIRMWARE,
    )


def cx6_port1(traits, physnet):
    return nic(
        "0000:af:00.1",
        1,
        "15b3",
        "101d",
        ("15b3", "0016"),
        "00",
        "ens4f1np1",
        8,
        [unit("0000:af:00.1", traits, physnet)],
        MLX5_FIRMWARE,
    )


def test_unmapped_host_offers_vfs_and_idle_pfs_only():
    # The E810's second port and the ConnectX's second port have no VFs and carry host
    # interfaces: left alone. The X710 belongs to vfio-pci: offered whole.
    assert discover() == [e810(), x710(), cx6()]


def test_mappings_add_physnet_to_attach_info_and_traits_in_cyborgs_order():
    assert discover(**MAPPINGS) == [
        e810("physnet1"),
        x710(),
        cx6(["CUSTOM_VF", "CUSTOM_DPDK", "CUSTOM_PHYSNET_SRIOV_B"], "physnet-sriov_b"),
        cx6_port1(["CUSTOM_PF", "CUSTOM_PHYSNET_SRIOV_B"], "physnet-sriov_b"),
    ]


def test_a_mapped_plain_nic_is_offered_whole_and_unmapped_ones_are_ignored():
    devices = discover(physical_device_mappings=["provider:eno2"])
    assert [d["pci_address"] for d in devices] == [
        "0000:04:00.1",
        "0000:3b:00.0",
        "0000:5e:00.0",
        "0000:af:00.0",
    ]
    assert devices[0] == nic(
        "0000:04:00.1",
        0,
        "14e4",
        "165f",
        ("1028", "04f7"),
        "00",
        "eno2",
        None,
        [unit("0000:04:00.1", ["CUSTOM_PF", "CUSTOM_PROVIDER"], "provider")],
        TG3_FIRMWARE,
    )


def test_a_function_mapping_alone_offers_an_idle_pf_without_physnet():
    devices = discover(function_device_mappings=["lb:ens1f1"])
    assert devices[1] == nic(
        "0000:3b:00.1",
        0,
        "8086",
        "159b",
        ("8086", "0003"),
        "02",
        "ens1f1",
        128,
        [unit("0000:3b:00.1", ["CUSTOM_PF", "CUSTOM_LB"], None)],
        ICE_FIRMWARE,
    )


def test_vfs_are_never_devices_of_their_own_and_non_nics_are_ignored():
    addresses = [d["pci_address"] for d in discover(**MAPPINGS)]
    assert not {"0000:3b:01.0", "0000:3b:01.1", "0000:af:00.2", "0000:af:00.3"} & set(addresses)
    assert not {"0000:00:00.0", "0000:00:17.0", "0000:03:00.0"} & set(addresses)
    assert discover(os.path.join(FIXTURES, "nvme-host")) == []


INVALID = {
    "no colon": (["physnet1"], "is not NAME:DEV"),
    "empty name": ([":ens1f0"], "is not NAME:DEV"),
    "name twice": (["a:ens1f0", "a:ens1f1"], "'a' is mapped twice"),
    "device twice": (["a:ens1f0", "b:ens1f1|ens1f0"], "'ens1f0' is mapped to both"),
}


@pytest.mark.parametrize("values,message", INVALID.values(), ids=INVALID.keys())
def test_invalid_mappings_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        parse_mappings(values, "physical_device_mappings")
    with pytest.raises(ValueError, match=message):
        SriovNicDriver(
            DriverContext(
                hostname="h", sysfs_root=HOST, settings={"physical_device_mappings": values}
            )
        )


def test_mappings_accept_pci_addresses_in_any_case():
    assert parse_mappings(["net-a:0000:AF:00.1|ens1f0", "net-b: eno1 "], "x") == {
        "0000:af:00.1": "net-a",
        "ens1f0": "net-a",
        "eno1": "net-b",
    }


def test_options_come_from_the_sriov_nic_group_and_the_snapshot_matches_the_schema(tmp_path):
    config = tmp_path / "exosuit.conf"
    config.write_text(
        "[sriov_nic]\nphysical_device_mappings = physnet1:ens1f0,physnet2:ens4f0np0\n"
    )
    settings = driver_settings(make_conf([str(config)]), "sriov_nic")
    assert settings == {
        "physical_device_mappings": ["physnet1:ens1f0", "physnet2:ens4f0np0"],
        "function_device_mappings": [],
        "ethtool_path": "ethtool",
        "num_vfs": 0,
    }
    context = DriverContext(
        hostname="compute-4", sysfs_root=HOST, settings=settings, runner=recorded()
    )
    snapshot = build_snapshot("compute-4", [load_driver("sriov_nic", context)])
    jsonschema.validate(snapshot, schemas.inventory_schema())
    # The snapshot names the plug-in that found each device (the agent adds it).
    assert snapshot["devices"] == [
        {**d, "plugin": "sriov_nic"}
        for d in (e810("physnet1"), x710(), cx6(["CUSTOM_VF", "CUSTOM_PHYSNET2"], "physnet2"))
    ]


def test_without_ethtool_the_firmware_is_unknown_and_the_nics_still_reported():
    runner = RecordedRunner({})
    devices = discover(runner=runner)
    assert [d["firmware_version"] for d in devices] == [None, None, None]
    assert runner.calls == [("ethtool", "-i", "ens1f0"), ("ethtool", "-i", "ens4f0np0")]
    runner = RecordedRunner({})
    discover(runner=runner, ethtool_path="")
    assert runner.calls == []
    failing = RecordedRunner({"ethtool -i ens1f0": {"returncode": 94, "stderr": "no such device"}})
    assert discover(runner=failing)[0]["firmware_version"] is None


def test_ethtool_output_is_read_for_its_function_only():
    output = "driver: ice\nfirmware-version: 4.20 0x8001778b\nbus-info: 0000:3b:00.0\n"
    assert parse_ethtool_firmware(output, "0000:3B:00.0") == "4.20 0x8001778b"
    assert parse_ethtool_firmware(output, "0000:3b:00.1") is None  # renamed meanwhile
    assert parse_ethtool_firmware("driver: virtio_net\nfirmware-version: \n") is None
    assert parse_ethtool_firmware("firmware-version: N/A\n") is None


def test_on_this_machine_only_sr_iov_capable_nics_are_reported():
    base = "/sys/bus/pci/devices"
    require(os.path.isdir(base), "no /sys/bus/pci on this machine")
    capable = []
    for address in sorted(os.listdir(base)):
        with open(os.path.join(base, address, "class")) as f:
            is_nic = f.read().strip().lower().startswith("0x02")
        total = os.path.join(base, address, "sriov_totalvfs")
        if is_nic and os.path.exists(total):
            with open(total) as f:
                if int(f.read().strip() or 0) > 0:
                    capable.append(address)
    assert {d["pci_address"] for d in discover("/")} <= set(capable)
