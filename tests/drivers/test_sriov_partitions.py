"""sriov_nic's partitions (exosuit/drivers/sriov_partitions.py) on writable copies of
tests/fixtures/sriov-nic-host, with the test kernel acting on ``sriov_numvfs``: a
``{"vfs": n}`` layout sets the PF's VF count (0 first when another is set), discovery
offers the VFs there are, and what the PF cannot do is refused before anything is
written."""

from __future__ import annotations

import pytest

from exosuit.drivers.base import Partitionable, PartitionError
from tests.drivers.fpga_tools import writable_copy
from tests.drivers.kernel import Kernel
from tests.drivers.test_install import nic, sriov, vf_units

PORT0, PORT1 = "0000:3b:00.0", "0000:3b:00.1"


@pytest.fixture
def kernel(tmp_path) -> Kernel:
    return Kernel(writable_copy("sriov-nic-host", tmp_path))


def _numvfs(address: str, *counts: int) -> list[tuple[str, str]]:
    return [(f"bus/pci/devices/{address}/sriov_numvfs", str(c)) for c in counts]


def test_a_vf_layout_sets_the_count_and_discovery_follows(kernel):
    driver = sriov(kernel)
    assert isinstance(driver, Partitionable)
    device = nic(driver, PORT0)
    assert len(vf_units(device)) == 2
    assert driver.partitioned(device, {"vfs": 2})

    driver.partition(device, {"vfs": 4})
    assert kernel.written == _numvfs(PORT0, 0, 4)  # the kernel wants 0 between two counts
    four = nic(driver, PORT0)
    assert [t for _, t in vf_units(four)] == ["CUSTOM_VF"] * 4
    assert driver.partitioned(four, {"vfs": 4})
    kernel.written.clear()
    driver.partition(four, {"vfs": 4})  # idempotent
    assert kernel.written == []

    driver.partition(four, {"vfs": 0})
    assert kernel.written == _numvfs(PORT0, 0)
    assert vf_units(nic(driver, PORT0)) == [(PORT0, "CUSTOM_PF")]


def test_a_pf_without_vfs_gets_them_in_one_write(kernel):
    driver = sriov(kernel)
    driver.partition(nic(driver, PORT1), {"vfs": 3})
    assert kernel.written == _numvfs(PORT1, 3)
    assert len(vf_units(nic(driver, PORT1))) == 3


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"vfs": 129}, "0000:3b:00.1 has at most 128 VFs, not 129"),
        (
            {"mdev": {"nvidia-223": 1}},
            "0000:3b:00.1: a NIC is partitioned into SR-IOV VFs, not vGPU mdevs",
        ),
    ],
    ids=["too-many", "mdev"],
)
def test_what_the_pf_cannot_do_is_refused_before_anything_is_written(kernel, layout, message):
    driver = sriov(kernel)
    device = nic(driver, PORT1)
    with pytest.raises(PartitionError) as refused:
        driver.partition(device, layout)
    assert str(refused.value) == message
    assert kernel.written == []
