"""NVMe drives: every PCI function of class 010802 (NVM Express controller), whole drive
to one VM (Cyborg's SSD drivers, for every vendor).

* resource class ``CUSTOM_SSD``; traits ``CUSTOM_SSD_<VENDOR>`` (the vendor's name where
  Cyborg names it, else the vendor id) and ``CUSTOM_SSD_PRODUCT_ID_<ID>``;
* model, serial and firmware revision from ``/sys/class/nvme/nvmeN/{model,serial,
  firmware_rev}`` (Documentation/ABI/testing/sysfs-class-nvme) while the kernel's nvme
  driver is bound; a drive bound to vfio-pci has no such directory and reports its
  product id as model;
* one deployable, one PCI attach handle;
* services: one ``nvme_namespace`` per namespace the controller shows, with
  ``capacity_bytes`` (the block device's ``size``, in 512-byte sectors whatever the
  logical block size: Documentation/ABI/stable/sysfs-block).

Safe default: a drive the host uses is not offered (``skip_host_disks``). "Uses" means a
namespace of the drive, or a partition of one, is mounted (``/proc/self/mountinfo``), is
active swap (``/proc/swaps``), or has holders (``/sys/class/block/<dev>/holders``: LVM,
device-mapper, MD RAID — the usual way a root file system sits on a drive). When the
mount table cannot be read, every drive with a block namespace counts as used.
A container (``ContainerDevice``) gets the controller's ``/dev/nvme<N>`` and its
namespaces' (and their partitions') block devices, or ``/dev/vfio/<group>`` for a drive
bound to vfio-pci.

Health (``HealthReader``): the function's PCIe AER counters, link and bus
(exosuit.drivers.health); the controller's ``state`` (sysfs-class-nvme: ``live`` is
healthy, ``dead`` unhealthy, anything else, ``resetting`` …, warning); its hwmon sensor
(``/sys/class/nvme/nvmeN/hwmonM``, drivers/nvme/host/hwmon.c: the composite temperature
against the drive's warning and critical thresholds, and ``temp1_alarm``, the temperature
bit of the SMART critical warning). The kernel shows nothing else of the SMART log in
sysfs: the rest of the critical warning (spare below its threshold, reliability degraded,
read-only, volatile memory backup failed) and the endurance used are read from nvme-cli,
``nvme smart-log /dev/nvmeN --output-format=json`` (``[nvme] smart_log``), through the
runner. doc/drivers/nvme.md is the operator's guide.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import subprocess

from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import (
    HEALTH_UNHEALTHY,
    HEALTH_WARNING,
    AttachHandle,
    ContainerEdits,
    Deployable,
    Device,
    DeviceNode,
    Health,
    Service,
    pci_cpid,
)
from exosuit.drivers.container import function_edits, handle_address
from exosuit.drivers.device_spec import is_pci_address
from exosuit.drivers.health import PciHealth, hwmon_health
from exosuit.drivers.pci import board_info
from exosuit.drivers.sysfs import PciFunction, Sysfs

LOG = logging.getLogger(__name__)

__all__ = [
    "NVME_CLASS",
    "VENDOR_NAMES",
    "HostBlockUsage",
    "NvmeController",
    "NvmeDriver",
    "nvme_controllers",
]

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

# The SMART log's critical warning bits (NVM Express Base Specification, "SMART / Health
# Information"): what each says, and the state it gives.
CRITICAL_WARNINGS = (
    (0x01, "the available spare is below its threshold", HEALTH_WARNING),
    (0x02, "a temperature is beyond its threshold", HEALTH_WARNING),
    (0x04, "its reliability is degraded (media or internal errors)", HEALTH_UNHEALTHY),
    (0x08, "its media are read-only", HEALTH_UNHEALTHY),
    (0x10, "its volatile memory backup failed", HEALTH_UNHEALTHY),
    (0x20, "its persistent memory region is read-only", HEALTH_UNHEALTHY),
)

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
            return self.by_dm_name.get(source[len("/dev/mapper/") :])
        if source.startswith("/dev/"):
            name = source[len("/dev/") :]
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
            entry
            for entry in self.sysfs.listdir("class", "block", disk)
            if entry.startswith(disk)
            and self.sysfs.read("class", "block", disk, entry, "partition") is not None
        ]
        found = []
        for name in names:
            if name in self.used:
                found.append(f"{name} {self.used[name]}")
            holders = self.sysfs.listdir("class", "block", name, "holders")
            if holders:
                found.append(f"{name} held by {', '.join(holders)}")
        if (
            not found
            and not self.mount_table_read
            and os.path.isdir(self.sysfs.path("class", "block", disk))
        ):
            found.append(f"{disk} may be mounted (the mount table is unreadable)")
        return found


def _unescape(path: str) -> str:
    """mountinfo escapes blanks and backslashes as octal (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


SECTOR = 512  # the unit of a block device's ``size``, whatever its logical block size


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
    """Implements [exosuit.drivers.base.Driver], [exosuit.drivers.base.HealthReader] and
    [exosuit.drivers.base.ContainerDevice]."""

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
        cfg.StrOpt(
            "smart_log",
            default="nvme",
            help="nvme-cli, run as `nvme smart-log /dev/nvmeN --output-format=json` to read "
            "a drive's critical warning and endurance used (health; it needs root). Empty: "
            "never run it (health then reads only what the kernel shows in sysfs).",
        ),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = context.open_sysfs()
        skip = context.settings.get("skip_host_disks")
        self.skip_host_disks = True if skip is None else bool(skip)
        self.excluded = {
            a.strip().lower() for a in context.settings.get("excluded_addresses") or [] if a.strip()
        }
        self.runner = context.runner
        smart_log = context.settings.get("smart_log")
        self.smart_log = "nvme" if smart_log is None else str(smart_log)
        self.pci_health = PciHealth(self.sysfs, context.health_settings())
        self._smart_failed = False  # said once that nvme-cli cannot be run
        bad = sorted(a for a in self.excluded if not is_pci_address(a))
        if bad:
            raise ValueError(f"[nvme] excluded_addresses: not PCI addresses: {', '.join(bad)}")

    def discover(self) -> list[Device]:
        functions = [
            f
            for f in self.sysfs.pci_functions()
            if f.class_code == NVME_CLASS and f.address not in self.excluded
        ]
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
                    LOG.info(
                        "nvme: not offering %s (%s): used by the host: %s",
                        function.address,
                        controller.name,
                        "; ".join(reasons),
                    )
                    continue
            devices.append(self._device(function, controller))
        return devices

    def health(self, device: Device) -> Health:
        """Implements [exosuit.drivers.base.HealthReader]: the function's AER counters,
        link and bus; the controller's state and temperature sensor; the SMART critical
        warning and endurance used, from nvme-cli (the module's docstring)."""
        address = device.pci_address or ""
        findings = [self.pci_health.check(address)]
        controller = nvme_controllers(self.sysfs).get(address)
        if controller is None:
            return findings[0]
        base = ("class", "nvme", controller.name)
        state = self.sysfs.read(*base, "state")
        if state == "dead":
            findings.append(Health(HEALTH_UNHEALTHY, (f"controller {controller.name} is dead",)))
        elif state not in (None, "live"):
            reason = f"controller {controller.name} is {state}, not live"
            findings.append(Health(HEALTH_WARNING, (reason,)))
        findings.append(hwmon_health(self.sysfs, *base, what="sensor"))
        findings.append(self._smart(controller.name))
        return Health.worst(*findings)

    def _smart(self, controller: str) -> Health:
        """The SMART log's critical warning and endurance used, from nvme-cli; nothing
        when it cannot be run (absent, not root)."""
        if not self.smart_log:
            return Health()
        argv = [self.smart_log, "smart-log", f"/dev/{controller}", "--output-format=json"]
        try:
            result = self.runner.run(argv, timeout=10)
            log = json.loads(result.stdout) if result.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            log, result = None, None
            if not self._smart_failed:
                LOG.info("nvme: %s unavailable: %s", self.smart_log, error)
        if not isinstance(log, dict):
            if result is not None and not self._smart_failed:
                LOG.info("nvme: %s exited %s", " ".join(argv), result.returncode)
            self._smart_failed = True
            return Health()
        warning = log.get("critical_warning")
        if isinstance(warning, dict):  # nvme-cli 2's verbose form
            warning = warning.get("value")
        findings = []
        if isinstance(warning, int):
            for bit, words, state in CRITICAL_WARNINGS:
                if warning & bit:
                    findings.append(Health(state, (f"{controller}: {words} (SMART)",)))
        used = log.get("percent_used", log.get("percentage_used"))
        if isinstance(used, int) and used >= 100:
            reason = f"{controller}: its rated endurance is used up (SMART)"
            findings.append(Health(HEALTH_WARNING, (reason,)))
        return Health.worst(*findings)

    def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits:
        """Implements [exosuit.drivers.base.ContainerDevice]: the controller's character
        device and its namespaces' block devices (with their partitions), or the vfio
        nodes of a drive bound to vfio-pci."""
        address = handle_address(attach_handle)
        controller = nvme_controllers(self.sysfs).get(address)
        if controller is None:
            return function_edits(self.sysfs, address)
        nodes = [DeviceNode(f"/dev/{controller.name}")]
        for namespace in controller.namespaces:
            nodes.append(DeviceNode(f"/dev/{namespace}"))
            partitions = [
                name
                for name in self.sysfs.listdir("class", "block", namespace)
                if re.fullmatch(rf"{namespace}p\d+", name)
            ]
            nodes += [DeviceNode(f"/dev/{p}") for p in sorted(partitions, key=_partition)]
        return function_edits(
            self.sysfs, address, nodes=nodes, env={"NVME_CONTROLLER": controller.name}
        )

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
            pcie_root=function.pcie_root,
            iommu_group=function.iommu_group,
            firmware_version=controller.firmware if controller else None,
            std_board_info=board_info(function),
            vendor_board_info={"serial": serial} if serial else {},
            services=self._namespaces(controller),
            deployables=(
                Deployable(
                    name=f"{self.hostname}_{function.address}",
                    num_accelerators=1,
                    resource_class=RESOURCE_CLASS,
                    traits=(
                        f"CUSTOM_SSD_{vendor}",
                        f"CUSTOM_SSD_PRODUCT_ID_{function.device_id.upper()}",
                    ),
                    attach_handles=(AttachHandle("PCI", pci_cpid(function.address)),),
                    driver_name=self.name,
                ),
            ),
        )

    def _namespaces(self, controller: NvmeController | None) -> tuple[Service, ...]:
        """One ``nvme_namespace`` service per namespace, with its capacity in bytes."""
        found = []
        for name in controller.namespaces if controller else ():
            sectors = self.sysfs.read("class", "block", name, "size")
            details = {}
            if sectors and sectors.isdigit():
                details["capacity_bytes"] = str(int(sectors) * SECTOR)
            found.append(Service("nvme_namespace", name, sectors != "0", details))
        return tuple(found)


def _partition(name: str) -> int:
    """``nvme1n1p10`` → 10: partitions in their number's order."""
    return int(name.rsplit("p", 1)[1])
