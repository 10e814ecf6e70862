"""NVMe drives: every PCI function of class 010802 (NVM Express controller), whole drive
to one VM (Cyborg's SSD drivers, for every vendor).

* resource class ``CUSTOM_SSD``; traits ``CUSTOM_SSD_<VENDOR>`` (the vendor's name where
  Cyborg names it, else the vendor id) and ``CUSTOM_SSD_PRODUCT_ID_<ID>``;
* model, serial and firmware revision from ``/sys/class/nvme/nvmeN/{model,serial,
  firmware_rev}`` (Documentation/ABI/testing/sysfs-class-nvme) while the kernel's nvme
  driver is bound; a drive bound to vfio-pci has no such directory and reports its
  product id as model;
* one deployable, one PCI attach handle.

Safe default: a drive the host uses is not offered (``skip_host_disks``). "Uses" means a
namespace of the drive, or a partition of one, is mounted (``/proc/self/mountinfo``), is
active swap (``/proc/swaps``), or has holders (``/sys/class/block/<dev>/holders``: LVM,
device-mapper, MD RAID — the usual way a root file system sits on a drive). When the
mount table cannot be read, every drive with a block namespace counts as used.
doc/drivers/nvme.md is the operator's guide.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re

from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from exosuit.drivers.device_spec import is_pci_address
from exosuit.drivers.pci import board_info
from exosuit.drivers.sysfs import PciFunction, Sysfs

LOG = logging.getLogger(__name__)

__all__ = ["NVME_CLASS", "VENDOR_NAMES", "HostBlockUsage", "NvmeController", "NvmeDriver",
           "nvme_controllers"]

NVME_CLASS = "010802"
RESOURCE_CLASS = "CUSTOM_SSD"

# Cyborg's vendor names for SSD traits (cyborg/accelerator/common/utils.py
# get_vendor_maps), plus Samsung's actual PCI vendor id 144d. Other vendors get their id.
VENDOR_NAMES = {
    "10de": "NVIDIA",
    "102b": "MATROX",
    "1bd4": "INSPUR",
    "8086": "INTEL",
    "1099": "SAMSUNG",
    "144d": "SAMSUNG",
    "1cf2": "ZTE",
}

_NAMESPACE = re.compile(r"^nvme\d+n\d+$")
_PATH = re.compile(r"^nvme(\d+)c\d+n(\d+)$")  # a multipath path; the block device is the head


@dataclasses.dataclass(frozen=True)
class NvmeController:
    name: str  # nvme0
    model: str | None
    serial: str | None
    firmware: str | None
    namespaces: tuple[str, ...]  # block device names: nvme0n1, or a multipath head


class HostBlockUsage:
    """Which block devices the host uses: mounted, swap, or held by another device."""

    def __init__(self, sysfs: Sysfs) -> None:
        self.sysfs = sysfs
        self.by_devnum = {}
        self.by_dm_name = {}
        for name in sysfs.listdir("class", "block"):
            devnum = sysfs.read("class", "block", name, "dev")
            if devnum:
                self.by_devnum[devnum] = name
            dm_name = sysfs.read("class", "block", name, "dm", "name")
            if dm_name:
                self.by_dm_name[dm_name] = name
        self.mount_table_read, self.used = self._read_used()

    def _proc(self, *parts: str) -> list[str] | None:
        try:
            with open(os.path.join(self.sysfs.root, "proc", *parts), errors="replace") as f:
                return f.read().splitlines()
        except OSError:
            return None

    def _name(self, source: str) -> str | None:
        if source.startswith("/dev/mapper/"):
            return self.by_dm_name.get(source[len("/dev/mapper/"):])
        if source.startswith("/dev/"):
            name = source[len("/dev/"):]
            return name if os.path.isdir(self.sysfs.path("class", "block", name)) else None
        return None

    def _read_used(self) -> tuple[bool, dict[str, str]]:
        used: dict[str, str] = {}
        mounts = self._proc("self", "mountinfo")
        for line in mounts or ():
            # id parent major:minor root mount-point options [optional…] - fstype source …
            fields = line.split()
            if len(fields) < 5 or "-" not in fields[6:]:
                continue
            source_at = fields.index("-", 6) + 2
            source = fields[source_at] if source_at < len(fields) else ""
            for name in (self.by_devnum.get(fields[2]), self._name(source)):
                if name:
                    used.setdefault(name, f"mounted at {_unescape(fields[4])}")
        for line in (self._proc("swaps") or ())[1:]:
            fields = line.split()
            name = self._name(fields[0]) if fields else None
            if name:
                used.setdefault(name, "swap")
        return mounts is not None, used

    def reasons(self, disk: str) -> list[str]:
        """Why ``disk`` (or a partition of it) is in use by the host; empty if it is not."""
        names = [disk] + [
            entry for entry in self.sysfs.listdir("class", "block", disk)
            if entry.startswith(disk) and self.sysfs.read("class", "block", disk, entry,
                                                          "partition") is not None
        ]
        found = []
        for name in names:
            if name in self.used:
                found.append(f"{name} {self.used[name]}")
            holders = self.sysfs.listdir("class", "block", name, "holders")
            if holders:
                found.append(f"{name} held by {', '.join(holders)}")
        if not found and not self.mount_table_read and os.path.isdir(
                self.sysfs.path("class", "block", disk)):
            found.append(f"{disk} may be mounted (the mount table is unreadable)")
        return found


def _unescape(path: str) -> str:
    """mountinfo escapes blanks and backslashes as octal (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def nvme_controllers(sysfs: Sysfs) -> dict[str, NvmeController]:
    """The kernel's NVMe controllers on PCI, by PCI address (fabrics controllers skipped)."""
    found = {}
    for name in sysfs.listdir("class", "nvme"):
        device = os.path.realpath(sysfs.path("class", "nvme", name, "device"))
        address = os.path.basename(device)
        if not is_pci_address(address):
            continue
        namespaces = []
        for entry in sysfs.listdir("class", "nvme", name):
            if _NAMESPACE.match(entry):
                namespaces.append(entry)
            elif m := _PATH.match(entry):
                namespaces.append(f"nvme{m.group(1)}n{m.group(2)}")
        found[address] = NvmeController(
            name=name,
            model=sysfs.read("class", "nvme", name, "model") or None,
            serial=sysfs.read("class", "nvme", name, "serial") or None,
            firmware=sysfs.read("class", "nvme", name, "firmware_rev") or None,
            namespaces=tuple(sorted(set(namespaces))),
        )
    return found


class NvmeDriver:
    """Implements [exosuit.drivers.base.Driver]."""

    name = "nvme"
    OPTIONS = [
        cfg.BoolOpt(
            "skip_host_disks",
            default=True,
            help="Do not offer NVMe drives the host uses: a namespace or partition that is "
            "mounted (the root file system …), active swap, or held by LVM, device-mapper "
            "or MD RAID. Turn off only if you know better than the mount table.",
        ),
        cfg.ListOpt(
            "excluded_addresses",
            default=[],
            help="PCI addresses (0000:3b:00.0) of NVMe drives never to offer.",
        ),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = Sysfs(context.sysfs_root)
        skip = context.settings.get("skip_host_disks")
        self.skip_host_disks = True if skip is None else bool(skip)
        self.excluded = {a.strip().lower() for a in
                         context.settings.get("excluded_addresses") or [] if a.strip()}
        bad = sorted(a for a in self.excluded if not is_pci_address(a))
        if bad:
            raise ValueError(f"[nvme] excluded_addresses: not PCI addresses: {', '.join(bad)}")

    def discover(self) -> list[Device]:
        functions = [f for f in self.sysfs.pci_functions()
                     if f.class_code == NVME_CLASS and f.address not in self.excluded]
        if not functions:
            return []
        controllers = nvme_controllers(self.sysfs)
        usage = HostBlockUsage(self.sysfs) if self.skip_host_disks else None
        devices = []
        for function in functions:
            controller = controllers.get(function.address)
            if usage is not None and controller is not None:
                reasons = [r for disk in controller.namespaces for r in usage.reasons(disk)]
                if reasons:
                    LOG.info("nvme: not offering %s (%s): used by the host: %s",
                             function.address, controller.name, "; ".join(reasons))
                    continue
            devices.append(self._device(function, controller))
        return devices

    def _device(self, function: PciFunction, controller: NvmeController | None) -> Device:
        vendor = VENDOR_NAMES.get(function.vendor_id, function.vendor_id.upper())
        serial = controller.serial if controller else None
        return Device(
            type="SSD",
            vendor=function.vendor_id,
            model=(controller.model if controller else None) or function.device_id,
            driver_name=self.name,
            controlpath_id=pci_cpid(function.address),
            pci_address=function.address,
            numa_node=function.numa_node,
            firmware_version=controller.firmware if controller else None,
            std_board_info=board_info(function),
            vendor_board_info={"serial": serial} if serial else {},
            deployables=(
                Deployable(
                    name=f"{self.hostname}_{function.address}",
                    num_accelerators=1,
                    resource_class=RESOURCE_CLASS,
                    traits=(f"CUSTOM_SSD_{vendor}",
                            f"CUSTOM_SSD_PRODUCT_ID_{function.device_id.upper()}"),
                    attach_handles=(AttachHandle("PCI", pci_cpid(function.address)),),
                    driver_name=self.name,
                ),
            ),
        )
