"""The driver contract: a driver's ``discover()`` returns ``Device`` values.

A driver knows nothing of HTTP, the database or Placement. It reads the host
(sysfs under a root, vendor tools through a command runner) and returns frozen
dataclasses; the agent turns them into a snapshot (``Device.to_snapshot``).

A driver that can load images (FPGA bitstreams) also implements ``Programmable``:
the agent hands it a verified local file (``ImageFile``) and reads back what the
device has loaded (``LoadedImage``); doc/drivers.md, "Programmable drivers".

Each device lists the ``Service`` values it offers now or could offer (QAT services,
vGPU types, MIG profiles, the loaded FPGA function, VFs, namespaces). A driver whose
devices need host work before they can be handed out (binding ``vfio-pci``, creating
VFs, enabling QAT services) implements ``Installable``; one that can read live figures
(utilisation, memory, error counters) implements ``UsageReader``. doc/drivers.md,
"Services, install steps and usage"; doc/devices.md, the device states.

A driver whose devices can be split into slices on demand (vGPU mdevs, MIG instances,
SR-IOV VFs) implements ``Partitionable``: the agent hands it the operator's layout;
doc/drivers.md, "Partitions".

A driver that can tell whether a device is fit for new work (PCIe AER counters, a
degraded link, NVML's ECC and XID errors, an FPGA port's errors, an NVMe drive's
critical warnings) implements ``HealthReader``: a ``Health`` (state and reasons), which
the agent puts on the device in its snapshot; doc/drivers.md, "Health"; doc/devices.md,
"Health".

A driver whose devices can be handed to containers implements ``ContainerDevice``: for
an attach handle, the device nodes, environment and mounts a container needs
(``ContainerEdits``), which the agent writes as CDI specs; doc/drivers.md, "Containers".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "HEALTH_OK",
    "HEALTH_STATES",
    "HEALTH_UNHEALTHY",
    "HEALTH_WARNING",
    "PROGRAM_FORMATS",
    "AttachHandle",
    "ContainerDevice",
    "ContainerEdits",
    "Deployable",
    "Device",
    "DeviceNode",
    "Driver",
    "Health",
    "HealthReader",
    "ImageFile",
    "InstallError",
    "Installable",
    "LoadedImage",
    "Mount",
    "OnDemandSlices",
    "PartitionError",
    "Partitionable",
    "ProgramError",
    "Programmable",
    "Service",
    "UsageReader",
    "pci_cpid",
    "trait_suffix",
]

# The deployable attribute naming the image formats its driver loads (comma-separated,
# e.g. "gbs"): the server refuses a program whose image format is not among them.
PROGRAM_FORMATS = "program_formats"


@dataclasses.dataclass(frozen=True)
class AttachHandle:
    """One thing a VM or container can be given: a PCI function, an mdev …"""

    attach_type: str  # PCI, MDEV, TEST_PCI …
    attach_info: Mapping[str, str]

    def to_snapshot(self) -> dict[str, Any]:
        return {"attach_type": self.attach_type, "attach_info": dict(self.attach_info)}


@dataclasses.dataclass(frozen=True)
class Deployable:
    """A unit Placement sees as one resource provider."""

    name: str
    num_accelerators: int
    resource_class: str
    traits: tuple[str, ...] = ()
    attach_handles: tuple[AttachHandle, ...] = ()
    driver_name: str | None = None
    extra_attributes: tuple[tuple[str, str], ...] = ()

    def to_snapshot(self) -> dict[str, Any]:
        attributes = [{"key": "rc", "value": self.resource_class}]
        attributes += [{"key": f"trait{i}", "value": t} for i, t in enumerate(self.traits)]
        attributes += [{"key": k, "value": v} for k, v in self.extra_attributes]
        body: dict[str, Any] = {
            "name": self.name,
            "num_accelerators": self.num_accelerators,
            "attributes": attributes,
            "attach_handles": [h.to_snapshot() for h in self.attach_handles],
        }
        if self.driver_name is not None:
            body["driver_name"] = self.driver_name
        return body


@dataclasses.dataclass(frozen=True)
class Service:
    """Something a device offers (``enabled``) or could offer once configured.

    ``kind`` says what family the name belongs to, ``name`` is the service within it:

    ========================  ===============================  =========================
    kind                      name                             details (examples)
    ========================  ===============================  =========================
    ``qat``                   ``sym``, ``asym``, ``dc``        ``vfs`` (VFs serving it)
    ``vgpu``                  the mdev type (``nvidia-222``)   ``description``,
                                                               ``available_instances``
    ``mig``                   the profile (``1g.5gb``)         ``instances``
    ``fpga_function``         the loaded function/AFU id       ``region``, ``interface_id``
    ``sriov``                 ``vf``                           ``current``, ``total``,
                                                               ``physical_network``
    ``nvme_namespace``        the namespace (``nvme0n1``)      ``capacity_bytes``
    ========================  ===============================  =========================

    A service is listed even when the device is not configured to use it (a GPU not set
    up for vGPU still lists its mdev types, ``enabled`` False). Details are strings.
    """

    kind: str
    name: str
    enabled: bool
    details: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_snapshot(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "enabled": self.enabled,
            "details": dict(self.details),
        }


@dataclasses.dataclass(frozen=True)
class Device:
    """One physical card (or function) of the host."""

    type: str  # GPU, FPGA, AICHIP, QAT, NIC, SSD …
    vendor: str
    model: str
    driver_name: str
    controlpath_id: Mapping[str, str]  # PCI: domain, bus, device, function
    deployables: tuple[Deployable, ...]
    pci_address: str | None = None
    numa_node: int | None = None
    # The PCI address of the PCI Express root port above the device, and its IOMMU
    # group, where the host has them (None where the kernel shows none).
    pcie_root: str | None = None
    iommu_group: int | None = None
    firmware_version: str | None = None
    std_board_info: Mapping[str, str] = dataclasses.field(default_factory=dict)
    vendor_board_info: Mapping[str, str] = dataclasses.field(default_factory=dict)
    services: tuple[Service, ...] = ()

    def to_snapshot(self) -> dict[str, Any]:
        body = {
            "type": self.type,
            "vendor": self.vendor,
            "model": self.model,
            "driver_name": self.driver_name,
            "controlpath_id": {"cpid_type": "PCI", "cpid_info": dict(self.controlpath_id)},
            "pci_address": self.pci_address,
            "numa_node": self.numa_node,
            "firmware_version": self.firmware_version,
            "std_board_info": dict(self.std_board_info),
            "vendor_board_info": dict(self.vendor_board_info),
            "deployables": [d.to_snapshot() for d in self.deployables],
        }
        # Only where known: a device without them reports what it always did (its
        # snapshot, and so the host's hash, unchanged).
        if self.pcie_root is not None:
            body["pcie_root"] = self.pcie_root
        if self.iommu_group is not None:
            body["iommu_group"] = self.iommu_group
        # Only when there are some: a device without services reports what it always did
        # (its snapshot, and so the host's hash, unchanged).
        if self.services:
            body["services"] = [s.to_snapshot() for s in self.services]
        return body


@runtime_checkable
class Driver(Protocol):
    """What the agent calls. ``discover`` must be free of side effects."""

    name: str

    def discover(self) -> list[Device]: ...


@dataclasses.dataclass(frozen=True)
class ImageFile:
    """What the agent hands a driver to load: a local file it has verified (size and
    SHA-256, and the signature where one is required), with the image's declared ids."""

    path: str
    uuid: str
    sha256: str
    format: str  # "gbs", "xclbin", "simulated" …
    function_id: str | None = None
    interface_id: str | None = None


