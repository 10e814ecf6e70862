"""nvidia_gpu's partitions (exosuit/drivers/nvidia_partitions.py) on writable copies of
tests/fixtures/nvidia-gpu-host, with the test kernel acting on the mdev sysfs files as
the kernel does: an mdev layout makes and removes mdevs through ``create`` and
``remove``, discovery offers what exists, an mdev the vGPU manager shows in use is never
removed, and what the driver cannot do is refused before anything is written."""

from __future__ import annotations

import json
import os

import pytest

from exosuit.drivers.base import Partitionable, PartitionError
from exosuit.drivers.nvidia_gpu import MDEVS_FILE
from exosuit.drivers.state import read_state
from tests.drivers.fpga_tools import writable_copy
from tests.drivers.kernel import Kernel
from tests.drivers.test_install import (
    A100_SLOT0,
    FOREIGN,
    GPU_HOST,
    creates,
    gpu,
    gpu_driver,
    mdev_handles,
    removes,
    slot_uuid,
)

T4 = "0000:3b:00.0"
A100 = "0000:81:00.0"


@pytest.fixture
def kernel(tmp_path) -> Kernel:
    return Kernel(writable_copy(GPU_HOST, tmp_path))


def _in_use(kernel: Kernel, mdev: str, vm: str) -> None:
    """The NVIDIA vGPU manager names the VM using an mdev in <mdev>/nvidia/vm_name."""
    path = os.path.join(kernel.path("bus", "mdev", "devices", mdev), "nvidia", "vm_name")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(vm)


def test_an_mdev_layout_makes_and_removes_mdevs_and_discovery_follows(kernel, tmp_path):
    driver = gpu_driver(kernel, tmp_path / "state")
    assert isinstance(driver, Partitionable)
    device = gpu(driver, T4)
    assert mdev_handles(device) == []
    layout = {"mdev": {"nvidia-223": 3}}
    assert not driver.partitioned(device, layout)

    driver.partition(device, layout)
    made = [slot_uuid(T4, "nvidia-223", i) for i in range(3)]
    assert kernel.written == creates(*((T4, "nvidia-223", m) for m in made))
    now = gpu(driver, T4)
    assert [m for _, _, m in mdev_handles(now)] == made
    assert now.deployables[0].num_accelerators == 3
    assert driver.partitioned(now, layout)
    # They are remembered as the driver's own: an uninstall removes them too.
    assert set(read_state(str(tmp_path / "state"), MDEVS_FILE)["created"]) == set(made)

    kernel.written.clear()
    driver.partition(now, layout)  # idempotent
    assert kernel.written == []

    # Fewer: the last slots go first.
    driver.partition(now, {"mdev": {"nvidia-223": 1}})
    assert kernel.written == removes(made[2], made[1])
    fewer = gpu(driver, T4)
    assert [m for _, _, m in mdev_handles(fewer)] == made[:1]
    assert driver.partitioned(fewer, {"mdev": {"nvidia-223": 1}})
    assert set(read_state(str(tmp_path / "state"), MDEVS_FILE)["created"]) == {made[0]}


def test_an_mdev_in_use_is_never_removed(kernel, tmp_path):
    driver = gpu_driver(kernel, tmp_path / "state")
    driver.partition(gpu(driver, T4), {"mdev": {"nvidia-223": 2}})
    first, second = (slot_uuid(T4, "nvidia-223", i) for i in range(2))
    _in_use(kernel, second, "web-1")
    kernel.written.clear()
    # One must go: the free one goes, even though the one in use is the last slot.
    driver.partition(gpu(driver, T4), {"mdev": {"nvidia-223": 1}})
    assert kernel.written == removes(first)
    kernel.written.clear()
    with pytest.raises(PartitionError) as refused:
        driver.partition(gpu(driver, T4), {"mdev": {"nvidia-223": 0}})
    assert str(refused.value) == (
        f"GPU {T4}: the layout would remove mdevs in use, so none is removed: {second} (VM web-1)"
    )
    assert kernel.written == []
    assert [m for _, _, m in mdev_handles(gpu(driver, T4))] == [second]


