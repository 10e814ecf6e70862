"""``exosuit-agent record``: copy what the drivers read of a host's sysfs into a fixture tree.

The tree has the host's layout under ``<output>/sys`` (and the two ``/proc`` files the
nvme driver reads), so ``exosuit-agent discover --sysfs-root <output>`` finds what it
finds on the host. What is recorded:

* every PCI hierarchy (``/sys/devices/pci*``, wherever the functions of
  ``/sys/bus/pci/devices`` live): attributes, SR-IOV ``physfn``/``virtfnN`` links, bound
  ``driver`` links, ``mdev_supported_types``, DFL/FPGA, QAT, NVMe and net children, and
  the hwmon sensors below them (an FPGA BMC's, an NVMe controller's: their health);
* ``/sys/devices/virtual/nvme-subsystem`` and device-mapper/MD block devices (NVMe
  multipath heads and the holders that show a drive is in use);
* QAT firmware versions (``/sys/kernel/debug/qat_*/version``);
* the links of ``/sys/bus/{pci,dfl,mdev}/devices``, of ``/sys/class/{nvme,nvme-subsystem,
  net,block,fpga,fpga_region,fpga_manager,fpga_bridge,mdev_bus,drm,accel,hwmon}`` and of
  ``/sys/kernel/iommu_groups/<n>/devices`` that point into the recorded tree (a device's
  own ``iommu_group`` link is copied with it: the container edits read its group);
* ``/proc/self/mountinfo`` and ``/proc/swaps`` (which drives the host uses), and the
  NVIDIA driver's ``/proc/driver/nvidia/gpus/<address>/information`` and
  ``/proc/driver/nvidia/capabilities`` (a GPU's device minor, its MIG instances'
  capability minors: the container edits of nvidia_gpu).

Links are copied as links (sysfs links are relative, so the tree works anywhere) and never
followed; a link that would leave the tree is dropped. Binary and bulky attributes
(``config``, ``rom``, ``vpd``, ``resource*`` …), unreadable or write-only attributes,
files over 64 KiB, and volatile directories (``power``, ``statistics``, ``queues`` …)
are skipped.
"""

from __future__ import annotations

import dataclasses
import os
import re

__all__ = ["RecordSummary", "record"]

MAX_FILE = 64 * 1024
CLASSES = (
    "nvme",
    "nvme-subsystem",
    "net",
    "block",
    "fpga",
    "fpga_region",
    "fpga_manager",
    "fpga_bridge",
    "mdev_bus",
    "drm",
    "accel",
    "hwmon",
)
BUS_LINKS: tuple[tuple[str, ...], ...] = (
    ("bus", "pci", "devices"),
    ("bus", "dfl", "devices"),
    ("bus", "mdev", "devices"),
)
PROC_FILES: tuple[tuple[str, ...], ...] = (("self", "mountinfo"), ("swaps",))
PROC_TREES: tuple[tuple[str, ...], ...] = (
    ("driver", "nvidia", "gpus"),
    ("driver", "nvidia", "capabilities"),
)
SKIP_FILES = re.compile(
    r"^(config|rom|vpd|edid|descriptors|nvmem|eeprom|resource(\d+(_wc)?)?|reset|remove|"
    r"rescan|bind|unbind|new_id|remove_id)$"
)
SKIP_DIRS = frozenset(
    {
        "power",
        "msi_irqs",
        "statistics",
        "queues",
        "queue",
        "mq",
        "trace",
        "integrity",
        "thermal",
    }
)
_PCI_ROOT = re.compile(r"^pci[0-9a-f]{4,}:[0-9a-f]{2}$")
_VIRTUAL: tuple[tuple[str, ...], ...] = (("devices", "virtual", "nvme-subsystem"),)
_VIRTUAL_BLOCK = re.compile(r"^(dm-\d+|md\d+)$")


@dataclasses.dataclass
class RecordSummary:
    files: int = 0
    links: int = 0
    skipped: list[str] = dataclasses.field(default_factory=list)


