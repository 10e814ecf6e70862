"""The nvidia_gpu driver on a hand-written host: sysfs tree, nvidia-smi output, NVML answers.

tests/fixtures/nvidia-gpu-host holds an ASPEED BMC VGA (not NVIDIA), two Tesla T4s
(0000:3b:00.0 plain; 0000:af:00.0 with one mdev of nvidia-223 made outside Exosuit),
an A100 with four SR-IOV VFs and MIG enabled (0000:41:00.0, three MIG instances in
nvml.json) and an A100 with four VFs carrying time-sliced vGPU types, one of which
already has an mdev (0000:81:00.0).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid

import jsonschema
import os_resource_classes
import os_traits
import pytest

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.conf import driver_settings, make_conf
from exosuit.drivers import DriverContext, load_driver
from exosuit.drivers.nvidia_gpu import InvalidVgpuConfig, NvidiaGpuDriver, parse_mdevs
from exosuit.drivers.nvml import (
    NvmlUnavailable,
    PynvmlNvml,
    RecordedNvml,
    bus_id_to_address,
    mig_profile,
    open_pynvml,
)
from exosuit.drivers.runner import RecordedRunner
from tests.drivers.topology import topology

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
HOST = os.path.join(FIXTURES, "nvidia-gpu-host")
HOSTNAME = "nvidia-gpu-host"
VGPU = {"0000:af:00.0": "nvidia-223", "0000:81:00.0": "nvidia-471"}
SMI = ("nvidia-smi", "--query-gpu=pci.bus_id,vbios_version,serial,name", "--format=csv,noheader")
SMI_MIG = (
    "nvidia-smi",
    "--query-gpu=pci.bus_id,mig.mode.current,mig.mode.pending",
    "--format=csv,noheader",
)
# The documented contract for the UUIDs of mdevs not created yet (doc/drivers/nvidia_gpu.md).
MDEV_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "mdev.exosuit.dev")
FOREIGN_MDEV = "4b20d080-1b54-4048-85b3-a6a62d165c01"  # made outside Exosuit on 0000:af:00.0


def recorded_runner() -> RecordedRunner:
    return RecordedRunner.from_file(os.path.join(HOST, "commands.json"))


def recorded_nvml() -> RecordedNvml:
    return RecordedNvml.from_file(os.path.join(HOST, "nvml.json"))


def driver(root: str = HOST, runner=None, nvml=None, **settings) -> NvidiaGpuDriver:
    context = DriverContext(
        hostname=HOSTNAME,
        sysfs_root=root,
        runner=runner if runner is not None else recorded_runner(),
        settings=settings,
    )
    return NvidiaGpuDriver(context, nvml=nvml)


def discover(root: str = HOST, runner=None, nvml=None, **settings) -> dict[str, dict]:
    found = driver(root, runner, nvml, **settings).discover()
    return {d.pci_address: d.to_snapshot() for d in found}


def slot(parent: str, vgpu_type: str, index: int) -> str:
    return str(uuid.uuid5(MDEV_NAMESPACE, f"{HOSTNAME}/{parent}/{vgpu_type}/{index}"))


def pci(bus: str, function: str = "0") -> dict:
    return {"domain": "0000", "bus": bus, "device": "00", "function": function}


def attributes(rc: str, *traits: str, extra=()) -> list[dict]:
    return (
        [{"key": "rc", "value": rc}]
        + [{"key": f"trait{i}", "value": t} for i, t in enumerate(traits)]
        + [{"key": k, "value": v} for k, v in extra]
    )


def vgpu_services(types, configured: str | None = None) -> list[dict]:
    """``types``: (type, its name, available instances, mdevs there are), as sysfs says."""
    return [
        {
            "kind": "vgpu",
            "name": type_id,
            "enabled": type_id == configured,
            "details": {
                "description": name,
                "available_instances": str(available),
                "instances": str(instances),
            },
        }
        for type_id, name, available, instances in types
    ]


# The mdev types of each GPU, listed whether vGPU is configured or not (summed over the
# VFs of the SR-IOV A100s, one vGPU per VF).
T4_3B_TYPES = [
    ("nvidia-223", "GRID T4-1B", 16, 0),
    ("nvidia-224", "GRID T4-2B", 8, 0),
    ("nvidia-230", "GRID T4-1Q", 16, 0),
    ("nvidia-232", "GRID T4-4Q", 4, 0),
    ("nvidia-234", "GRID T4-16Q", 1, 0),
]
T4_AF_TYPES = [  # as its sysfs says, with one mdev of nvidia-223
    ("nvidia-223", "GRID T4-1B", 15, 1),
    ("nvidia-224", "GRID T4-2B", 0, 0),
    ("nvidia-230", "GRID T4-1Q", 15, 0),
    ("nvidia-232", "GRID T4-4Q", 0, 0),
    ("nvidia-234", "GRID T4-16Q", 0, 0),
]
A100_41_TYPES = [
    ("nvidia-699", "GRID A100-1-5C", 4, 0),
    ("nvidia-700", "GRID A100-2-10C", 4, 0),
    ("nvidia-701", "GRID A100-3-20C", 4, 0),
]
A100_81_TYPES = [
    ("nvidia-471", "GRID A100-4C", 3, 1),
    ("nvidia-472", "GRID A100-5C", 0, 0),
    ("nvidia-474", "GRID A100-10C", 0, 0),
]
# The A100-40GB's GPU-instance profiles (nvml.json), in NVML's profile order:
# (profile, max instances, MiB).
A100_PROFILES = [
    ("1g.5gb", 7, 4864),
    ("2g.10gb", 3, 9856),
    ("3g.20gb", 2, 19968),
    ("4g.20gb", 1, 19968),
    ("7g.40gb", 1, 40192),
    ("1g.5gb+me", 1, 4864),
    ("1g.10gb", 4, 9856),
]


def mig_services(instances: dict[str, int], available: dict[str, int] | None) -> list[dict]:
    found = []
    for profile, most, mib in A100_PROFILES:
        details = {"instances": str(instances.get(profile, 0)), "max_instances": str(most)}
        if available is not None:
            details["available"] = str(available[profile])
        details["memory_mib"] = str(mib)
        enabled = bool(instances.get(profile))
        found.append({"kind": "mig", "name": profile, "enabled": enabled, "details": details})
    return found


# MIG enabled on 41:00.0: two 1g.5gb and one 3g.20gb, and the room left beside them.
A100_41_MIG = mig_services(
    {"1g.5gb": 2, "3g.20gb": 1},
    {
        "1g.5gb": 2,
        "2g.10gb": 1,
        "3g.20gb": 0,
        "4g.20gb": 0,
        "7g.40gb": 0,
        "1g.5gb+me": 1,
        "1g.10gb": 1,
    },
)
# MIG disabled on 81:00.0: what it could be cut into, no room to count.
A100_81_MIG = mig_services({}, None)


def gpu(bus, numa, model, product_id, firmware, board, deployables, services=()) -> dict:
    return {
        **({"services": list(services)} if services else {}),
        "type": "GPU",
        "vendor": "10de",
        "model": model,
        "driver_name": "nvidia_gpu",
        "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci(bus)},
        "pci_address": f"0000:{bus}:00.0",
        "numa_node": numa,
        **topology("nvidia-gpu-host", f"0000:{bus}:00.0"),
        "firmware_version": firmware,
        "std_board_info": {"product_id": product_id, "controller": "3D controller"},
        "vendor_board_info": board,
        "deployables": deployables,
    }


def pgpu(bus: str, *traits: str) -> dict:
    return {
        "name": f"{HOSTNAME}_0000:{bus}:00.0",
        "num_accelerators": 1,
        "driver_name": "nvidia_gpu",
        "attributes": attributes("PGPU", *traits),
        "attach_handles": [{"attach_type": "PCI", "attach_info": pci(bus)}],
    }


def mdev(parent: str, vgpu_type: str, mark, mdev_uuid: str) -> dict:
    domain, bus, rest = parent.split(":")
    device, function = rest.split(".")
    return {
        "attach_type": "MDEV",
        "attach_info": {
            "domain": domain,
            "bus": bus,
            "device": device,
            "function": function,
            "asked_type": vgpu_type,
            "vgpu_mark": f"{vgpu_type}_{mark}",
            "mdev_uuid": mdev_uuid,
        },
    }


def mig(profile: str, rc: str, handles: list[tuple[str, int]]) -> dict:
    return {
        "name": f"{HOSTNAME}_0000:41:00.0_mig_{profile}",
        "num_accelerators": len(handles),
        "driver_name": "nvidia_gpu",
        "attributes": attributes(
            rc,
            "OWNER_CYBORG",
            "CUSTOM_NVIDIA_20B0",
            "CUSTOM_NVIDIA_MIG_CAPABLE",
            extra=[("mig_profile", profile)],
        ),
        "attach_handles": [
            {
                "attach_type": "MIG",
                "attach_info": {
                    **pci("41"),
                    "mig_uuid": mig_uuid,
                    "profile": profile,
                    "gpu_instance_id": str(gi),
                    "compute_instance_id": "0",
                },
            }
            for mig_uuid, gi in handles
        ],
    }


T4_3B = gpu(
    "3b",
    0,
    "Tesla T4",
    "1eb8",
    "90.04.96.00.02",
    {
        "kernel_driver": "nvidia",
        "serial": "1322721036527",
        "uuid": "GPU-5c1a0f3e-7b2d-4f0e-9a51-2f0c6d7e8a11",
    },
    [pgpu("3b", "OWNER_CYBORG", "CUSTOM_NVIDIA_1EB8")],
    vgpu_services(T4_3B_TYPES),  # vGPU not configured: its mdev types all the same
)

A100_41 = gpu(
    "41",
    0,
    "NVIDIA A100-SXM4-40GB",
    "20b0",
    "92.00.45.00.06",
    {
        "kernel_driver": "nvidia",
        "serial": "1564720004861",
        "uuid": "GPU-8d2e4b61-3c0a-4e7f-b2d9-61a4f0c3e5d2",
        "mig_mode": "enabled",
        "mig_mode_pending": "enabled",
        "sriov_totalvfs": "16",
        "sriov_numvfs": "4",
    },
    [
        mig(
            "1g.5gb",
            "CUSTOM_NVIDIA_MIG_1G_5GB",
            [
                ("MIG-6a7b8c9d-0e1f-5a2b-9c3d-4e5f6a7b8c9d", 9),
                ("MIG-0b1c2d3e-4f5a-5b6c-8d7e-9f0a1b2c3d4e", 10),
            ],
        ),
        mig(
            "3g.20gb",
            "CUSTOM_NVIDIA_MIG_3G_20GB",
            [("MIG-1f6b3a2c-9e4d-5b7a-8c0f-2d3e4f5a6b7c", 2)],
        ),
    ],
    vgpu_services(A100_41_TYPES) + A100_41_MIG,
)

A100_81_BOARD = {
    "kernel_driver": "nvidia",
    "serial": "1564720011203",
    "uuid": "GPU-c4d5e6f7-a8b9-4c0d-9e1f-2a3b4c5d6e7f",
    "mig_mode": "disabled",
    "mig_mode_pending": "disabled",
    "sriov_totalvfs": "16",
    "sriov_numvfs": "4",
}

A100_81_VGPU = gpu(
    "81",
    1,
    "NVIDIA A100-SXM4-40GB",
    "20b0",
    "92.00.45.00.06",
    A100_81_BOARD,
    [
        {
            "name": f"{HOSTNAME}_0000:81:00.0",
            # SR-IOV vGPU: one instance per VF, offered once its mdev exists: on VF .5.
            "num_accelerators": 1,
            "driver_name": "nvidia_gpu",
            "attributes": attributes(
                "VGPU",
                "OWNER_CYBORG",
                "CUSTOM_NVIDIA_20B0_A100_4C",
                "CUSTOM_NVIDIA_MIG_CAPABLE",
                extra=[("vgpu_type", "nvidia-471"), ("vgpu_type_name", "GRID A100-4C")],
            ),
            "attach_handles": [
                mdev("0000:81:00.5", "nvidia-471", 0, slot("0000:81:00.5", "nvidia-471", 0))
            ],
        }
    ],
    vgpu_services(A100_81_TYPES, "nvidia-471") + A100_81_MIG,
)

T4_AF_VGPU = gpu(
    "af",
    1,
    "Tesla T4",
    "1eb8",
    "90.04.96.00.02",
    {
        "kernel_driver": "nvidia",
        "serial": "1322721036998",
        "uuid": "GPU-0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b",
    },
    [
        {
            "name": f"{HOSTNAME}_0000:af:00.0",
            # The one existing mdev; the 15 instances still available have none.
            "num_accelerators": 1,
            "driver_name": "nvidia_gpu",
            "attributes": attributes(
                "VGPU",
                "OWNER_CYBORG",
                "CUSTOM_NVIDIA_1EB8_T4_1B",
                extra=[("vgpu_type", "nvidia-223"), ("vgpu_type_name", "GRID T4-1B")],
            ),
            "attach_handles": [mdev("0000:af:00.0", "nvidia-223", FOREIGN_MDEV, FOREIGN_MDEV)],
        }
    ],
    vgpu_services(T4_AF_TYPES, "nvidia-223"),
)


def test_recorded_host_with_vgpu_configured_gives_exactly_these_devices():
    found = discover(nvml=recorded_nvml(), vgpu_types=VGPU)
    assert list(found) == ["0000:3b:00.0", "0000:41:00.0", "0000:81:00.0", "0000:af:00.0"]
    assert found["0000:3b:00.0"] == T4_3B
    assert found["0000:41:00.0"] == A100_41
    assert found["0000:81:00.0"] == A100_81_VGPU
    assert found["0000:af:00.0"] == T4_AF_VGPU


def test_generated_mdev_uuids_are_pinned():
    # The UUIDs on-demand creation will give mdevs, slot by slot: a change of the scheme
    # would give the handles of mdevs made with the old one new identities.
    assert slot("0000:af:00.0", "nvidia-223", 0) == "cecf2c48-a41f-5d0a-8480-05a003c33099"
    (existing,) = discover(nvml=recorded_nvml(), vgpu_types=VGPU)["0000:81:00.0"]["deployables"][0][
        "attach_handles"
    ]
    # The mdev recorded on VF .5 was created with Exosuit's slot 0 UUID: marked slot 0.
    assert existing["attach_info"]["mdev_uuid"] == "39365e94-6198-5a03-b6be-c65392a8f286"
    assert existing["attach_info"]["vgpu_mark"] == "nvidia-471_0"
    assert os.path.islink(
        os.path.join(HOST, "sys/bus/mdev/devices", existing["attach_info"]["mdev_uuid"])
    )


def test_without_vgpu_configuration_gpus_are_whole_or_their_mig_instances():
    found = discover(nvml=recorded_nvml())
    assert found["0000:3b:00.0"] == T4_3B
    assert found["0000:41:00.0"] == A100_41
    assert found["0000:81:00.0"]["deployables"] == [
        pgpu("81", "OWNER_CYBORG", "CUSTOM_NVIDIA_20B0", "CUSTOM_NVIDIA_MIG_CAPABLE")
    ]
    # af:00.0 carries an mdev made outside Exosuit: not offered whole, and says why.
    assert found["0000:af:00.0"]["deployables"] == []
    assert found["0000:af:00.0"]["vendor_board_info"]["not_offered_reason"] == (
        "not offered whole for passthrough: it carries 1 mdev Exosuit did not make: "
        f"{FOREIGN_MDEV} (nvidia-223); remove them, or offer the GPU as vGPUs of their type "
        "(a partition layout, or [nvidia_gpu] vgpu_types)"
    )
    # 81:00.0's mdev has an Exosuit slot UUID: Exosuit's own, the GPU is offered whole.
    assert "not_offered_reason" not in found["0000:81:00.0"]["vendor_board_info"]
    # vGPU not configured: the mdev types are still listed, none enabled.
    assert found["0000:af:00.0"]["services"] == vgpu_services(T4_AF_TYPES)
    assert found["0000:81:00.0"]["services"] == vgpu_services(A100_81_TYPES) + A100_81_MIG


def test_a_gpu_is_offered_whole_again_once_the_mdev_made_elsewhere_is_gone(tmp_path):
    root = copy_host(tmp_path)
    os.unlink(os.path.join(root, "sys", "bus", "mdev", "devices", FOREIGN_MDEV))
    found = discover(root, nvml=recorded_nvml())["0000:af:00.0"]
    assert found["deployables"] == [pgpu("af", "OWNER_CYBORG", "CUSTOM_NVIDIA_1EB8")]
    assert "not_offered_reason" not in found["vendor_board_info"]


def test_an_mdev_the_install_step_made_keeps_the_gpu_offered_whole(tmp_path):
    root = copy_host(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    (state / "mdevs.json").write_text(
        json.dumps(
            {
                "version": 1,
                "created": {
                    FOREIGN_MDEV: {
                        "gpu": "0000:af:00.0",
                        "parent": "0000:af:00.0",
                        "type": "nvidia-223",
                    }
                },
            }
        )
    )
    context = DriverContext(
        hostname=HOSTNAME, sysfs_root=root, runner=recorded_runner(), state_dir=str(state)
    )
    (gpu,) = [
        d
        for d in NvidiaGpuDriver(context, nvml=recorded_nvml()).discover()
        if d.pci_address == "0000:af:00.0"
    ]
    assert [d.resource_class for d in gpu.deployables] == ["PGPU"]


def test_a_gpu_configured_for_vgpu_is_not_also_offered_whole():
    for address in VGPU:
        deployables = discover(nvml=recorded_nvml(), vgpu_types=VGPU)[address]["deployables"]
        assert [d["attributes"][0]["value"] for d in deployables] == ["VGPU"]
        assert {h["attach_type"] for d in deployables for h in d["attach_handles"]} == {"MDEV"}


def test_sriov_virtual_functions_and_other_vendors_are_not_gpus():
    found = discover(nvml=recorded_nvml())
    vfs = {f"0000:{bus}:00.{fn}" for bus in ("41", "81") for fn in range(4, 8)}
    # The VFs are there, NVIDIA 3D controllers like their PFs …
    for vf in vfs:
        assert os.path.islink(os.path.join(HOST, "sys/bus/pci/devices", vf, "physfn"))
    # … but only the four physical GPUs are reported (the ASPEED VGA is not NVIDIA's).
    assert set(found) == {"0000:3b:00.0", "0000:41:00.0", "0000:81:00.0", "0000:af:00.0"}
    handles = [
        h["attach_info"]
        for d in found.values()
        for dep in d["deployables"]
        for h in dep["attach_handles"]
        if h["attach_type"] == "PCI"
    ]
    assert all(h["function"] == "0" for h in handles)


def copy_host(tmp_path) -> str:
    root = str(tmp_path / "host")
    shutil.copytree(HOST, root, symlinks=True)
    return root


def type_dir(root: str, parent: str, vgpu_type: str) -> str:
    return os.path.join(root, "sys/bus/pci/devices", parent, "mdev_supported_types", vgpu_type)


def create_mdev(root: str, parent: str, vgpu_type: str, mdev_uuid: str) -> None:
    """What the kernel shows after `echo <uuid> > .../<type>/create`: the mdev under its
    parent (with its mdev_type link), in the type's devices/ and on the mdev bus, links
    relative as the fixture's are."""
    sys_root = os.path.join(root, "sys")
    parent_dir = os.path.realpath(os.path.join(sys_root, "bus/pci/devices", parent))
    types = type_dir(root, parent, vgpu_type)
    os.makedirs(os.path.join(types, "devices"), exist_ok=True)
    os.makedirs(os.path.join(parent_dir, mdev_uuid))
    os.symlink(
        os.path.join("..", "mdev_supported_types", vgpu_type),
        os.path.join(parent_dir, mdev_uuid, "mdev_type"),
    )
    os.symlink(os.path.join("..", "..", "..", mdev_uuid), os.path.join(types, "devices", mdev_uuid))
    bus = os.path.join(sys_root, "bus/mdev/devices")
    target = os.path.relpath(os.path.join(parent_dir, mdev_uuid), bus)
    os.symlink(target, os.path.join(bus, mdev_uuid))
    with open(os.path.join(types, "available_instances")) as f:
        available = int(f.read())
    with open(os.path.join(types, "available_instances"), "w") as f:
        f.write(f"{available - 1}\n")


