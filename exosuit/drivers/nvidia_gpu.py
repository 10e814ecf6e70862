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
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import uuid
from collections.abc import Mapping
from typing import Any

from oslo_config import cfg, types

from exosuit.drivers import DriverContext
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from exosuit.drivers.nvml import (
    MigInstance,
    Nvml,
    NvmlGpu,
    NvmlUnavailable,
    RecordedNvml,
    bus_id_to_address,
    open_pynvml,
)
from exosuit.drivers.runner import CommandRunner
from exosuit.drivers.sysfs import PciFunction, Sysfs

__all__ = ["InvalidVgpuConfig", "NvidiaGpuDriver"]

LOG = logging.getLogger(__name__)

NVIDIA = "10de"
_CONTROLLERS = {"0300": "VGA compatible controller", "0302": "3D controller"}
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_NOT_AVAILABLE = {"", "N/A", "[N/A]", "[Not Supported]", "[Unknown Error]"}
# Generated mdev UUIDs are uuid5(this, "<host>/<parent address>/<type>/<slot>"): the
# same on every discovery, so an attach handle keeps its identity when its mdev is
# created with that UUID and then shows up among the existing ones.
_MDEV_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "mdev.exosuit.dev")
_SMI_DEVICE_QUERY = "pci.bus_id,vbios_version,serial,name"
_SMI_MIG_QUERY = "pci.bus_id,mig.mode.current,mig.mode.pending"
_UNSET = object()


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
                f"[nvidia_gpu] vgpu_types: {address!r} is not a PCI address "
                "such as 0000:af:00.0")
        if address in parsed:
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: {address} is given more than one vGPU type")
        if not str(vgpu_type).strip():
            raise InvalidVgpuConfig(f"[nvidia_gpu] vgpu_types: no vGPU type for {address}")
        parsed[address] = str(vgpu_type).strip()
    return parsed


