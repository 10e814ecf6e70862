"""The nvidia_gpu driver: NVIDIA GPUs as whole devices (PGPU), vGPU types (VGPU) and MIG.

What it reads (doc/drivers/nvidia_gpu.md has the operator's view):

* sysfs (Documentation/ABI/testing/sysfs-bus-pci): every PCI function with vendor
  ``10de`` and class ``0300xx`` (VGA compatible controller) or ``0302xx`` (3D
  controller). An SR-IOV virtual function (it has a ``physfn`` link) is never a GPU
  of its own: on A100-class cards the VFs back vGPUs, they are not more GPUs.
* mediated device types (Documentation/ABI/testing/sysfs-bus-vfio-mdev):
  ``mdev_supported_types/<type>/{name,available_instances,devices/}`` of the GPU, or
  of each of its VFs on SR-IOV vGPU cards, for the GPUs configured for vGPU.
* ``nvidia-smi`` through the command runner: VBIOS version, serial and name; MIG mode.
* NVML (``exosuit.drivers.nvml``): serial, UUID and MIG mode, and the MIG instances.

A missing nvidia-smi or NVML costs only what they would have told.

Services (listed whether the GPU is configured for them or not): every vGPU type of
``mdev_supported_types`` (kind ``vgpu``: ``description``, the type's ``name``;
``available_instances``, summed over the VFs on SR-IOV vGPU cards; ``instances``, the
mdevs there are), enabled when ``[nvidia_gpu] vgpu_types`` gives the GPU that type; and,
with NVML, every GPU-instance profile (kind ``mig``: ``instances``, ``max_instances``,
``available`` while MIG is enabled, ``memory_mib``), enabled when instances of it exist.
Install step (``Installable``): ``[nvidia_gpu] bind_driver`` (e.g. vfio-pci) for the
GPUs offered whole (exosuit.drivers.binding); ``[nvidia_gpu] mdevs`` (``TYPE:COUNT``) for
the GPUs offered as vGPUs of that type: mdevs created as
Documentation/driver-api/vfio-mediated-device.rst says (a UUID written to
``mdev_supported_types/<type>/create`` of the GPU, or of each VF on SR-IOV vGPU cards),
with Exosuit's slot UUIDs, up to COUNT counting those that exist; what it created is
remembered in the state folder (``MDEVS_FILE``) and removed on uninstall (``1`` to
``/sys/bus/mdev/devices/<uuid>/remove``), never one the NVIDIA vGPU manager shows in use
(``nvidia/vm_name``). Usage (``UsageReader``, NVML): ``utilization_percent``,
``memory_used_bytes``, ``memory_total_bytes``.

Health (``HealthReader``): the GPU's PCIe AER counters, link and bus
(exosuit.drivers.health), and what NVML says (``Nvml.health``): a GPU NVML calls lost
(fallen off the bus), an XID of ``[health] xid_unhealthy`` (``xid_warning``) within the
window, uncorrected ECC errors since the driver loaded (``ecc_uncorrected_unhealthy``),
corrected ones within the window (``ecc_corrected_warning``), retired pages
(``retired_pages_unhealthy``) and pages pending retirement, a row remapping failure and
rows pending remapping (a GPU reset applies those two pendings: warning).

Containers (``ContainerDevice``), per attach handle:

* a whole GPU (``PCI``) bound to vfio-pci: ``/dev/vfio/<group>``; on the ``nvidia``
  driver: ``/dev/nvidia<minor>`` (``Device Minor`` of the driver's
  ``/proc/driver/nvidia/gpus/<address>/information``), ``/dev/nvidiactl``,
  ``/dev/nvidia-uvm`` and the GPU's DRM render node where nvidia-drm made one;
* a vGPU (``MDEV``): ``/dev/vfio/<group>`` of the mdev (its ``iommu_group``);
* a MIG instance (``MIG``): its GPU's nodes and the instance's two capability nodes,
  ``/dev/nvidia-caps/nvidia-cap<minor>`` (``DeviceFileMinor`` of
  ``/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<id>/access`` and
  ``…/gi<id>/ci<id>/access``; NVIDIA's MIG user guide, "Device Nodes and
  Capabilities").

with ``GPU_UUID``, ``MDEV_UUID``, ``VGPU_TYPE`` or ``MIG_UUID`` as they apply.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import subprocess
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

from oslo_config import cfg, types

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
    InstallError,
    Service,
    pci_cpid,
)
from exosuit.drivers.binding import BindingInstall, bind_driver_option
from exosuit.drivers.container import (
    VFIO_PCI,
    function_edits,
    handle_address,
    vfio_nodes,
)
from exosuit.drivers.health import CounterWindow, HealthSettings, PciHealth
from exosuit.drivers.nvidia_partitions import MdevPartitions
from exosuit.drivers.nvml import (
    MigInstance,
    Nvml,
    NvmlGpu,
    NvmlHealth,
    NvmlUnavailable,
    RecordedNvml,
    bus_id_to_address,
    open_pynvml,
)
from exosuit.drivers.runner import CommandRunner
from exosuit.drivers.state import read_state, write_state
from exosuit.drivers.sysfs import PciFunction

__all__ = ["MDEVS_FILE", "InvalidVgpuConfig", "NvidiaGpuDriver", "nvml_findings", "parse_mdevs"]

LOG = logging.getLogger(__name__)

NVIDIA = "10de"
_CONTROLLERS = {"0300": "VGA compatible controller", "0302": "3D controller"}
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_NOT_AVAILABLE = {"", "N/A", "[N/A]", "[Not Supported]", "[Unknown Error]"}
# Generated mdev UUIDs are uuid5(this, "<host>/<parent address>/<type>/<slot>"): the
# same on every discovery, so an attach handle keeps its identity when its mdev is
# created with that UUID and then shows up among the existing ones.
_MDEV_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "mdev.exosuit.dev")
# In the driver's state folder: the mdevs the install step created (UUID → its GPU, parent
# and type), which are the only ones uninstall removes.
MDEVS_FILE = "mdevs.json"
# What an mdev type id may be: it is a directory name in sysfs (``nvidia-223``, ``i915-GVTg_V5_4``).
_TYPE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_SMI_DEVICE_QUERY = "pci.bus_id,vbios_version,serial,name"
_SMI_MIG_QUERY = "pci.bus_id,mig.mode.current,mig.mode.pending"


class _Unset(enum.Enum):
    """The type of ``_UNSET``, so that "not given" and None ("no NVML") stay apart."""

    UNSET = enum.auto()


_UNSET: Final = _Unset.UNSET


class InvalidVgpuConfig(ValueError):
    """``[nvidia_gpu] vgpu_types`` names a GPU or a vGPU type this host does not have."""


def _trait_token(text: str) -> str:
    """``T4-1B`` → ``T4_1B``, ``1g.5gb`` → ``1G_5GB``: what a custom trait may hold."""
    return re.sub(r"[^A-Z0-9]+", "_", text.upper()).strip("_")


def _parse_vgpu_types(value: Any) -> dict[str, str]:
    if not value:
        return {}
    if isinstance(value, str):
        try:
            value = types.Dict(key_value_separator="=")(value)
        except ValueError as error:
            raise InvalidVgpuConfig(f"[nvidia_gpu] vgpu_types: {error}") from error
    parsed: dict[str, str] = {}
    for address, vgpu_type in dict(value).items():
        address = str(address).strip().lower()
        if not _PCI_ADDRESS.match(address):
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: {address!r} is not a PCI address such as 0000:af:00.0"
            )
        if address in parsed:
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: {address} is given more than one vGPU type"
            )
        if not str(vgpu_type).strip():
            raise InvalidVgpuConfig(f"[nvidia_gpu] vgpu_types: no vGPU type for {address}")
        parsed[address] = str(vgpu_type).strip()
    return parsed


def parse_mdevs(value: Any) -> dict[str, int]:
    """``[nvidia_gpu] mdevs``: ``["nvidia-223:4", "nvidia-471:2"]`` (or one string,
    comma-separated) → ``{"nvidia-223": 4, "nvidia-471": 2}``; empty → {}. Raises
    InvalidVgpuConfig for an item that is not ``TYPE:COUNT``, a count that is not a whole
    number ≥ 0, or a type given twice."""
    if not value:
        return {}
    items = value.split(",") if isinstance(value, str) else list(value)
    parsed: dict[str, int] = {}
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        vgpu_type, colon, count = (part.strip() for part in item.rpartition(":"))
        if not colon or not _TYPE_ID.match(vgpu_type):
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] mdevs: {item!r} is not TYPE:COUNT, such as nvidia-223:4"
            )
        if not count.isdigit():
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] mdevs: the count of {vgpu_type} ({count!r}) is not a whole number"
            )
        if vgpu_type in parsed:
            raise InvalidVgpuConfig(f"[nvidia_gpu] mdevs: {vgpu_type} is given more than once")
        parsed[vgpu_type] = int(count)
    return parsed


class NvidiaGpuDriver(MdevPartitions, BindingInstall):
    """Implements [exosuit.drivers.base.Driver], [exosuit.drivers.base.Installable],
    [exosuit.drivers.base.UsageReader], [exosuit.drivers.base.HealthReader],
    [exosuit.drivers.base.ContainerDevice] and, for vGPU mdevs
    (exosuit/drivers/nvidia_partitions.py), [exosuit.drivers.base.Partitionable]."""

    name = "nvidia_gpu"
    OPTIONS = [
        cfg.Opt(
            "vgpu_types",
            type=types.Dict(key_value_separator="="),
            default={},
            help="ADDRESS=TYPE pairs: the GPUs offered as vGPUs (resource class VGPU) "
            "and the mediated device type each exposes, one type per GPU, for example "
            "0000:af:00.0=nvidia-223,0000:b0:00.0=nvidia-223. Cyborg's [gpu_devices] "
            "enabled_vgpu_types with [vgpu_<type>] device_addresses, in one option. "
            "Every other GPU is offered whole (PGPU), or as its MIG instances.",
        ),
        cfg.StrOpt(
            "nvidia_smi",
            default="nvidia-smi",
            help="The nvidia-smi command, asked for VBIOS versions, serials, names and "
            "MIG modes. Empty: never run it.",
        ),
        cfg.BoolOpt(
            "use_nvml",
            default=True,
            help="Ask NVML (the nvidia-ml-py package, `pip install exosuit[nvidia]`) for "
            "MIG modes, instances and profiles, and for utilisation and memory (usage), "
            "when the library and the NVIDIA driver are present.",
        ),
        bind_driver_option(),
        cfg.ListOpt(
            "mdevs",
            default=[],
            help="TYPE:COUNT pairs: the mediated devices (vGPUs) the install step creates on "
            "each GPU that vgpu_types gives TYPE, when an operator marks the GPU ready, e.g. "
            "nvidia-223:4 (four per GPU, those that exist counted; on SR-IOV vGPU cards such "
            "as the A100, one per VF). Refused when the GPU's available_instances cannot "
            "make up COUNT. Marking the GPU inactive removes the mdevs the install created "
            "(never others). Empty: no mdev is created or removed; discovery offers the "
            "mdevs that exist.",
        ),
    ]

    def __init__(self, context: DriverContext, nvml: Nvml | None | _Unset = _UNSET) -> None:
        """``nvml``: an [exosuit.drivers.nvml.Nvml], or None for none; by default the real
        one on a live host (sysfs root ``/``) and ``<root>/nvml.json`` on a recorded one."""
        settings = context.settings or {}
        self.hostname = context.hostname
        self.sysfs_root = context.sysfs_root
        self.sysfs = context.open_sysfs()
        self.state_dir = context.state_dir
        self.runner: CommandRunner = context.runner
        self.vgpu_types = _parse_vgpu_types(settings.get("vgpu_types"))
        mdevs = parse_mdevs(settings.get("mdevs"))
        unused = sorted(set(mdevs) - set(self.vgpu_types.values()))
        if unused:
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] mdevs: vgpu_types gives no GPU the type {', '.join(unused)}; "
                "mdevs are created only on GPUs offered as vGPUs of their type"
            )
        self.nvidia_smi = settings.get("nvidia_smi", "nvidia-smi")
        self.use_nvml = bool(settings.get("use_nvml", True))
        self._nvml: Nvml | None | _Unset = nvml
        # What the install step created, when there is no state folder (this process only).
        self._created_here: dict[str, dict[str, str]] = {}
        self.health_settings = context.health_settings()
        self.pci_health = PciHealth(self.sysfs, self.health_settings)
        # Health's memory: when each GPU last had each XID, and its corrected ECC counts.
        self._xids_seen: dict[str, dict[int, float]] = {}
        self._ecc_corrected: dict[str, CounterWindow] = {}

    # -- discovery -----------------------------------------------------------------

    def discover(self) -> list[Device]:
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        gpus = [f for f in functions.values() if _is_nvidia_gpu(f) and not f.is_vf]
        self._check_vgpu_addresses(gpus, functions)
        if not gpus:
            return []
        smi = self._smi_query(_SMI_DEVICE_QUERY)
        smi_mig = self._smi_query(_SMI_MIG_QUERY)
        nvml = self._nvml_gpus()
        return [
            self._device(gpu, smi.get(gpu.address), smi_mig.get(gpu.address), nvml.get(gpu.address))
            for gpu in gpus
        ]

    def _check_vgpu_addresses(
        self, gpus: list[PciFunction], functions: Mapping[str, PciFunction]
    ) -> None:
        found = {g.address for g in gpus}
        for address in sorted(set(self.vgpu_types) - found):
            function = functions.get(address)
            if function is not None and function.is_vf and _is_nvidia_gpu(function):
                raise InvalidVgpuConfig(
                    f"[nvidia_gpu] vgpu_types: {address} is an SR-IOV virtual function; "
                    f"configure its GPU, {function.physfn}"
                )
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: there is no NVIDIA GPU at {address} on this host"
            )

    def _device(
        self,
        gpu: PciFunction,
        smi: list[str | None] | None,
        smi_mig: list[str | None] | None,
        nvml: NvmlGpu | None,
    ) -> Device:
        vbios, serial, smi_name = smi if smi else (None, None, None)
        if nvml is not None:
            mig_mode, mig_pending = nvml.mig_mode, nvml.mig_mode_pending
        elif smi_mig:
            mig_mode, mig_pending = (_smi_mode(v) for v in smi_mig)
        else:
            mig_mode = mig_pending = None
        traits = ["OWNER_CYBORG", f"CUSTOM_NVIDIA_{gpu.device_id.upper()}"]
        extra_traits = ["CUSTOM_NVIDIA_MIG_CAPABLE"] if mig_mode is not None else []

        # The operator's partition layout, when it asks mdevs, wins over the configuration.
        vgpu_type = self.partition_type(gpu.address) or self.vgpu_types.get(gpu.address)
        if vgpu_type is not None:
            deployables: tuple[Deployable, ...] = (
                self._vgpu(gpu, vgpu_type, traits, extra_traits),
            )
        elif mig_mode == "enabled":
            # A partitioned GPU is offered as its MIG instances, never whole.
            instances = nvml.mig_instances if nvml is not None else ()
            deployables = self._mig(gpu, instances, traits + extra_traits)
        else:
            deployables = (
                Deployable(
                    name=f"{self.hostname}_{gpu.address}",
                    num_accelerators=1,
                    resource_class="PGPU",
                    traits=tuple(traits + extra_traits),
                    attach_handles=(AttachHandle("PCI", pci_cpid(gpu.address)),),
                    driver_name=self.name,
                ),
            )

        board = {
            "kernel_driver": gpu.driver,
            "serial": serial or (nvml.serial if nvml else None),
            "uuid": nvml.uuid if nvml else None,
            "mig_mode": mig_mode,
            "mig_mode_pending": mig_pending,
            "sriov_totalvfs": _str(gpu.sriov_totalvfs),
            "sriov_numvfs": _str(gpu.sriov_numvfs),
        }
        return Device(
            type="GPU",
            vendor=NVIDIA,
            model=smi_name or (nvml.name if nvml else None) or f"NVIDIA {NVIDIA}:{gpu.device_id}",
            driver_name=self.name,
            controlpath_id=pci_cpid(gpu.address),
            pci_address=gpu.address,
            numa_node=gpu.numa_node,
            firmware_version=vbios or (nvml.vbios_version if nvml else None),
            std_board_info={
                "product_id": gpu.device_id,
                "controller": _CONTROLLERS[gpu.class_code[:4]],
            },
            vendor_board_info={k: v for k, v in board.items() if v},
            deployables=deployables,
            services=self._vgpu_services(gpu) + _mig_services(nvml),
        )

    # -- services ----------------------------------------------------------------------

    def _vgpu_services(self, gpu: PciFunction) -> tuple[Service, ...]:
        """Every mdev type the GPU (or its VFs) supports, configured or not."""
        on_bus = {m.lower() for m in self.sysfs.listdir("bus", "mdev", "devices")}
        types: dict[str, dict[str, Any]] = {}
        for parent in self._mdev_parents(gpu):
            for type_id in self.sysfs.listdir(
                "bus", "pci", "devices", parent, "mdev_supported_types"
            ):
                found = types.setdefault(
                    type_id,
                    {
                        "name": self.sysfs.read(*self._type_dir(parent, type_id, "name"))
                        or type_id,
                        "available": 0,
                        "instances": 0,
                    },
                )
                found["available"] += _int(
                    self.sysfs.read(*self._type_dir(parent, type_id, "available_instances"))
                )
                found["instances"] += sum(
                    m.lower() in on_bus
                    for m in self.sysfs.listdir(*self._type_dir(parent, type_id, "devices"))
                )
        configured = self.vgpu_types.get(gpu.address)
        return tuple(
            Service(
                "vgpu",
                type_id,
                type_id == configured,
                {
                    "description": found["name"],
                    "available_instances": str(found["available"]),
                    "instances": str(found["instances"]),
                },
            )
            for type_id, found in sorted(types.items(), key=lambda t: _natural(t[0]))
        )

    # -- usage -------------------------------------------------------------------------

    def usage(self, device: Device) -> Mapping[str, float]:
        """Implements [exosuit.drivers.base.UsageReader]: NVML's utilisation and memory
        ({} without NVML, or for a GPU it does not manage, e.g. one bound to vfio-pci)."""
        nvml = self._nvml_source()
        if nvml is None or device.pci_address is None:
            return {}
        try:
            found = nvml.usage(device.pci_address)
        except NvmlUnavailable as error:
            LOG.info("nvidia_gpu: NVML unavailable for usage: %s", error)
            return {}
        if found is None:
            return {}
        figures = {
            "utilization_percent": found.utilization_percent,
            "memory_used_bytes": found.memory_used_bytes,
            "memory_total_bytes": found.memory_total_bytes,
        }
        return {k: float(v) for k, v in figures.items() if v is not None}

    # -- health ------------------------------------------------------------------------

    def health(self, device: Device) -> Health:
        """Implements [exosuit.drivers.base.HealthReader]: the GPU's AER counters, link
        and bus, and what NVML says of it (the module's docstring)."""
        address = device.pci_address or ""
        findings = [self.pci_health.check(address)]
        nvml = self._nvml_source()
        if nvml is not None and address:
            try:
                found = nvml.health(address)
            except NvmlUnavailable as error:
                LOG.info("nvidia_gpu: NVML unavailable for health: %s", error)
                found = None
            if found is not None:
                findings.append(self._nvml_health(address, found))
        return Health.worst(*findings)

    def _nvml_health(self, address: str, found: NvmlHealth) -> Health:
        now = time.monotonic()
        seen = self._xids_seen.setdefault(address, {})
        for xid in found.xids:
            seen[xid] = now
        window = self.health_settings.window
        for xid in [x for x, at in seen.items() if at <= now - window]:
            del seen[xid]
        corrected = None
        if found.ecc_corrected is not None:
            counter = self._ecc_corrected.setdefault(address, CounterWindow(window))
            corrected = counter.add(found.ecc_corrected)
        return nvml_findings(self.health_settings, found, sorted(seen), corrected)

    # -- vGPU (mediated devices) -----------------------------------------------------

    def _mdev_parents(self, gpu: PciFunction) -> list[str]:
        """Where the GPU's mdev types are: on the GPU, or on each VF (SR-IOV vGPU cards)."""
        if self.sysfs.listdir("bus", "pci", "devices", gpu.address, "mdev_supported_types"):
            return [gpu.address]
        return [
            vf
            for vf in gpu.virtfns
            if self.sysfs.listdir("bus", "pci", "devices", vf, "mdev_supported_types")
        ]

    def _type_dir(self, parent: str, vgpu_type: str, *rest: str) -> tuple[str, ...]:
        return ("bus", "pci", "devices", parent, "mdev_supported_types", vgpu_type, *rest)

    def _vgpu(
        self, gpu: PciFunction, vgpu_type: str, traits: list[str], extra_traits: list[str]
    ) -> Deployable:
        parents = self._mdev_parents(gpu)
        supported: dict[str, str] = {}
        for parent in parents:
            for type_id in self.sysfs.listdir(
                "bus", "pci", "devices", parent, "mdev_supported_types"
            ):
                supported.setdefault(
                    type_id, self.sysfs.read(*self._type_dir(parent, type_id, "name")) or type_id
                )
        if not supported:
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: GPU {gpu.address} offers no mediated device "
                f"types (bound to {gpu.driver or 'no driver'}; vGPUs need the NVIDIA vGPU "
                "host driver, and SR-IOV vGPU cards need their VFs enabled)"
            )
        if vgpu_type not in supported:
            known = ", ".join(f"{t} ({n})" for t, n in sorted(supported.items()))
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: GPU {gpu.address} does not support vGPU type "
                f"{vgpu_type!r}; it supports: {known}"
            )
        type_name = supported[vgpu_type]
        words = type_name.split()
        # Cyborg's trait suffix: the second word of the type's name ("GRID T4-1B" → T4_1B).
        suffix = _trait_token(words[1] if len(words) > 1 else type_name)

        # Only mdevs that exist are offered (the install step creates them, ``mdevs``): a
        # handle for an instance still available would be a device that is not there;
        # but an on-demand layout offers its slots, made or not (a bind makes its own).
        on_bus = self._mdevs_on_bus()
        handles: list[AttachHandle] = []
        slots = self.on_demand_count(gpu.address)
        if slots is not None:
            handles = self._slot_handles(parents, vgpu_type, slots)
        for parent in self._type_parents(parents, vgpu_type) if slots is None else ():
            available = self._available(parent, vgpu_type)
            existing = self._existing_mdevs(parent, vgpu_type, on_bus)
            handles += self._mdev_handles(parent, vgpu_type, available, existing)
        return Deployable(
            name=f"{self.hostname}_{gpu.address}",
            num_accelerators=len(handles),
            resource_class="VGPU",
            traits=(traits[0], f"{traits[1]}_{suffix}", *extra_traits),
            attach_handles=tuple(handles),
            driver_name=self.name,
            extra_attributes=(("vgpu_type", vgpu_type), ("vgpu_type_name", type_name)),
        )

    def _mdev_handles(
        self, parent: str, vgpu_type: str, available: int, existing: list[str]
    ) -> list[AttachHandle]:
        """One MDEV handle per existing mdev, by its UUID; none for the instances still
        available (``available``), which no mdev backs until one is created.

        An mdev whose UUID is one of Exosuit's generated "slot" UUIDs (slots 0, 1, …:
        the UUIDs on-demand creation will use) is marked ``<type>_<slot>``; one made
        elsewhere ``<type>_<its UUID>``.
        """

        slots = {
            self._slot_uuid(parent, vgpu_type, i): i
            for i in range(max(64, 2 * (available + len(existing))))
        }
        # mdev UUID → its place: (0, slot) for slots, (1, UUID) for mdevs made elsewhere.
        places: dict[str, tuple[int, int | str]] = {}
        for mdev in (m.lower() for m in existing):
            index = slots.get(mdev)
            places[mdev] = (0, index) if index is not None else (1, mdev)
        cpid = pci_cpid(parent)
        return [
            AttachHandle(
                "MDEV",
                {
                    **cpid,
                    "asked_type": vgpu_type,
                    "vgpu_mark": f"{vgpu_type}_{place[1]}",
                    "mdev_uuid": mdev,
                },
            )
            for mdev, place in sorted(places.items(), key=lambda item: item[1])
        ]

    def _slot_uuid(self, parent: str, vgpu_type: str, index: int) -> str:
        """Exosuit's UUID for slot ``index`` of ``vgpu_type`` on ``parent``: the same on
        every discovery and every host restart (doc/drivers/nvidia_gpu.md)."""
        key = f"{self.hostname}/{parent}/{vgpu_type}/{index}"
        return str(uuid.uuid5(_MDEV_NAMESPACE, key))

    def _mdevs_on_bus(self) -> set[str]:
        return {m.lower() for m in self.sysfs.listdir("bus", "mdev", "devices")}

    def _type_parents(self, parents: list[str], vgpu_type: str) -> list[str]:
        """The parents that have ``vgpu_type`` among their mdev_supported_types."""
        return [p for p in parents if self.sysfs.listdir(*self._type_dir(p, vgpu_type))]

    def _available(self, parent: str, vgpu_type: str) -> int:
        return _int(self.sysfs.read(*self._type_dir(parent, vgpu_type, "available_instances")))

    def _existing_mdevs(self, parent: str, vgpu_type: str, on_bus: set[str]) -> list[str]:
        """The mdevs of ``vgpu_type`` on ``parent`` (its ``devices/``) that are on the mdev bus."""
        return [
            m.lower()
            for m in self.sysfs.listdir(*self._type_dir(parent, vgpu_type, "devices"))
            if m.lower() in on_bus
        ]

    # -- Installable: bind_driver (BindingInstall), then the configured mdevs -------------

    def install(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: ``bind_driver`` for a GPU offered
        whole; for a GPU offered as vGPUs of a type ``mdevs`` names, that many mdevs of it
        (those that exist counted), created with slot UUIDs where ``available_instances``
        allows, the GPU's own or its VFs' in order. Refused before anything is written when
        they cannot make up the count."""
        super().install(device, settings)
        work = self._mdev_work(device, settings)
        if work is None:
            return
        vgpu_type, wanted = work
        address = device.pci_address or ""
        parents = self._vgpu_parents(address, vgpu_type)
        on_bus = self._mdevs_on_bus()
        existing = sum(len(self._existing_mdevs(p, vgpu_type, on_bus)) for p in parents)
        needed = wanted - existing
        if needed <= 0:
            return
        available = {p: self._available(p, vgpu_type) for p in parents}
        if sum(available.values()) < needed:
            raise InstallError(
                f"GPU {address}: [nvidia_gpu] mdevs asks {wanted} mdevs of {vgpu_type}; "
                f"{existing} exist and available_instances allows {sum(available.values())} "
                f"more, so at most {existing + sum(available.values())} are possible"
            )
        plan: list[tuple[str, str]] = []  # (parent, UUID), in creation order
        for parent in parents:
            for mdev in self._free_slots(parent, vgpu_type, on_bus, available[parent]):
                if len(plan) < needed:
                    plan.append((parent, mdev))
        created = self._created()
        for parent, mdev in plan:  # remembered first: a crash in between leaves none unknown
            created[mdev] = {"gpu": address, "parent": parent, "type": vgpu_type}
        self._save_created(created)
        made: list[str] = []
        for parent, mdev in plan:
            try:
                self.sysfs.write(*self._type_dir(parent, vgpu_type, "create"), value=mdev)
            except OSError as error:
                for _, unmade in plan[len(made) :]:
                    del created[unmade]
                self._save_created(created)
                self._roll_back(made, created)
                raise InstallError(
                    f"GPU {address}: writing {mdev} to {parent}'s "
                    f"mdev_supported_types/{vgpu_type}/create: {error}"
                ) from error
            made.append(mdev)

    def _free_slots(self, parent: str, vgpu_type: str, on_bus: set[str], count: int) -> list[str]:
        """The first ``count`` slot UUIDs of ``parent`` that no mdev has."""
        found: list[str] = []
        index = 0
        while len(found) < count:
            mdev = self._slot_uuid(parent, vgpu_type, index)
            if mdev not in on_bus:
                found.append(mdev)
            index += 1
        return found

    def _roll_back(self, made: list[str], created: dict[str, dict[str, str]]) -> None:
        """After a failed create: remove the mdevs this install made (best effort: the
        create's own error is what the operator needs to read)."""
        try:
            self._remove_mdevs(made, created)
        except InstallError as error:
            LOG.warning("nvidia_gpu: %s", error)

    def uninstall(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: removes the mdevs the install
        step created on this GPU (the state folder says which; never one made elsewhere),
        whatever ``mdevs`` says now; refused, with nothing removed, while the NVIDIA vGPU
        manager shows one of them in use by a VM (``nvidia/vm_name``). Then the binding."""
        address = device.pci_address or ""
        created = self._created()
        ours = sorted(m for m, at in created.items() if at.get("gpu") == address)
        if ours:
            on_bus = self._mdevs_on_bus()
            held = {
                m: vm
                for m in ours
                if m in on_bus
                and (vm := self.sysfs.read("bus", "mdev", "devices", m, "nvidia", "vm_name"))
            }
            if held:
                users = ", ".join(f"{m} (VM {vm})" for m, vm in sorted(held.items()))
                raise InstallError(
                    f"GPU {address}: its mdevs are in use, so none is removed: {users}"
                )
            self._remove_mdevs(ours, created)
        super().uninstall(device, settings)

    def _remove_mdevs(self, mdevs: list[str], created: dict[str, dict[str, str]]) -> None:
        """Write 1 to each mdev's ``remove`` (one gone already is only forgotten), and
        forget each removed from ``created`` (saved)."""
        try:
            for mdev in mdevs:
                if mdev in self._mdevs_on_bus():
                    try:
                        self.sysfs.write("bus", "mdev", "devices", mdev, "remove", value="1")
                    except OSError as error:
                        raise InstallError(
                            f"writing 1 to /sys/bus/mdev/devices/{mdev}/remove: {error}"
                        ) from error
                created.pop(mdev, None)
        finally:
            self._save_created(created)

    def installed(self, device: Device, settings: Mapping[str, Any]) -> bool:
        """Implements [exosuit.drivers.base.Installable]: bound as ``bind_driver`` says,
        and, for a GPU offered as vGPUs of a type ``mdevs`` names, at least that many mdevs
        of it exist (on the mdev bus)."""
        if not super().installed(device, settings):
            return False
        work = self._mdev_work(device, settings)
        if work is None:
            return True
        vgpu_type, wanted = work
        parents = self._vgpu_parents(device.pci_address or "", vgpu_type)
        on_bus = self._mdevs_on_bus()
        return sum(len(self._existing_mdevs(p, vgpu_type, on_bus)) for p in parents) >= wanted

    def _mdev_work(self, device: Device, settings: Mapping[str, Any]) -> tuple[str, int] | None:
        """(type, count) when the device is offered as vGPUs of a type ``mdevs`` names
        with a count; None: no mdev to create."""
        try:
            mdevs = parse_mdevs(settings.get("mdevs"))
        except InvalidVgpuConfig as error:
            raise InstallError(str(error)) from None
        for deployable in device.deployables:
            if deployable.resource_class == "VGPU":
                vgpu_type = dict(deployable.extra_attributes).get("vgpu_type")
                if vgpu_type is not None and mdevs.get(vgpu_type):
                    return vgpu_type, mdevs[vgpu_type]
        return None

    def _vgpu_parents(self, address: str, vgpu_type: str) -> list[str]:
        """Where the GPU's mdevs of ``vgpu_type`` are made: the GPU, or its VFs."""
        gpu = self.sysfs.pci_function(address)
        if gpu is None:
            raise InstallError(f"{address}: no such PCI function")
        parents = self._type_parents(self._mdev_parents(gpu), vgpu_type)
        if not parents:
            raise InstallError(
                f"GPU {address} offers no mediated device type {vgpu_type} (bound to "
                f"{gpu.driver or 'no driver'}; vGPUs need the NVIDIA vGPU host driver)"
            )
        return parents

    def _created(self) -> dict[str, dict[str, str]]:
        if self.state_dir is None:
            return {m: dict(at) for m, at in self._created_here.items()}
        created: dict[str, dict[str, str]] = read_state(self.state_dir, MDEVS_FILE).get(
            "created", {}
        )
        return created

    def _save_created(self, created: dict[str, dict[str, str]]) -> None:
        if self.state_dir is None:
            self._created_here = {m: dict(at) for m, at in created.items()}
            return
        write_state(self.state_dir, MDEVS_FILE, {"version": 1, "created": created})

    # -- containers --------------------------------------------------------------------

    def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits:
        """Implements [exosuit.drivers.base.ContainerDevice] (the module's docstring)."""
        address = handle_address(attach_handle)
        info = attach_handle.attach_info
        if attach_handle.attach_type == "MDEV":
            mdev = str(info.get("mdev_uuid") or "")
            if not mdev or not os.path.isdir(self.sysfs.path("bus", "mdev", "devices", mdev)):
                raise ValueError(f"the mdev {mdev} of {address} does not exist on this host")
            env = {"PCI_ADDRESS": address, "MDEV_UUID": mdev}
            if info.get("asked_type"):
                env["VGPU_TYPE"] = str(info["asked_type"])
            vfio = vfio_nodes(self.sysfs, f"the mdev {mdev}", "bus", "mdev", "devices", mdev)
            return ContainerEdits(device_nodes=vfio, env=env)
        function = self.sysfs.pci_function(address)
        if function is None:
            raise ValueError(f"there is no PCI function {address} on this host")
        if function.driver == VFIO_PCI and attach_handle.attach_type == "PCI":
            return function_edits(self.sysfs, address)
        if function.driver != "nvidia":
            raise ValueError(
                f"{address} is bound to {function.driver or 'no driver'}, not nvidia nor "
                f"{VFIO_PCI}: a container cannot use it"
            )
        gpu = self._proc_fields("driver", "nvidia", "gpus", address, "information")
        minor = gpu.get("Device Minor")
        if minor is None or not minor.isdigit():
            raise ValueError(
                f"the nvidia driver does not say the device minor of {address} "
                "(/proc/driver/nvidia/gpus/<address>/information): is the driver loaded?"
            )
        nodes = [
            DeviceNode(f"/dev/nvidia{minor}"),
            DeviceNode("/dev/nvidiactl"),
            DeviceNode("/dev/nvidia-uvm"),
        ]
        env = {"GPU_UUID": gpu["GPU UUID"]} if gpu.get("GPU UUID") else {}
        if attach_handle.attach_type == "MIG":
            nodes += self._mig_capabilities(minor, info)
            env["MIG_UUID"] = str(info.get("mig_uuid") or "")
        return function_edits(self.sysfs, address, nodes=nodes, env=env)

    def _mig_capabilities(self, minor: str, info: Mapping[str, str]) -> list[DeviceNode]:
        """The capability nodes of a MIG instance's GPU and compute instances."""
        base = ("driver", "nvidia", "capabilities", f"gpu{minor}", "mig")
        gi, ci = f"gi{info.get('gpu_instance_id')}", f"ci{info.get('compute_instance_id')}"
        nodes = []
        for path in ((*base, gi, "access"), (*base, gi, ci, "access")):
            cap = self._proc_fields(*path).get("DeviceFileMinor")
            if cap is None or not cap.isdigit():
                raise ValueError(
                    f"the nvidia driver shows no capability for MIG instance "
                    f"{info.get('mig_uuid')} (/proc/{'/'.join(path)})"
                )
            nodes.append(DeviceNode(f"/dev/nvidia-caps/nvidia-cap{cap}"))
        return nodes

    def _proc_fields(self, *parts: str) -> dict[str, str]:
        """``Key: value`` lines of a proc file under the context's root ({} if absent)."""
        try:
            with open(os.path.join(self.sysfs_root, "proc", *parts), errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return {}
        fields = {}
        for line in lines:
            key, colon, value = line.partition(":")
            if colon:
                fields[key.strip()] = value.strip()
        return fields

    # -- MIG ---------------------------------------------------------------------------

    def _mig(
        self, gpu: PciFunction, instances: tuple[MigInstance, ...], traits: list[str]
    ) -> tuple[Deployable, ...]:
        profiles: dict[str, list[MigInstance]] = {}
        for instance in instances:
            profiles.setdefault(instance.profile, []).append(instance)
        return tuple(
            Deployable(
                name=f"{self.hostname}_{gpu.address}_mig_{profile}",
                num_accelerators=len(members),
                resource_class=f"CUSTOM_NVIDIA_MIG_{_trait_token(profile)}",
                traits=tuple(traits),
                attach_handles=tuple(
                    AttachHandle(
                        "MIG",
                        {
                            **pci_cpid(gpu.address),
                            "mig_uuid": m.uuid,
                            "profile": profile,
                            "gpu_instance_id": str(m.gpu_instance_id),
                            "compute_instance_id": str(m.compute_instance_id),
                        },
                    )
                    for m in members
                ),
                driver_name=self.name,
                extra_attributes=(("mig_profile", profile),),
            )
            for profile, members in sorted(profiles.items())
        )

    # -- vendor tools ----------------------------------------------------------------

    def _smi_query(self, fields: str) -> dict[str, list[str | None]]:
        """``nvidia-smi --query-gpu=<fields>`` rows by PCI address; {} without the tool."""
        if not self.nvidia_smi:
            return {}
        argv = [self.nvidia_smi, f"--query-gpu={fields}", "--format=csv,noheader"]
        try:
            result = self.runner.run(argv)
        except (OSError, subprocess.SubprocessError) as error:
            LOG.info("nvidia_gpu: %s unavailable: %s", self.nvidia_smi, error)
            return {}
        if result.returncode != 0:
            LOG.warning(
                "nvidia_gpu: %s exited %s: %s",
                " ".join(argv),
                result.returncode,
                (result.stderr or result.stdout).strip(),
            )
            return {}
        count = fields.count(",") + 1
        rows: dict[str, list[str | None]] = {}
        for line in result.stdout.splitlines():
            values = [v.strip() for v in line.split(",", count - 1)]
            if len(values) != count:
                continue
            try:
                address = bus_id_to_address(values[0])
            except ValueError:
                continue
            rows[address] = [None if v in _NOT_AVAILABLE else v for v in values[1:]]
        return rows

    def _nvml_source(self) -> Nvml | None:
        if not isinstance(self._nvml, _Unset):
            return self._nvml
        nvml: Nvml | None = None
        if not self.use_nvml:
            nvml = None
        elif os.path.abspath(self.sysfs_root) == "/":
            nvml = open_pynvml()
        else:
            # A recorded host: its recorded NVML answers, never this machine's NVML.
            path = os.path.join(self.sysfs_root, "nvml.json")
            nvml = RecordedNvml.from_file(path) if os.path.exists(path) else None
        self._nvml = nvml
        return nvml

    def _nvml_gpus(self) -> Mapping[str, NvmlGpu]:
        nvml = self._nvml_source()
        if nvml is None:
            return {}
        try:
            return nvml.gpus()
        except NvmlUnavailable as error:
            LOG.warning("nvidia_gpu: NVML unavailable: %s", error)
            return {}


def nvml_findings(
    settings: HealthSettings,
    found: NvmlHealth,
    xids: list[int],
    corrected_growth: int | None,
) -> Health:
    """What NVML's answers make a GPU under ``settings``: ``xids``, those seen within the
    window; ``corrected_growth``, corrected ECC errors within the window."""
    if found.lost:
        return Health(HEALTH_UNHEALTHY, ("NVML: the GPU is lost (fallen off the bus)",))
    findings = []
    window = f"{settings.window:g} s"
    bad = [x for x in xids if x in settings.xid_unhealthy]
    if bad:
        listed = ", ".join(str(x) for x in bad)
        findings.append(Health(HEALTH_UNHEALTHY, (f"NVIDIA XID {listed} within {window}",)))
    odd = [x for x in xids if x in settings.xid_warning and x not in settings.xid_unhealthy]
    if odd:
        listed = ", ".join(str(x) for x in odd)
        findings.append(Health(HEALTH_WARNING, (f"NVIDIA XID {listed} within {window}",)))
    threshold = settings.ecc_uncorrected_unhealthy
    if threshold and (found.ecc_uncorrected or 0) >= threshold:
        reason = "NVML: uncorrected ECC errors since the driver loaded"
        findings.append(Health(HEALTH_UNHEALTHY, (reason,)))
    threshold = settings.ecc_corrected_warning
    if threshold and (corrected_growth or 0) >= threshold:
        reason = f"NVML: {threshold} or more corrected ECC errors within {window}"
        findings.append(Health(HEALTH_WARNING, (reason,)))
    threshold = settings.retired_pages_unhealthy
    if threshold and (found.retired_pages or 0) >= threshold:
        reason = f"NVML: {threshold} or more memory pages retired"
        findings.append(Health(HEALTH_UNHEALTHY, (reason,)))
    if found.retired_pages_pending:
        reason = "NVML: memory pages are pending retirement (a GPU reset retires them)"
        findings.append(Health(HEALTH_WARNING, (reason,)))
    if found.remapped_rows_failure:
        findings.append(Health(HEALTH_UNHEALTHY, ("NVML: a memory row remapping failed",)))
    if found.remapped_rows_pending:
        reason = "NVML: memory rows are pending remapping (a GPU reset remaps them)"
        findings.append(Health(HEALTH_WARNING, (reason,)))
    return Health.worst(*findings)


def _mig_services(nvml: NvmlGpu | None) -> tuple[Service, ...]:
    """Every GPU-instance profile NVML says the GPU supports, and the profiles of its MIG
    instances; enabled where instances of it exist."""
    if nvml is None:
        return ()
    counts: dict[str, int] = {}
    for instance in nvml.mig_instances:
        counts[instance.profile] = counts.get(instance.profile, 0) + 1
    services = []
    for profile in nvml.mig_profiles:
        details = {
            "instances": str(counts.pop(profile.name, 0)),
            "max_instances": str(profile.max_instances),
        }
        if profile.available is not None:
            details["available"] = str(profile.available)
        if profile.memory_mib is not None:
            details["memory_mib"] = str(profile.memory_mib)
        services.append(Service("mig", profile.name, details["instances"] != "0", details))
    for name, count in sorted(counts.items()):  # instances of a profile NVML did not list
        services.append(Service("mig", name, True, {"instances": str(count)}))
    return tuple(services)


def _natural(text: str) -> list[tuple[int, str]]:
    """``nvidia-99`` before ``nvidia-223``: runs of digits compared as numbers."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", text)]


def _is_nvidia_gpu(function: PciFunction) -> bool:
    return function.vendor_id == NVIDIA and function.class_code[:4] in _CONTROLLERS


def _smi_mode(value: str | None) -> str | None:
    return value.strip().lower() if value else None


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def _str(value: int | None) -> str | None:
    return str(value) if value is not None else None