def vgpu_handles(root: str) -> list[dict]:
    found = discover(root, nvml=recorded_nvml(), vgpu_types=VGPU)
    return found["0000:af:00.0"]["deployables"][0]["attach_handles"]


def test_instances_without_an_mdev_are_not_offered():
    """Regression (issue 14): the T4 offered 15 MDEV handles (and VGPU inventory) for
    mdevs that did not exist, as nothing creates one at bind yet."""
    with open(
        os.path.join(type_dir(HOST, "0000:af:00.0", "nvidia-223"), "available_instances")
    ) as f:
        assert f.read() == "15\n"
    (deployable,) = discover(nvml=recorded_nvml(), vgpu_types=VGPU)["0000:af:00.0"]["deployables"]
    assert deployable["num_accelerators"] == 1
    assert [h["attach_info"]["mdev_uuid"] for h in deployable["attach_handles"]] == [FOREIGN_MDEV]
    # Every handle offered is an mdev on the mdev bus.
    for device in discover(nvml=recorded_nvml(), vgpu_types=VGPU).values():
        for deployable in device["deployables"]:
            for handle in deployable["attach_handles"]:
                if handle["attach_type"] == "MDEV":
                    uuid_ = handle["attach_info"]["mdev_uuid"]
                    assert os.path.isdir(os.path.join(HOST, "sys/bus/mdev/devices", uuid_))