class NvidiaGpuDriver:
    """Implements [exosuit.drivers.base.Driver]."""

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
            "MIG modes and instances when the library and the NVIDIA driver are present.",
        ),
    ]

    def __init__(self, context: DriverContext, nvml: Any = _UNSET) -> None:
        """``nvml``: an [exosuit.drivers.nvml.Nvml], or None for none; by default the real
        one on a live host (sysfs root ``/``) and ``<root>/nvml.json`` on a recorded one."""
        settings = context.settings or {}
        self.hostname = context.hostname
        self.sysfs_root = context.sysfs_root
        self.sysfs = Sysfs(context.sysfs_root)
        self.runner: CommandRunner = context.runner
        self.vgpu_types = _parse_vgpu_types(settings.get("vgpu_types"))
        self.nvidia_smi = settings.get("nvidia_smi", "nvidia-smi")
        self.use_nvml = bool(settings.get("use_nvml", True))
        self._nvml = nvml

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
            self._device(gpu, smi.get(gpu.address), smi_mig.get(gpu.address),
                         nvml.get(gpu.address))
            for gpu in gpus
        ]

    def _check_vgpu_addresses(self, gpus: list[PciFunction],
                              functions: Mapping[str, PciFunction]) -> None:
        found = {g.address for g in gpus}
        for address in sorted(set(self.vgpu_types) - found):
            function = functions.get(address)
            if function is not None and function.is_vf and _is_nvidia_gpu(function):
                raise InvalidVgpuConfig(
                    f"[nvidia_gpu] vgpu_types: {address} is an SR-IOV virtual function; "
                    f"configure its GPU, {function.physfn}")
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: there is no NVIDIA GPU at {address} on this host")

    def _device(self, gpu: PciFunction, smi: list[str | None] | None,
                smi_mig: list[str | None] | None, nvml: NvmlGpu | None) -> Device:
        vbios, serial, smi_name = smi if smi else (None, None, None)
        if nvml is not None:
            mig_mode, mig_pending = nvml.mig_mode, nvml.mig_mode_pending
        elif smi_mig:
            mig_mode, mig_pending = (_smi_mode(v) for v in smi_mig)
        else:
            mig_mode = mig_pending = None
        traits = ["OWNER_CYBORG", f"CUSTOM_NVIDIA_{gpu.device_id.upper()}"]
        extra_traits = ["CUSTOM_NVIDIA_MIG_CAPABLE"] if mig_mode is not None else []

        vgpu_type = self.vgpu_types.get(gpu.address)
        if vgpu_type is not None:
            deployables: tuple[Deployable, ...] = (
                self._vgpu(gpu, vgpu_type, traits, extra_traits),)
        elif mig_mode == "enabled":
            # A partitioned GPU is offered as its MIG instances, never whole.
            instances = nvml.mig_instances if nvml is not None else ()
            deployables = self._mig(gpu, instances, traits + extra_traits)
        else:
            deployables = (Deployable(
                name=f"{self.hostname}_{gpu.address}",
                num_accelerators=1,
                resource_class="PGPU",
                traits=tuple(traits + extra_traits),
                attach_handles=(AttachHandle("PCI", pci_cpid(gpu.address)),),
                driver_name=self.name,
            ),)

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
            std_board_info={"product_id": gpu.device_id,
                            "controller": _CONTROLLERS[gpu.class_code[:4]]},
            vendor_board_info={k: v for k, v in board.items() if v},
            deployables=deployables,
        )

    # -- vGPU (mediated devices) -----------------------------------------------------

    def _mdev_parents(self, gpu: PciFunction) -> list[str]:
        """Where the GPU's mdev types are: on the GPU, or on each VF (SR-IOV vGPU cards)."""
        if self.sysfs.listdir("bus", "pci", "devices", gpu.address, "mdev_supported_types"):
            return [gpu.address]
        return [vf for vf in gpu.virtfns
                if self.sysfs.listdir("bus", "pci", "devices", vf, "mdev_supported_types")]

    def _type_dir(self, parent: str, vgpu_type: str, *rest: str) -> tuple[str, ...]:
        return ("bus", "pci", "devices", parent, "mdev_supported_types", vgpu_type, *rest)

    def _vgpu(self, gpu: PciFunction, vgpu_type: str, traits: list[str],
              extra_traits: list[str]) -> Deployable:
        parents = self._mdev_parents(gpu)
        supported: dict[str, str] = {}
        for parent in parents:
            for type_id in self.sysfs.listdir("bus", "pci", "devices", parent,
                                              "mdev_supported_types"):
                supported.setdefault(type_id, self.sysfs.read(*self._type_dir(
                    parent, type_id, "name")) or type_id)
        if not supported:
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: GPU {gpu.address} offers no mediated device "
                f"types (bound to {gpu.driver or 'no driver'}; vGPUs need the NVIDIA vGPU "
                "host driver, and SR-IOV vGPU cards need their VFs enabled)")
        if vgpu_type not in supported:
            known = ", ".join(f"{t} ({n})" for t, n in sorted(supported.items()))
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: GPU {gpu.address} does not support vGPU type "
                f"{vgpu_type!r}; it supports: {known}")
        type_name = supported[vgpu_type]
        words = type_name.split()
        # Cyborg's trait suffix: the second word of the type's name ("GRID T4-1B" → T4_1B).
        suffix = _trait_token(words[1] if len(words) > 1 else type_name)

        handles: list[AttachHandle] = []
        for parent in parents:
            if not self.sysfs.listdir(*self._type_dir(parent, vgpu_type)):
                continue
            available = _int(self.sysfs.read(*self._type_dir(
                parent, vgpu_type, "available_instances")))
            existing = self.sysfs.listdir(*self._type_dir(parent, vgpu_type, "devices"))
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

    def _mdev_handles(self, parent: str, vgpu_type: str, available: int,
                      existing: list[str]) -> list[AttachHandle]:
        """One MDEV handle per existing mdev (its UUID) and per instance still available.

        Free instances get generated UUIDs, "slots" 0, 1, … skipping slots whose mdev
        exists: once an mdev is created with a slot's UUID, its handle stays the same.
        """
        def slot_uuid(index: int) -> str:
            key = f"{self.hostname}/{parent}/{vgpu_type}/{index}"
            return str(uuid.uuid5(_MDEV_NAMESPACE, key))

        slots = {slot_uuid(i): i for i in range(max(64, 2 * (available + len(existing))))}
        # mdev UUID → its place: (0, slot) for slots, (1, UUID) for mdevs made elsewhere.
        places: dict[str, tuple[int, int | str]] = {}
        for mdev in (m.lower() for m in existing):
            index = slots.get(mdev)
            places[mdev] = (0, index) if index is not None else (1, mdev)
        index = 0
        free = 0
        while free < available:
            candidate = slot_uuid(index)
            if candidate not in places:
                places[candidate] = (0, index)
                free += 1
            index += 1
        cpid = pci_cpid(parent)
        return [
            AttachHandle("MDEV", {**cpid, "asked_type": vgpu_type,
                                  "vgpu_mark": f"{vgpu_type}_{place[1]}", "mdev_uuid": mdev})
            for mdev, place in sorted(places.items(), key=lambda item: item[1])
        ]

    # -- MIG ---------------------------------------------------------------------------

    def _mig(self, gpu: PciFunction, instances: tuple[MigInstance, ...],
             traits: list[str]) -> tuple[Deployable, ...]:
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
                    AttachHandle("MIG", {
                        **pci_cpid(gpu.address),
                        "mig_uuid": m.uuid,
                        "profile": profile,
                        "gpu_instance_id": str(m.gpu_instance_id),
                        "compute_instance_id": str(m.compute_instance_id),
                    })
                    for m in members),
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
            LOG.warning("nvidia_gpu: %s exited %s: %s", " ".join(argv), result.returncode,
                        (result.stderr or result.stdout).strip())
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
        if self._nvml is not _UNSET:
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