@dataclasses.dataclass(frozen=True)
class LoadedImage:
    """What a driver reads back from a device: the loaded function (AFU id, xclbin
    UUID …) and the interface (PR region) id, as the device reports them."""

    function_id: str | None
    interface_id: str | None = None
    image_uuid: str | None = None  # when the driver knows it (the simulated one does)


class ProgramError(RuntimeError):
    """``program`` could not load the image (the tool refused it, the device is not in a
    state to take it …). The message says why; the agent reports it and loads the
    previous image again where it can. ``untouched``: the driver knows the device was
    not changed (the tool refused before writing anything), so there is nothing to
    restore. Any other exception (a vendor tool's ``CommandFailed`` …) counts as a load
    that may have changed the device."""

    def __init__(self, message: str, *, untouched: bool = False) -> None:
        super().__init__(message)
        self.untouched = untouched


@runtime_checkable
class Programmable(Protocol):
    """A driver that can load images implements these besides [Driver].

    ``program`` loads ``image`` onto the deployable and returns once the tool is done,
    raising (``ProgramError``, ``CommandFailed`` …) when it failed; it is called only
    for formats listed in the deployable's ``program_formats`` attribute. ``loaded``
    reads what the device holds now (None: nothing, or the driver cannot tell); like
    ``discover``, it has no side effects. The agent compares ``loaded`` after
    ``program`` with the image's ids: a mismatch is a failure.
    """

    def program(self, device: Device, deployable: Deployable, image: ImageFile) -> None: ...

    def loaded(self, device: Device, deployable: Deployable) -> LoadedImage | None: ...