def test_an_mdev_gone_from_the_mdev_bus_is_not_offered(tmp_path):
    root = copy_host(tmp_path)
    os.unlink(os.path.join(root, "sys/bus/mdev/devices", FOREIGN_MDEV))
    (deployable,) = discover(root, nvml=recorded_nvml(), vgpu_types=VGPU)["0000:af:00.0"][
        "deployables"
    ]
    assert (deployable["num_accelerators"], deployable["attach_handles"]) == (0, [])


def test_an_mdev_created_with_a_slot_uuid_is_offered_marked_with_its_slot(tmp_path):
    root = copy_host(tmp_path)
    before = vgpu_handles(root)
    created = slot("0000:af:00.0", "nvidia-223", 3)
    create_mdev(root, "0000:af:00.0", "nvidia-223", created)
    after = vgpu_handles(root)
    # The handles that were there stay as they were (a handle is known by its attach_info).
    assert after == [mdev("0000:af:00.0", "nvidia-223", 3, created), *before]
    with open(
        os.path.join(type_dir(root, "0000:af:00.0", "nvidia-223"), "available_instances")
    ) as f:
        assert f.read() == "14\n"


def test_an_mdev_made_elsewhere_is_offered_under_its_own_uuid(tmp_path):
    root = copy_host(tmp_path)
    before = vgpu_handles(root)
    other = "0d7c1b0e-2b8f-4a67-9f1e-7d9a5c3b2e10"
    create_mdev(root, "0000:af:00.0", "nvidia-223", other)
    after = vgpu_handles(root)
    # Slots first, then mdevs made elsewhere by UUID.
    assert after == [mdev("0000:af:00.0", "nvidia-223", other, other), *before]


