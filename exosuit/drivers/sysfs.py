"""Reading the kernel's sysfs under a configurable root (``/`` on a host; a recorded or
hand-written tree, such as ``tests/fixtures/<host>/``, elsewhere).

Only what the kernel documents (Documentation/ABI/testing/sysfs-bus-pci …) is read, and
written: ``Sysfs.write`` is the one way a driver's install step changes the host
(``driver_override``, ``sriov_numvfs``, ``qat/cfg_services`` …), confined to the tree's
``sys`` directory.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re

__all__ = ["PciFunction", "Sysfs", "normalize_id"]


# The kernel's names: a host bridge ``pci%04x:%02x`` (drivers/pci/probe.c), a function
# ``%04x:%02x:%02x.%d`` (domains above ffff behind VMD have five hex digits).
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,5}:[0-9a-f]{2}$")
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def normalize_id(value: str | None) -> str | None:
    """``0x10DE`` → ``10de``: the form Nova's device_spec and lspci use."""
    if value is None:
        return None
    value = value.strip().lower()
    return value[2:] if value.startswith("0x") else value


@dataclasses.dataclass(frozen=True)
class PciFunction:
    """One PCI function, as /sys/bus/pci/devices/<address>/ describes it."""

    address: str  # 0000:3b:00.0
    path: str  # the resolved directory
    vendor_id: str  # 10de
    device_id: str  # 1eb8
    class_code: str  # 030200 (base class, subclass, prog-if)
    subsystem_vendor_id: str | None
    subsystem_device_id: str | None
    revision: str | None
    driver: str | None  # the bound kernel driver, e.g. vfio-pci
    numa_node: int | None
    # Where it sits (see ``Sysfs.pcie_root``) and its IOMMU group; None where the kernel
    # shows none.
    pcie_root: str | None
    iommu_group: int | None
    physfn: str | None  # for an SR-IOV VF: its PF's address
    virtfns: tuple[str, ...]  # for an SR-IOV PF: its VFs' addresses, by VF index
    sriov_totalvfs: int | None
    sriov_numvfs: int | None

    @property
    def base_class(self) -> str:
        return self.class_code[:2]

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None


class Sysfs:
    """sysfs below ``root`` (``<root>/sys/...``)."""

    def __init__(self, root: str = "/") -> None:
        self.root = os.path.abspath(root)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, "sys", *parts)

    def read(self, *parts: str) -> str | None:
        """The stripped content of a sysfs attribute, or None if absent/unreadable."""
        try:
            with open(self.path(*parts), errors="replace") as f:
                return f.read().strip()
        except OSError:
            return None

    def write(self, *parts: str, value: str) -> None:
        """Write ``value`` to the existing attribute ``<root>/sys/<parts>`` in one write, as
        ``echo value > attribute`` does (the kernel acts on each write).

        Never creates a file: sysfs has no such thing, so a missing attribute (a kernel
        without it, a device that went away) raises ``FileNotFoundError``. A path that
        resolves outside ``<root>/sys`` (through ``..`` or a link) raises
        ``PermissionError`` before anything is opened. The kernel's refusal (``EBUSY``,
        ``EINVAL`` …) comes back as the ``OSError`` the write raised.
        """
        path = self.path(*parts)
        sys_dir = os.path.realpath(self.path())
        real = os.path.realpath(path)
        if os.path.commonpath([real, sys_dir]) != sys_dir:
            raise PermissionError(
                errno.EACCES, f"refusing to write outside {self.path()}", "/".join(parts)
            )
        fd = os.open(real, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def listdir(self, *parts: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(*parts)))
        except OSError:
            return []

    def link_name(self, *parts: str) -> str | None:
        """The last component of a symlink's target (e.g. a bound driver's name)."""
        path = self.path(*parts)
        if not os.path.islink(path):
            return None
        return os.path.basename(os.readlink(path))

    def pci_addresses(self) -> list[str]:
        return self.listdir("bus", "pci", "devices")

    def pci_function(self, address: str) -> PciFunction | None:
        base = ("bus", "pci", "devices", address)
        vendor = normalize_id(self.read(*base, "vendor"))
        device = normalize_id(self.read(*base, "device"))
        if vendor is None or device is None:
            return None
        numa = self.read(*base, "numa_node")
        virtfns = []
        for entry in self.listdir(*base):
            if entry.startswith("virtfn") and entry[6:].isdigit():
                target = self.link_name(*base, entry)
                if target:
                    virtfns.append((int(entry[6:]), target))
        path = os.path.realpath(self.path(*base))
        return PciFunction(
            address=address,
            path=path,
            vendor_id=vendor,
            device_id=device,
            class_code=(normalize_id(self.read(*base, "class")) or "").rjust(6, "0"),
            subsystem_vendor_id=normalize_id(self.read(*base, "subsystem_vendor")),
            subsystem_device_id=normalize_id(self.read(*base, "subsystem_device")),
            revision=normalize_id(self.read(*base, "revision")),
            driver=self.link_name(*base, "driver"),
            numa_node=int(numa) if numa not in (None, "", "-1") else None,
            pcie_root=self.pcie_root(path),
            iommu_group=_int(self.link_name(*base, "iommu_group")),
            physfn=self.link_name(*base, "physfn"),
            virtfns=tuple(addr for _, addr in sorted(virtfns)),
            sriov_totalvfs=_int(self.read(*base, "sriov_totalvfs")),
            sriov_numvfs=_int(self.read(*base, "sriov_numvfs")),
        )

    def pcie_root(self, path: str) -> str | None:
        """The PCI address of the root port above the function whose resolved sysfs
        directory is ``path`` (``<root>/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0``
        → ``0000:3a:00.0``): the first PCI address below the host bridge (``pciDDDD:BB``)
        the function's path goes through. A function on the root complex itself (an
        integrated endpoint, or any function of a host without root ports, such as a
        virtual machine's) is its own root: its own address. Behind a VMD controller,
        whose functions sit below a host bridge of their own, the root port in that
        domain. None when the path is not below a host bridge.
        """
        devices = self.path("devices")
        relative = os.path.relpath(path, devices)
        if relative.startswith(os.pardir):
            return None
        parts = relative.split(os.sep)
        bridges = [i for i, p in enumerate(parts[:-1]) if _HOST_BRIDGE.match(p)]
        if not bridges:
            return None
        below = parts[bridges[-1] + 1]
        return below if _PCI_ADDRESS.match(below) else None

    def pci_functions(self) -> list[PciFunction]:
        found = (self.pci_function(a) for a in self.pci_addresses())
        return [f for f in found if f is not None]


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