class InstallError(RuntimeError):
    """``install`` or ``uninstall`` could not do its work; the message says why (it is
    shown to the operator as the device's activation reason)."""


@runtime_checkable
class Installable(Protocol):
    """A driver whose devices need host work before they can be handed out.

    ``install`` makes ``device`` ready for use as ``settings`` say (the driver's own
    options, e.g. ``{"bind_driver": "vfio-pci"}``; the agent passes the driver's
    configuration): bind its functions to the named kernel driver (``driver_override``,
    ``unbind``, ``drivers_probe`` in sysfs), create the configured VFs
    (``sriov_numvfs``), enable the configured QAT services … It must be idempotent (a
    device already installed is left as it is) and raise ``InstallError`` (or
    ``CommandFailed``) when it cannot. ``uninstall`` undoes it (the functions go back
    to their default driver, VFs are removed …), equally idempotent. Both write only
    under the context's ``sysfs_root`` and through its runner. After either, the agent
    discovers again and checks the device with ``installed``, which, like ``discover``,
    has no side effects: True when the device is as ``install`` leaves it.
    """

    def install(self, device: Device, settings: Mapping[str, Any]) -> None: ...

    def uninstall(self, device: Device, settings: Mapping[str, Any]) -> None: ...

    def installed(self, device: Device, settings: Mapping[str, Any]) -> bool: ...


@runtime_checkable
class UsageReader(Protocol):
    """A driver that can read a device's live figures. ``usage`` returns numbers under
    the names of doc/drivers.md ("Usage"): ``utilization_percent``,
    ``memory_used_bytes``, ``memory_total_bytes``, ``errors_total``, ``requests_total``
    … (only those it can read; an empty mapping when none). No side effects, cheap:
    it is called at every report, unchanged ones included. The figures travel with the
    report but are not part of the inventory (not in its hash, not stored per report)."""

    def usage(self, device: Device) -> Mapping[str, float]: ...


class PartitionError(RuntimeError):
    """``partition`` could not apply a layout (the kernel refused a create, a slice that
    must go is in use, the device cannot make that many …); the message says why (it is
    shown to the operator as the device's partition reason)."""


@runtime_checkable
class Partitionable(Protocol):
    """A driver whose devices can be split into slices (vGPU mdevs, MIG instances, SR-IOV
    VFs) implements these besides [Driver] (doc/drivers.md, "Partitions").

    ``layout`` is what the operator set (doc/devices.md, "Partitions"): one of
    ``{"mdev": {type: count}}``, ``{"mig": {profile: count}}``, ``{"vfs": count}``, with
    ``"on_demand"`` beside it. ``partition`` makes the device so: it creates the slices
    missing and removes those in excess, never one in use on the host (an mdev
    ``nvidia/vm_name`` names a VM for …), raising ``PartitionError`` (before anything is
    removed) when it would have to, or when the device cannot make the layout (a kind or
    type it does not have, more than it can make). It must be idempotent (a device
    already so is left as it is) and write only under the context's ``sysfs_root``, its
    state folder and through its runner. Discovery then offers the slices that exist (one
    attach handle each). ``partitioned`` says, with no side effects, whether the device
    (as discovered after ``partition``) is as the layout asks.
    """

    def partition(self, device: Device, layout: Mapping[str, Any]) -> None: ...

    def partitioned(self, device: Device, layout: Mapping[str, Any]) -> bool: ...