def test_without_nvidia_smi_and_nvml_gpus_are_still_found_without_firmware():
    runner = RecordedRunner({})  # no recording: as on a host without nvidia-smi
    found = discover(runner=runner, nvml=None)
    assert runner.calls == [SMI, SMI_MIG]
    assert found["0000:3b:00.0"] == gpu(
        "3b",
        0,
        "NVIDIA 10de:1eb8",
        "1eb8",
        None,
        {"kernel_driver": "nvidia"},
        [pgpu("3b", "OWNER_CYBORG", "CUSTOM_NVIDIA_1EB8")],
        vgpu_services(T4_3B_TYPES),  # sysfs says them: no tool needed
    )
    # Without NVML no MIG profile is known: only the vGPU types are listed.
    assert [s["kind"] for s in found["0000:41:00.0"]["services"]] == ["vgpu"] * 3
    # Unknown MIG mode: the A100s are offered whole, without the MIG trait.
    assert found["0000:41:00.0"]["deployables"] == [
        pgpu("41", "OWNER_CYBORG", "CUSTOM_NVIDIA_20B0")
    ]
    assert found["0000:41:00.0"]["vendor_board_info"] == {
        "kernel_driver": "nvidia",
        "sriov_totalvfs": "16",
        "sriov_numvfs": "4",
    }