def test_the_layouts_type_wins_over_the_configuration(kernel, tmp_path):
    """A GPU the configuration offers whole is offered as vGPUs once its layout asks
    mdevs, and whole again once the layout asks none."""
    driver = gpu_driver(kernel, tmp_path / "state", vgpu_types={})
    whole = gpu(driver, T4)
    assert [d.resource_class for d in whole.deployables] == ["PGPU"]
    driver.partition(whole, {"mdev": {"nvidia-223": 2}})
    split = gpu(driver, T4)
    assert [d.resource_class for d in split.deployables] == ["VGPU"]
    assert len(mdev_handles(split)) == 2
    # Remembered in the state folder: a new driver (an agent restart) offers the same.
    assert gpu(gpu_driver(kernel, tmp_path / "state", vgpu_types={}), T4) == split

    driver.partition(split, {"mdev": {"nvidia-223": 0}})
    again = gpu(driver, T4)
    assert [d.resource_class for d in again.deployables] == ["PGPU"]
    assert driver.partitioned(again, {"mdev": {}})


def test_on_sriov_vgpu_cards_mdevs_go_on_the_vfs_and_those_there_count(kernel, tmp_path):
    driver = gpu_driver(kernel, tmp_path / "state")
    device = gpu(driver, A100)
    assert [m for _, _, m in mdev_handles(device)] == [A100_SLOT0]
    driver.partition(device, {"mdev": {"nvidia-471": 2}})
    (made,) = [m for _, m in kernel.written]
    assert kernel.written == creates(("0000:81:00.4", "nvidia-471", made))
    assert made == slot_uuid("0000:81:00.4", "nvidia-471", 0)
    assert len(mdev_handles(gpu(driver, A100))) == 2


def test_a_foreign_mdev_goes_only_after_the_drivers_own(kernel, tmp_path):
    af = "0000:af:00.0"
    driver = gpu_driver(kernel, tmp_path / "state")
    driver.partition(gpu(driver, af), {"mdev": {"nvidia-223": 2}})
    (ours,) = [m for _, m in kernel.written]
    kernel.written.clear()
    driver.partition(gpu(driver, af), {"mdev": {"nvidia-223": 1}})
    assert kernel.written == removes(ours)
    assert [m for _, _, m in mdev_handles(gpu(driver, af))] == [FOREIGN]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (
            {"mig": {"1g.5gb": 2}},
            "GPU 0000:3b:00.0 is not in MIG mode; enabling it needs a GPU reset",
        ),
        (
            {"vfs": 2},
            "GPU 0000:3b:00.0: the nvidia_gpu driver partitions a GPU into vGPU mdevs or MIG "
            "instances, not SR-IOV VFs",
        ),
        (
            {"mdev": {"nvidia-223": 1, "nvidia-224": 1}},
            "GPU 0000:3b:00.0: one vGPU type at a time per GPU, not nvidia-223, nvidia-224",
        ),
        ({"mdev": {"nvidia-999": 1}}, "GPU 0000:3b:00.0 has no mediated device type nvidia-999"),
        (
            {"mdev": {"nvidia-223": 17}},
            "GPU 0000:3b:00.0: the layout asks 17 more mdevs of nvidia-223; "
            "available_instances allows 16",
        ),
    ],
    ids=["mig", "vfs", "two-types", "unknown-type", "too-many"],
)
def test_what_the_driver_cannot_do_is_refused_before_anything_is_written(
    kernel, tmp_path, layout, message
):
    driver = gpu_driver(kernel, tmp_path / "state")
    device = gpu(driver, T4)
    with pytest.raises(PartitionError) as refused:
        driver.partition(device, layout)
    assert str(refused.value).startswith(message)
    assert kernel.written == []
    assert gpu(driver, T4) == device
    assert not os.path.exists(tmp_path / "state" / "partitions.json")


# -- MIG instances through NVML (recorded answers the driver acts on) ----------------------

A100_MIG = "0000:41:00.0"  # MIG enabled: a 3g.20gb (GPU instance 2), two 1g.5gb (9, 10)


def mig_handles(device) -> list[tuple[str, str]]:
    """(profile, GPU instance id) of the device's MIG handles."""
    return sorted(
        (h.attach_info["profile"], h.attach_info["gpu_instance_id"])
        for d in device.deployables
        for h in d.attach_handles
        if h.attach_type == "MIG"
    )


def _recording(kernel: Kernel) -> dict:
    with open(os.path.join(kernel.root, "nvml.json")) as f:
        return json.load(f)