@runtime_checkable
class OnDemandSlices(Protocol):
    """A ``Partitionable`` driver that makes slices on demand implements these too
    (doc/drivers.md, "Partitions"; doc/devices.md, "Partitions").

    With ``"on_demand": true`` in a device's layout, ``partition`` creates no slice (it
    removes those the layout no longer allows, as ever) and discovery offers every slice
    the layout allows, made or not, each as the attach handle it has once made: the
    same ``attach_info`` either way (a slice's identity never depends on whether it
    exists). A bind of one then waits until the agent has made it (``make_slice``), and
    once it is released the agent removes it (``remove_slice``).

    ``made_slices`` lists the device's on-demand slices that exist now (their attach
    handles), with no side effects. ``make_slice`` makes the one ``handle`` names
    (nothing when it exists); ``remove_slice`` removes it (nothing when it does not),
    raising ``PartitionError`` when it is in use on the host (an mdev ``nvidia/vm_name``
    names a VM for) or cannot be made or removed. Both are idempotent and write only
    where ``partition`` does.
    """

    def made_slices(self, device: Device) -> list[AttachHandle]: ...

    def make_slice(self, device: Device, handle: AttachHandle) -> None: ...

    def remove_slice(self, device: Device, handle: AttachHandle) -> None: ...


# A device's health states, least severe first (doc/devices.md, "Health"): ok, fit for
# new work; warning, fit but worth a look (still offered); unhealthy, not fit (the server
# takes it out of every offer until it has been healthy again for a while).
HEALTH_OK = "ok"
HEALTH_WARNING = "warning"
HEALTH_UNHEALTHY = "unhealthy"
HEALTH_STATES = (HEALTH_OK, HEALTH_WARNING, HEALTH_UNHEALTHY)
# The longest reason the inventory carries (schemas/inventory-v1.json).
MAX_HEALTH_REASON = 1024


@dataclasses.dataclass(frozen=True)
class Health:
    """A device's health: its ``state`` (one of ``HEALTH_STATES``) and the ``reasons``
    for it (none when ``ok``), each a short sentence an operator can act on.

    A reason names what crossed which threshold ("PCIe AER: fatal errors reported
    (CmpltTO)", "PCIe link x8, below its maximum x16"), never a live figure that grows
    (an error count, a temperature): the health travels in the snapshot, so a reason
    that changed at every report would make every report a changed one."""

    state: str = HEALTH_OK
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.state not in HEALTH_STATES:
            raise ValueError(
                f"a health state is one of {', '.join(HEALTH_STATES)}, not {self.state!r}"
            )
        if self.state == HEALTH_OK and self.reasons:
            raise ValueError("a healthy device has no reason to give")

    @classmethod
    def worst(cls, *findings: Health) -> Health:
        """The findings as one: the most severe state, with the reasons of every finding
        that is not ``ok``, those of the most severe first (each reason once)."""
        ranked = sorted(findings, key=lambda h: -HEALTH_STATES.index(h.state))
        if not ranked or ranked[0].state == HEALTH_OK:
            return cls()
        reasons = dict.fromkeys(r for h in ranked if h.state != HEALTH_OK for r in h.reasons)
        return cls(ranked[0].state, tuple(reasons))

    @property
    def reason(self) -> str | None:
        """The reasons as one sentence (None when there is none), at most
        ``MAX_HEALTH_REASON`` characters."""
        if not self.reasons:
            return None
        text = "; ".join(self.reasons)
        if len(text) > MAX_HEALTH_REASON:
            text = text[: MAX_HEALTH_REASON - 1] + "…"
        return text

    def to_snapshot(self) -> dict[str, Any]:
        body: dict[str, Any] = {"state": self.state}
        if self.reason is not None:
            body["reason"] = self.reason
        return body


@runtime_checkable
class HealthReader(Protocol):
    """A driver that can tell whether its devices are fit for new work.

    ``health`` returns ``device``'s ``Health`` (``device`` as ``discover`` just returned
    it). Called at every discovery, after ``discover``, so cheap; no side effects on the
    host (it may remember earlier readings in memory, to judge how fast a counter grows).
    Its thresholds are the agent's ``[health]`` options, in the context
    (``DriverContext.health``; ``exosuit.drivers.health.HealthSettings`` reads them).
    The agent puts the state and the reason on the device in its snapshot, so a change
    of health reaches the server with the next report; the figures behind it belong to
    ``usage``, never to the reason (``Health``). doc/drivers.md, "Health".
    """

    def health(self, device: Device) -> Health: ...