def test_without_nvidia_smi_nvml_gives_firmware_serial_and_name():
    found = discover(runner=RecordedRunner({}), nvml=recorded_nvml(), vgpu_types=VGPU)
    assert found == {
        "0000:3b:00.0": T4_3B,
        "0000:41:00.0": A100_41,
        "0000:81:00.0": A100_81_VGPU,
        "0000:af:00.0": T4_AF_VGPU,
    }


def test_a_failing_nvidia_smi_is_the_same_as_none():
    failing = {
        "returncode": 9,
        "stdout": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    }
    runner = RecordedRunner({" ".join(SMI): failing, " ".join(SMI_MIG): failing})
    found = discover(runner=runner, nvml=None)
    assert found["0000:3b:00.0"]["firmware_version"] is None
    assert found["0000:3b:00.0"]["model"] == "NVIDIA 10de:1eb8"


def test_without_nvml_mig_mode_comes_from_nvidia_smi_and_no_instances_are_offered():
    found = discover(nvml=None)
    a100 = found["0000:41:00.0"]
    assert a100["firmware_version"] == "92.00.45.00.06"
    assert a100["vendor_board_info"] == {
        "kernel_driver": "nvidia",
        "serial": "1564720004861",
        "mig_mode": "enabled",
        "mig_mode_pending": "enabled",
        "sriov_totalvfs": "16",
        "sriov_numvfs": "4",
    }
    # A partitioned GPU is never offered whole; its instances need NVML.
    assert a100["deployables"] == []
    assert found["0000:81:00.0"]["deployables"] == [
        pgpu("81", "OWNER_CYBORG", "CUSTOM_NVIDIA_20B0", "CUSTOM_NVIDIA_MIG_CAPABLE")
    ]
    assert found["0000:3b:00.0"]["deployables"] == T4_3B["deployables"]


def test_nvml_that_fails_to_initialise_is_the_same_as_none():
    failing = RecordedNvml({"error": "Driver Not Loaded"})
    with pytest.raises(NvmlUnavailable):
        failing.gpus()
    assert discover(nvml=failing) == discover(nvml=None)


def test_a_recorded_host_uses_its_recorded_nvml_and_never_this_machines():
    context = DriverContext(hostname=HOSTNAME, sysfs_root=HOST, runner=recorded_runner())
    found = {d.pci_address: d.to_snapshot() for d in NvidiaGpuDriver(context).discover()}
    assert found["0000:41:00.0"] == A100_41
    context = DriverContext(
        hostname=HOSTNAME, sysfs_root=HOST, runner=recorded_runner(), settings={"use_nvml": False}
    )
    found = {d.pci_address: d.to_snapshot() for d in NvidiaGpuDriver(context).discover()}
    assert found["0000:41:00.0"]["deployables"] == []


