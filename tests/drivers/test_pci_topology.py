"""Where a PCI function sits (``exosuit.drivers.sysfs``): its root port, its IOMMU group
and its NUMA node, on the recorded trees, on hand-made trees for the shapes they lack (no
IOMMU, a VMD domain) and on this machine's own /sys, through the pci driver."""

from __future__ import annotations

import os
import shutil

import pytest

from exosuit.drivers import DriverContext
from exosuit.drivers.pci import PciDriver
from exosuit.drivers.sysfs import Sysfs
from tests.conftest import require

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")


def where(host: str, address: str) -> tuple[str | None, int | None, int | None]:
    function = Sysfs(os.path.join(FIXTURES, host)).pci_function(address)
    assert function is not None
    return function.pcie_root, function.iommu_group, function.numa_node


@pytest.mark.parametrize(
    "host, address, expected",
    [
        # A GPU in the slot of a root port.
        ("nvidia-gpu-host", "0000:3b:00.0", ("0000:3a:00.0", 1, 0)),
        ("nvidia-gpu-host", "0000:af:00.0", ("0000:ae:00.0", 12, 1)),
        # An SR-IOV VF: the root port of its PF, a group of its own.
        ("nvidia-gpu-host", "0000:81:00.5", ("0000:80:01.1", 9, 1)),
        # The BMC's VGA behind a PCIe-to-PCI bridge; the kernel says numa_node -1.
        ("nvidia-gpu-host", "0000:03:00.0", ("0000:00:1c.5", 0, None)),
        # The N3000 behind its own PCIe switch (two levels of bridges): the root port.
        ("fpga-dfl-host", "0000:b1:00.0", ("0000:ae:00.0", 8, 1)),
        # A QAT 4xxx: an integrated endpoint on the root complex is its own root.
        ("intel-qat-host", "0000:6b:00.0", ("0000:6b:00.0", 1, 0)),
        # A root port itself.
        ("nvme-host", "0000:00:1c.5", ("0000:00:1c.5", 5, 0)),
    ],
)
def test_recorded_functions_report_their_root_port_group_and_numa_node(host, address, expected):
    assert where(host, address) == expected


def test_without_an_iommu_group_link_the_group_is_none(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(os.path.join(FIXTURES, "nvidia-gpu-host"), root, symlinks=True)
    link = root / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0" / "iommu_group"
    assert os.path.islink(link)
    os.unlink(link)
    function = Sysfs(str(root)).pci_function("0000:3b:00.0")
    assert function is not None
    assert (function.pcie_root, function.iommu_group) == ("0000:3a:00.0", None)


def _function(root, path: str, numa: str = "0", group: str | None = None) -> None:
    """A function at /sys/devices/<path>, linked from /sys/bus/pci/devices."""
    directory = root / "sys" / "devices" / path
    directory.mkdir(parents=True)
    for name, value in (("vendor", "0x8086"), ("device", "0x0a54"), ("class", "0x010802")):
        (directory / name).write_text(value + "\n")
    (directory / "numa_node").write_text(numa + "\n")
    if group is not None:
        groups = root / "sys" / "kernel" / "iommu_groups" / group
        groups.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(groups, directory), directory / "iommu_group")
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    address = path.rsplit("/", 1)[-1]
    os.symlink(os.path.relpath(directory, bus), bus / address)


def test_behind_a_vmd_controller_the_root_port_is_the_one_in_the_vmd_domain(tmp_path):
    # Intel VMD: the drives' root ports sit below a host bridge of their own (domain
    # 10000), itself below the VMD endpoint of the real root complex.
    _function(tmp_path, "pci0000:5d/0000:5d:05.5", group="31")
    _function(tmp_path, "pci0000:5d/0000:5d:05.5/pci10000:00/10000:00:02.0")
    _function(tmp_path, "pci0000:5d/0000:5d:05.5/pci10000:00/10000:00:02.0/10000:01:00.0")
    found = {f.address: (f.pcie_root, f.iommu_group) for f in Sysfs(str(tmp_path)).pci_functions()}
    assert found == {
        "0000:5d:05.5": ("0000:5d:05.5", 31),
        "10000:00:02.0": ("10000:00:02.0", None),
        "10000:01:00.0": ("10000:00:02.0", None),
    }


def test_a_function_outside_any_host_bridge_has_no_root(tmp_path):
    _function(tmp_path, "platform/soc/0000:01:00.0", numa="-1")
    (function,) = Sysfs(str(tmp_path)).pci_functions()
    assert (function.pcie_root, function.iommu_group, function.numa_node) == (None, None, None)


# --- this machine's own /sys ------------------------------------------------------------


def test_on_this_machine_the_pci_driver_reports_each_functions_root_and_group():
    """Read here without the driver: the first PCI address below the host bridge in each
    function's resolved path, its iommu_group link and numa_node (-1: none)."""
    base = "/sys/bus/pci/devices"
    require(os.path.isdir(base), "no /sys/bus/pci on this machine")
    expected = {}
    for address in sorted(os.listdir(base)):
        parts = os.path.realpath(os.path.join(base, address)).split("/")
        bridge = max(i for i, p in enumerate(parts) if p.startswith("pci"))
        link = os.path.join(base, address, "iommu_group")
        group = int(os.path.basename(os.readlink(link))) if os.path.islink(link) else None
        with open(os.path.join(base, address, "numa_node")) as f:
            numa = int(f.read())
        expected[address] = (parts[bridge + 1], group, None if numa < 0 else numa)
    context = DriverContext(hostname="h", settings={"device_spec": ['{"vendor_id": "*"}']})
    found = {
        d.pci_address: (d.pcie_root, d.iommu_group, d.numa_node)
        for d in PciDriver(context).discover()
    }
    assert found == expected