# What a device's container env names may be: the agent exports each as
# EXOSUIT_DEVICE_<n>_<NAME>.
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class DeviceNode:
    """A device node a container is given. ``path``: where the container sees it;
    ``host_path``: the node on the host (None: the same path). The container engine
    reads the node's type, major and minor from ``host_path`` when it creates the
    container, so the node must exist then. ``permissions``: the cgroup access (``r``,
    ``w``, ``m``); None leaves the engine's default (``rwm``)."""

    path: str
    host_path: str | None = None
    permissions: str | None = None

    def __post_init__(self) -> None:
        for value in (self.path, self.host_path):
            if value is not None and not value.startswith("/"):
                raise ValueError(f"a device node's paths are absolute, not {value!r}")
        if self.permissions is not None and (
            not self.permissions or set(self.permissions) - set("rwm")
        ):
            raise ValueError(f"device node permissions are r, w and m, not {self.permissions!r}")


@dataclasses.dataclass(frozen=True)
class Mount:
    """A host path a container is given at ``container_path`` (a bind mount unless
    ``type`` says otherwise; ``options`` as mount(8) takes them, e.g. ``("ro", "bind")``)."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str | None = None

    def __post_init__(self) -> None:
        for value in (self.host_path, self.container_path):
            if not value.startswith("/"):
                raise ValueError(f"a mount's paths are absolute, not {value!r}")


@dataclasses.dataclass(frozen=True)
class ContainerEdits:
    """What a container needs to use one attach handle: its device nodes, environment
    and mounts, as the kernel names them on this host.

    ``env`` names are per device (upper-case letters, digits and ``_``; e.g.
    ``PCI_ADDRESS``, ``VF_INDEX``, ``FPGA_FUNCTION``): the agent exports each as
    ``EXOSUIT_DEVICE_<n>_<NAME>``, ``n`` being the device's place in its claim, so that
    two devices in one container never overwrite each other's (doc/drivers.md,
    "Containers", lists the names in use).
    """

    device_nodes: tuple[DeviceNode, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()

    def __post_init__(self) -> None:
        for name in self.env:
            if not _ENV_NAME.match(name):
                raise ValueError(
                    f"a container env name is upper-case letters, digits and _, not {name!r}"
                )


@runtime_checkable
class ContainerDevice(Protocol):
    """A driver whose devices can be handed to containers implements this besides [Driver].

    ``container_edits`` says what a container needs to use ``attach_handle`` (one of
    ``device``'s, as ``discover`` returned it, or as the server stored it) on this host:
    the device nodes as the kernel names them (``/dev/vfio/<group>`` for a function
    bound to vfio-pci, the vendor driver's nodes otherwise), environment and mounts.
    Read from sysfs (under the context's root) and the vendor's proc files; like
    ``discover``, no side effects and deterministic. Raise (``ValueError`` with a
    message an operator can act on: ``0000:3b:00.0 is bound to no driver``) when the
    handle cannot be given to a container on this host now; the agent reports the
    message as the claim's CDI failure.
    """

    def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits: ...


def pci_cpid(address: str) -> dict[str, str]:
    """``0000:3b:00.1`` → ``{"domain": "0000", "bus": "3b", "device": "00", "function": "1"}``."""
    domain, bus, rest = address.split(":")
    device, function = rest.split(".")
    return {"domain": domain, "bus": bus, "device": device, "function": function}


_GUID = re.compile(
    r"^(?:0x)?\{?([0-9a-f]{8})-?([0-9a-f]{4})-?([0-9a-f]{4})-?([0-9a-f]{4})-?"
    r"([0-9a-f]{12})\}?$",
    re.IGNORECASE,
)


def trait_suffix(value: str) -> str:
    """Normalise an id for use in a trait name (``^CUSTOM_[A-Z0-9_]+$``).

    A GUID, with or without dashes or braces (``d8424dc4-a4a3-c413-…``, ``D8424DC4A4A3…``),
    becomes its 32 upper-case hex digits, so the sysfs form and the UUID form name the
    same trait (and compare equal: the agent checks a loaded function id this way).
    Anything else is upper-cased and every run of other characters becomes one ``_``.
    Cyborg's bind code instead turns ``-`` into ``_-``, which is not a valid trait name.
    """
    value = value.strip()
    match = _GUID.match(value)
    if match:
        return "".join(match.groups()).upper()
    return re.sub(r"[^A-Z0-9]+", "_", value.upper()).strip("_")