def test_a_recorded_host_without_nvml_json_has_no_nvml(tmp_path):
    root = copy_host(tmp_path)
    os.remove(os.path.join(root, "nvml.json"))
    context = DriverContext(hostname=HOSTNAME, sysfs_root=root, runner=recorded_runner())
    found = {d.pci_address: d.to_snapshot() for d in NvidiaGpuDriver(context).discover()}
    assert found == discover(nvml=None)


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA driver")
def test_the_real_nvml_is_absent_on_a_machine_without_the_nvidia_driver():
    assert open_pynvml() is None


def test_a_host_without_nvidia_gpus_runs_no_tool():
    runner = recorded_runner()
    root = os.path.join(FIXTURES, "intel-qat-host")
    assert driver(root, runner, None, vgpu_types={}).discover() == []
    assert runner.calls == []


@pytest.mark.parametrize(
    "vgpu_types, message",
    [
        (
            {"0000:af:00.0": "nvidia-999"},
            "GPU 0000:af:00.0 does not support vGPU type 'nvidia-999'; it supports: "
            "nvidia-223 (GRID T4-1B), nvidia-224 (GRID T4-2B), nvidia-230 (GRID T4-1Q), "
            "nvidia-232 (GRID T4-4Q), nvidia-234 (GRID T4-16Q)",
        ),
        (
            {"0000:81:00.0": "nvidia-223"},
            "GPU 0000:81:00.0 does not support vGPU type 'nvidia-223'; it supports: "
            "nvidia-471 (GRID A100-4C), nvidia-472 (GRID A100-5C), nvidia-474 (GRID A100-10C)",
        ),
        ({"0000:03:00.0": "nvidia-223"}, "there is no NVIDIA GPU at 0000:03:00.0 on this host"),
        ({"0000:5e:00.0": "nvidia-223"}, "there is no NVIDIA GPU at 0000:5e:00.0 on this host"),
        (
            {"0000:81:00.5": "nvidia-471"},
            "0000:81:00.5 is an SR-IOV virtual function; configure its GPU, 0000:81:00.0",
        ),
    ],
    ids=["unsupported-type", "type-of-another-gpu", "not-nvidia", "absent", "a-vf"],
)
def test_misconfigured_vgpu_types_fail_discovery_clearly(vgpu_types, message):
    with pytest.raises(InvalidVgpuConfig) as error:
        driver(nvml=None, vgpu_types=vgpu_types).discover()
    assert str(error.value) == f"[nvidia_gpu] vgpu_types: {message}"


@pytest.mark.parametrize(
    "vgpu_types, message",
    [
        ({"af:00.0": "nvidia-223"}, "'af:00.0' is not a PCI address such as 0000:af:00.0"),
        (
            {"0000:AF:00.0": "nvidia-223", "0000:af:00.0": "nvidia-224"},
            "0000:af:00.0 is given more than one vGPU type",
        ),
        ({"0000:af:00.0": " "}, "no vGPU type for 0000:af:00.0"),
        ("0000:af:00.0=nvidia-223,0000:af:00.0=nvidia-224", "Duplicate key 0000:af:00.0"),
    ],
)
def test_malformed_vgpu_types_are_refused_at_start(vgpu_types, message):
    with pytest.raises(InvalidVgpuConfig, match=re.escape(message)):
        driver(nvml=None, vgpu_types=vgpu_types)


@pytest.mark.parametrize(
    "mdevs, parsed",
    [
        (None, {}),
        ([], {}),
        ("", {}),
        (["nvidia-223:4"], {"nvidia-223": 4}),
        ([" nvidia-223 : 4 ", "nvidia-471:0"], {"nvidia-223": 4, "nvidia-471": 0}),
        ("nvidia-223:4,nvidia-471:2", {"nvidia-223": 4, "nvidia-471": 2}),
    ],
)
def test_the_mdevs_option_is_type_count_pairs(mdevs, parsed):
    assert parse_mdevs(mdevs) == parsed


@pytest.mark.parametrize(
    "mdevs, message",
    [
        (["nvidia-223"], "'nvidia-223' is not TYPE:COUNT, such as nvidia-223:4"),
        ([":4"], "':4' is not TYPE:COUNT"),
        (["../x:4"], "'../x:4' is not TYPE:COUNT"),
        (["nvidia-223:four"], "the count of nvidia-223 ('four') is not a whole number"),
        (["nvidia-223:-1"], "the count of nvidia-223 ('-1') is not a whole number"),
        (["nvidia-223:1", "nvidia-223:2"], "nvidia-223 is given more than once"),
        (
            ["nvidia-224:2"],
            "vgpu_types gives no GPU the type nvidia-224; mdevs are created only on GPUs "
            "offered as vGPUs of their type",
        ),
    ],
)
def test_malformed_mdevs_are_refused_at_start(mdevs, message):
    with pytest.raises(InvalidVgpuConfig, match=re.escape(f"[nvidia_gpu] mdevs: {message}")):
        driver(nvml=None, vgpu_types=VGPU, mdevs=mdevs)


def test_mdevs_come_from_the_config_file(tmp_path):
    config = tmp_path / "exosuit.conf"
    config.write_text(
        "[nvidia_gpu]\n"
        "vgpu_types = 0000:af:00.0=nvidia-223, 0000:81:00.0=nvidia-471\n"
        "mdevs = nvidia-223:4, nvidia-471:3\n"
    )
    settings = driver_settings(make_conf([str(config)]), "nvidia_gpu")
    assert settings["mdevs"] == ["nvidia-223:4", "nvidia-471:3"]
    assert parse_mdevs(settings["mdevs"]) == {"nvidia-223": 4, "nvidia-471": 3}
    context = DriverContext(hostname=HOSTNAME, sysfs_root=HOST, settings=settings)
    assert isinstance(load_driver("nvidia_gpu", context), NvidiaGpuDriver)