class _Recorder:
    def __init__(self, root: str, output: str) -> None:
        self.root = os.path.abspath(root)
        self.output = os.path.abspath(output)
        self.summary = RecordSummary()

    def src(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def dst(self, rel: str) -> str:
        return os.path.join(self.output, rel)

    def copy_file(self, rel: str) -> None:
        path = self.src(rel)
        try:
            mode = os.stat(path).st_mode
            if not mode & 0o444:
                raise PermissionError("write-only")
            with open(path, "rb") as f:
                data = f.read(MAX_FILE + 1)
            if len(data) > MAX_FILE:
                raise ValueError("too large")
            data.decode("utf-8")
        except (OSError, ValueError) as error:  # unreadable, binary, too large
            self.summary.skipped.append(f"{rel}: {type(error).__name__}")
            return
        os.makedirs(os.path.dirname(self.dst(rel)), exist_ok=True)
        with open(self.dst(rel), "wb") as f:
            f.write(data)
        self.summary.files += 1

    def copy_link(self, rel: str, *, require_target: bool = False) -> None:
        target = os.readlink(self.src(rel))
        if os.path.isabs(target):
            target = os.path.relpath(
                os.path.join(self.output, target.lstrip("/")), os.path.dirname(self.dst(rel))
            )
        resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target))
        if resolved == ".." or resolved.startswith(".." + os.sep) or os.path.isabs(resolved):
            self.summary.skipped.append(f"{rel}: link leaves the tree")
            return
        if require_target and not os.path.lexists(self.dst(resolved)):
            return
        os.makedirs(os.path.dirname(self.dst(rel)), exist_ok=True)
        os.symlink(target, self.dst(rel))
        self.summary.links += 1

    def copy_tree(self, rel: str) -> None:
        try:
            entries = sorted(os.scandir(self.src(rel)), key=lambda e: e.name)
        except OSError:
            return
        os.makedirs(self.dst(rel), exist_ok=True)
        for entry in entries:
            child = os.path.join(rel, entry.name)
            if entry.is_symlink():
                self.copy_link(child)
            elif entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIP_DIRS:
                    self.copy_tree(child)
            elif entry.is_file(follow_symlinks=False) and not SKIP_FILES.match(entry.name):
                self.copy_file(child)

    def pci_roots(self) -> list[str]:
        roots = {
            os.path.join("sys", "devices", name)
            for name in _listdir(self.src(os.path.join("sys", "devices")))
            if _PCI_ROOT.match(name)
        }
        devices = os.path.join("sys", "bus", "pci", "devices")
        for name in _listdir(self.src(devices)):
            real = os.path.realpath(self.src(os.path.join(devices, name)))
            rel = os.path.relpath(real, self.root)
            parts = rel.split(os.sep)
            for i, part in enumerate(parts):
                if _PCI_ROOT.match(part):
                    roots.add(os.path.join(*parts[: i + 1]))
                    break
        return sorted(r for r in roots if not r.startswith(".."))

    def run(self) -> RecordSummary:
        for tree in self.pci_roots():
            self.copy_tree(tree)
        for parts in _VIRTUAL:
            self.copy_tree(os.path.join("sys", *parts))
        block = os.path.join("sys", "devices", "virtual", "block")
        for name in _listdir(self.src(block)):
            if _VIRTUAL_BLOCK.match(name):
                self.copy_tree(os.path.join(block, name))
        debug = os.path.join("sys", "kernel", "debug")
        for name in _listdir(self.src(debug)):
            if name.startswith("qat_"):
                self.copy_tree(os.path.join(debug, name, "version"))
        for parts in BUS_LINKS:
            self.copy_links(os.path.join("sys", *parts))
        for name in CLASSES:
            self.copy_links(os.path.join("sys", "class", name))
        groups = os.path.join("sys", "kernel", "iommu_groups")
        for name in _listdir(self.src(groups)):
            self.copy_links(os.path.join(groups, name, "devices"))
        for parts in PROC_FILES:
            rel = os.path.join("proc", *parts)
            if os.path.exists(self.src(rel)):
                self.copy_file(rel)
        for parts in PROC_TREES:
            rel = os.path.join("proc", *parts)
            if os.path.isdir(self.src(rel)):
                self.copy_tree(rel)
        return self.summary

    def copy_links(self, rel: str) -> None:
        for name in _listdir(self.src(rel)):
            if os.path.islink(self.src(os.path.join(rel, name))):
                self.copy_link(os.path.join(rel, name), require_target=True)


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def record(sysfs_root: str, output: str) -> RecordSummary:
    """Record ``sysfs_root``'s sysfs into ``output``, which must be absent or empty."""
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise FileExistsError(f"{output} exists and is not an empty directory")
    if not os.path.isdir(os.path.join(sysfs_root, "sys")):
        raise FileNotFoundError(f"{os.path.join(sysfs_root, 'sys')} is not a directory")
    os.makedirs(output, exist_ok=True)
    return _Recorder(sysfs_root, output).run()