def _a100(recording: dict) -> dict:
    return next(d for d in recording["devices"] if d["pci_bus_id"] == "00000000:41:00.0")


def test_a_mig_layout_makes_and_destroys_mig_devices_through_nvml(kernel, tmp_path):
    driver = gpu_driver(kernel, tmp_path / "state")
    device = gpu(driver, A100_MIG)
    assert mig_handles(device) == [("1g.5gb", "10"), ("1g.5gb", "9"), ("3g.20gb", "2")]
    layout = {"mig": {"1g.5gb": 4, "3g.20gb": 1}}
    assert not driver.partitioned(device, layout)

    driver.partition(device, layout)
    four = gpu(driver, A100_MIG)
    assert [p for p, _ in mig_handles(four)] == ["1g.5gb"] * 4 + ["3g.20gb"]
    assert driver.partitioned(four, layout)
    (small,) = [d for d in four.deployables if dict(d.extra_attributes)["mig_profile"] == "1g.5gb"]
    assert small.num_accelerators == 4  # what Placement is offered
    # The recording, as NVML would now answer: capacity taken, written back to its file.
    recorded = _a100(_recording(kernel))
    assert len(recorded["mig_devices"]) == 5
    (profile,) = [p for p in recorded["gpu_instance_profiles"] if p["name"] == "MIG 1g.5gb"]
    assert profile["remaining_capacity"] == 0
    # A new driver (an agent restart) finds them.
    assert mig_handles(gpu(gpu_driver(kernel, tmp_path / "state"), A100_MIG)) == mig_handles(four)

    driver.partition(four, layout)  # idempotent
    assert len(_a100(_recording(kernel))["mig_devices"]) == 5

    driver.partition(four, {"mig": {"1g.5gb": 1}})  # the 3g.20gb and three 1g.5gb go
    one = gpu(driver, A100_MIG)
    assert [p for p, _ in mig_handles(one)] == ["1g.5gb"]
    assert driver.partitioned(one, {"mig": {"1g.5gb": 1}})


def test_a_mig_device_running_processes_is_never_destroyed(kernel, tmp_path):
    recording = _recording(kernel)
    busy = next(m for m in _a100(recording)["mig_devices"] if m["gpu_instance_id"] == 10)
    busy["processes"] = [4242]
    with open(os.path.join(kernel.root, "nvml.json"), "w") as f:
        json.dump(recording, f)
    driver = gpu_driver(kernel, tmp_path / "state")
    device = gpu(driver, A100_MIG)
    # One 1g.5gb must go: the free one (9) goes, not the busy one, though it came last.
    driver.partition(device, {"mig": {"1g.5gb": 1, "3g.20gb": 1}})
    assert mig_handles(gpu(driver, A100_MIG)) == [("1g.5gb", "10"), ("3g.20gb", "2")]
    with pytest.raises(PartitionError) as refused:
        driver.partition(gpu(driver, A100_MIG), {"mig": {"3g.20gb": 1}})
    assert str(refused.value) == (
        f"GPU {A100_MIG}: the layout would destroy MIG devices in use, so none is destroyed: "
        "GPU instance 10 (PIDs 4242)"
    )
    assert mig_handles(gpu(driver, A100_MIG)) == [("1g.5gb", "10"), ("3g.20gb", "2")]


@pytest.mark.parametrize(
    ("address", "layout", "message"),
    [
        (A100, {"mig": {"1g.5gb": 1}}, f"GPU {A100} is not in MIG mode"),
        (A100_MIG, {"mig": {"9g.99gb": 1}}, f"GPU {A100_MIG} has no MIG profile 9g.99gb"),
        (
            A100_MIG,
            {"mig": {"1g.5gb": 2, "3g.20gb": 1, "2g.10gb": 2}},
            f"GPU {A100_MIG}: the layout asks 2 more of 2g.10gb (NVML allows 1)",
        ),
    ],
    ids=["mig-disabled", "unknown-profile", "no-room"],
)
def test_what_nvml_cannot_do_is_refused_before_anything_changes(
    kernel, tmp_path, address, layout, message
):
    before = _recording(kernel)
    driver = gpu_driver(kernel, tmp_path / "state")
    device = gpu(driver, address)
    with pytest.raises(PartitionError) as refused:
        driver.partition(device, layout)
    assert str(refused.value).startswith(message)
    assert _recording(kernel) == before
    assert gpu(driver, address) == device