def test_a_gpu_without_mdev_types_cannot_be_a_vgpu(tmp_path):
    root = copy_host(tmp_path)
    shutil.rmtree(os.path.join(root, "sys/bus/pci/devices/0000:3b:00.0/mdev_supported_types"))
    driver_link = os.path.join(root, "sys/bus/pci/devices/0000:3b:00.0/driver")
    os.remove(driver_link)
    os.symlink("../../../../bus/pci/drivers/vfio-pci", driver_link)
    with pytest.raises(
        InvalidVgpuConfig,
        match=re.escape("GPU 0000:3b:00.0 offers no mediated device types (bound to vfio-pci;"),
    ):
        driver(root, nvml=None, vgpu_types={"0000:3b:00.0": "nvidia-223"}).discover()


def test_the_agent_reports_a_misconfiguration_as_a_driver_error():
    bad = driver(nvml=recorded_nvml(), vgpu_types={"0000:af:00.0": "nvidia-999"})
    snapshot = build_snapshot(HOSTNAME, [bad])
    assert snapshot["devices"] == []
    assert snapshot["driver_errors"] == [
        {
            "driver": "nvidia_gpu",
            "error": "InvalidVgpuConfig: [nvidia_gpu] vgpu_types: GPU 0000:af:00.0 does not "
            "support vGPU type 'nvidia-999'; it supports: nvidia-223 (GRID T4-1B), "
            "nvidia-224 (GRID T4-2B), nvidia-230 (GRID T4-1Q), nvidia-232 (GRID T4-4Q), "
            "nvidia-234 (GRID T4-16Q)",
        }
    ]


def test_options_come_from_the_nvidia_gpu_config_group(tmp_path):
    config = tmp_path / "exosuit.conf"
    config.write_text(
        "[nvidia_gpu]\n"
        "vgpu_types = 0000:af:00.0=nvidia-223, 0000:81:00.0=nvidia-471\n"
        "nvidia_smi =\n"
    )
    settings = driver_settings(make_conf([str(config)]), "nvidia_gpu")
    assert settings == {
        "vgpu_types": VGPU,
        "nvidia_smi": "",
        "use_nvml": True,
        "bind_driver": "",
        "mdevs": [],
    }
    runner = recorded_runner()
    context = DriverContext(hostname=HOSTNAME, sysfs_root=HOST, runner=runner, settings=settings)
    loaded = load_driver("nvidia_gpu", context)
    assert isinstance(loaded, NvidiaGpuDriver)
    found = {d.pci_address: d.to_snapshot() for d in loaded.discover()}
    assert runner.calls == []  # nvidia_smi empty: never run
    assert found["0000:af:00.0"]["deployables"] == T4_AF_VGPU["deployables"]


def test_snapshot_matches_the_schema_and_uses_valid_placement_names():
    snapshot = build_snapshot(HOSTNAME, [driver(nvml=recorded_nvml(), vgpu_types=VGPU)])
    jsonschema.validate(snapshot, schemas.inventory_schema())
    assert snapshot["driver_errors"] == []
    standard_traits = set(os_traits.get_traits())
    for device in snapshot["devices"]:
        for deployable in device["deployables"]:
            for attribute in deployable["attributes"]:
                value = attribute["value"]
                if attribute["key"] == "rc":
                    assert value in os_resource_classes.STANDARDS or re.fullmatch(
                        r"CUSTOM_[A-Z0-9_]+", value
                    ), value
                elif attribute["key"].startswith("trait"):
                    assert value in standard_traits or re.fullmatch(r"CUSTOM_[A-Z0-9_]+", value), (
                        value
                    )


def test_discovery_is_repeatable_and_reads_only():
    first = driver(nvml=recorded_nvml(), vgpu_types=VGPU)
    assert first.discover() == first.discover()


def test_nvml_and_nvidia_smi_values_are_parsed():
    assert bus_id_to_address("00000000:3B:00.0") == "0000:3b:00.0"
    assert bus_id_to_address(b"00000001:AF:00.1") == "0001:af:00.1"
    assert mig_profile("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == "1g.5gb"
    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb") == "1c.3g.40gb"
    assert mig_profile("A100-SXM4-40GB MIG 1g.10gb+me") == "1g.10gb+me"
    runner = RecordedRunner(
        {
            " ".join(SMI): {
                "stdout": "garbage line\n\n00000000:3B:00.0, [N/A], [N/A], Tesla T4, rev, 2\n"
            },
            " ".join(SMI_MIG): {"stdout": ""},
        }
    )
    found = discover(runner=runner, nvml=None)
    # Fields after the third comma belong to the name; [N/A] is no value.
    assert found["0000:3b:00.0"]["model"] == "Tesla T4, rev, 2"
    assert found["0000:3b:00.0"]["firmware_version"] is None
    assert "serial" not in found["0000:3b:00.0"]["vendor_board_info"]


class _RecordedPynvml:
    """Stands in for the third-party nvidia-ml-py module (absent here): it answers
    pynvml's calls, with pynvml's types, from an NVML recording."""

    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPU_INSTANCE_PROFILE_COUNT = 10

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value

    class _Pci:
        def __init__(self, bus_id):
            self.busId = bus_id.encode()  # a ctypes char array reads as bytes

    class _Memory:
        def __init__(self, total, used=None):
            self.total = total
            self.used = used

    class _Utilization:
        def __init__(self, gpu, memory):
            self.gpu = gpu
            self.memory = memory

    class _ProfileInfo:  # nvmlGpuInstanceProfileInfo_v2_t: name is a char array (bytes)
        def __init__(self, raw):
            self.id = raw["id"]
            self.instanceCount = raw["instance_count"]
            self.memorySizeMB = raw["memory_size_mb"]
            self.name = raw["name"].encode()

    def __init__(self, recording):
        self.devices = recording["devices"]
        self.initialised = 0

    def nvmlInit(self):
        self.initialised += 1

    def nvmlShutdown(self):
        self.initialised -= 1

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def _answer(self, handle, key):
        kind, index, *mig = handle
        raw = self.devices[index] if kind == "gpu" else self.devices[index]["mig_devices"][mig[0]]
        if raw.get(key) is None:
            raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return raw[key]

    def nvmlDeviceGetPciInfo(self, handle):
        return self._Pci(self._answer(handle, "pci_bus_id"))

    def nvmlDeviceGetName(self, handle):
        return self._answer(handle, "name")

    def nvmlDeviceGetUUID(self, handle):
        return self._answer(handle, "uuid")

    def nvmlDeviceGetSerial(self, handle):
        return self._answer(handle, "serial")

    def nvmlDeviceGetVbiosVersion(self, handle):
        return self._answer(handle, "vbios_version")

    def nvmlDeviceGetMigMode(self, handle):
        return list(self._answer(handle, "mig_mode"))

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        if index >= len(self.devices[handle[1]]["mig_devices"]):
            raise self.NVMLError(self.NVML_ERROR_NOT_FOUND)
        return ("mig", handle[1], index)

    def nvmlDeviceGetGpuInstanceId(self, handle):
        return self._answer(handle, "gpu_instance_id")

    def nvmlDeviceGetComputeInstanceId(self, handle):
        return self._answer(handle, "compute_instance_id")

    def nvmlDeviceGetMemoryInfo(self, handle):
        if handle[0] == "mig":
            return self._Memory(self._answer(handle, "memory_total"))
        memory = self._answer(handle, "memory")
        return self._Memory(memory["total"], memory["used"])

    def nvmlDeviceGetUtilizationRates(self, handle):
        utilization = self._answer(handle, "utilization")
        return self._Utilization(utilization["gpu"], utilization["memory"])

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        for index, raw in enumerate(self.devices):
            if bus_id_to_address(raw["pci_bus_id"]) == bus_id:
                return ("gpu", index)
        raise self.NVMLError(self.NVML_ERROR_NOT_FOUND)

    def _profiles(self, handle):
        return {p["profile"]: p for p in self.devices[handle[1]].get("gpu_instance_profiles", [])}

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle, profile, version=2):
        if profile >= self.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise self.NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        raw = self._profiles(handle).get(profile)
        if raw is None:
            raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self._ProfileInfo(raw)

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle, profile_id):
        for raw in self._profiles(handle).values():
            if raw["id"] == profile_id and raw["remaining_capacity"] is not None:
                return raw["remaining_capacity"]
        raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)  # as NVML with MIG disabled


def test_the_pynvml_implementation_reads_what_the_recording_holds():
    recording = recorded_nvml().recording
    library = _RecordedPynvml(recording)
    assert PynvmlNvml(library).gpus() == RecordedNvml(recording).gpus()
    for device in recording["devices"]:
        address = bus_id_to_address(device["pci_bus_id"])
        assert PynvmlNvml(library).usage(address) == RecordedNvml(recording).usage(address)
    assert PynvmlNvml(library).usage("0000:99:00.0") is None
    assert library.initialised == 0  # every nvmlInit is paired with nvmlShutdown
    a100 = RecordedNvml(recording).gpus()["0000:41:00.0"]
    assert [(m.profile, m.gpu_instance_id, m.memory_mib) for m in a100.mig_instances] == [
        ("3g.20gb", 2, 20224),
        ("1g.5gb", 9, 4864),
        ("1g.5gb", 10, 4864),
    ]


@pytest.mark.parametrize(
    ("address", "types"),
    [
        ("0000:3b:00.0", T4_3B_TYPES),
        ("0000:af:00.0", T4_AF_TYPES),
        ("0000:41:00.0", A100_41_TYPES),  # on its SR-IOV VFs
        ("0000:81:00.0", A100_81_TYPES),
    ],
)
def test_a_gpu_whose_vgpu_is_not_configured_still_lists_its_mdev_types(address, types):
    for nvml in (None, recorded_nvml()):
        services = discover(nvml=nvml)[address]["services"]
        assert [s for s in services if s["kind"] == "vgpu"] == vgpu_services(types)
    configured = discover(nvml=None, vgpu_types=VGPU)[address]["services"]
    assert [s["name"] for s in configured if s["enabled"]] == (
        [VGPU[address]] if address in VGPU else []
    )


def test_mig_profiles_are_listed_when_nvml_is_there_and_mig_capable():
    found = discover(nvml=recorded_nvml())
    assert [s for s in found["0000:41:00.0"]["services"] if s["kind"] == "mig"] == A100_41_MIG
    assert [s for s in found["0000:81:00.0"]["services"] if s["kind"] == "mig"] == A100_81_MIG
    # The T4s cannot do MIG: NVML lists no profile for them.
    assert {s["kind"] for s in found["0000:3b:00.0"]["services"]} == {"vgpu"}
