"""What the nvidia_gpu driver asks NVIDIA's management library (NVML), behind one interface.

``Nvml.gpus()`` returns one ``NvmlGpu`` per physical GPU the NVIDIA driver manages,
keyed by PCI address. Two implementations:

* ``PynvmlNvml`` asks the real library through nvidia-ml-py (``import pynvml``);
  ``open_pynvml()`` returns None when the module, ``libnvidia-ml.so.1`` or the
  kernel driver is missing, so a host without them simply has no NVML.
* ``RecordedNvml`` answers from a JSON recording of NVML's answers (tests, and
  recorded hosts under ``tests/fixtures/<host>/nvml.json``).

Both turn NVML's raw answers (bus ids such as ``00000000:41:00.0``, MIG modes 0/1,
MIG device names such as ``NVIDIA A100-SXM4-40GB MIG 1g.5gb``) into values
through the same functions, so a recording exercises the same parsing as a host.

Recording format::

    {"devices": [{"pci_bus_id": "00000000:41:00.0", "name": "NVIDIA A100-SXM4-40GB",
                  "uuid": "GPU-…", "serial": "…", "vbios_version": "92.00.45.00.06",
                  "mig_mode": [1, 1],            # [current, pending]; null: not MIG capable
                  "mig_devices": [{"uuid": "MIG-…", "name": "… MIG 1g.5gb",
                                   "gpu_instance_id": 9, "compute_instance_id": 0,
                                   "memory_total": 4987027456}]}]}

A field that NVML answered with an error (Not Supported …) is null.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "MigInstance",
    "Nvml",
    "NvmlGpu",
    "NvmlUnavailable",
    "PynvmlNvml",
    "RecordedNvml",
    "bus_id_to_address",
    "mig_profile",
    "open_pynvml",
]


class NvmlUnavailable(RuntimeError):
    """NVML cannot answer (no library, no kernel driver, or it failed to initialise)."""


@dataclasses.dataclass(frozen=True)
class MigInstance:
    """One MIG device: a compute instance inside a GPU instance."""

    uuid: str  # MIG-…, what CUDA_VISIBLE_DEVICES and CDI name it by
    profile: str  # 1g.5gb, 3g.20gb, 1c.3g.20gb …
    gpu_instance_id: int
    compute_instance_id: int
    memory_mib: int | None


@dataclasses.dataclass(frozen=True)
class NvmlGpu:
    pci_address: str  # 0000:41:00.0
    name: str | None
    uuid: str | None
    serial: str | None
    vbios_version: str | None
    mig_mode: str | None  # "enabled" / "disabled"; None: the GPU cannot do MIG
    mig_mode_pending: str | None
    mig_instances: tuple[MigInstance, ...] = ()


@runtime_checkable
class Nvml(Protocol):
    def gpus(self) -> Mapping[str, NvmlGpu]:
        """Every GPU NVML manages, by PCI address. Raises NvmlUnavailable."""
        ...


def bus_id_to_address(bus_id: str | bytes) -> str:
    """NVML's ``00000000:3B:00.0`` → sysfs's ``0000:3b:00.0``."""
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode()
    domain, bus, rest = bus_id.strip().lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{rest}"


_MIG_NAME = re.compile(r"\bMIG\s+(\S+)\s*$")


def mig_profile(name: str) -> str:
    """``NVIDIA A100-SXM4-40GB MIG 1g.5gb`` → ``1g.5gb`` (the whole name if no MIG suffix)."""
    match = _MIG_NAME.search(name)
    return match.group(1) if match else name.strip()


def _mode(value: int | None) -> str | None:
    if value is None:
        return None
    return "enabled" if int(value) == 1 else "disabled"


def _gpu(raw: Mapping[str, Any]) -> NvmlGpu:
    mode = raw.get("mig_mode")
    instances = []
    for mig in raw.get("mig_devices") or ():
        memory = mig.get("memory_total")
        instances.append(MigInstance(
            uuid=str(mig["uuid"]),
            profile=mig_profile(str(mig["name"])),
            gpu_instance_id=int(mig["gpu_instance_id"]),
            compute_instance_id=int(mig["compute_instance_id"]),
            memory_mib=int(memory) // (1024 * 1024) if memory is not None else None,
        ))
    instances.sort(key=lambda m: (m.gpu_instance_id, m.compute_instance_id, m.uuid))
    return NvmlGpu(
        pci_address=bus_id_to_address(raw["pci_bus_id"]),
        name=raw.get("name"),
        uuid=raw.get("uuid"),
        serial=raw.get("serial"),
        vbios_version=raw.get("vbios_version"),
        mig_mode=_mode(mode[0]) if mode else None,
        mig_mode_pending=_mode(mode[1]) if mode else None,
        mig_instances=tuple(instances),
    )


def _by_address(raws: Sequence[Mapping[str, Any]]) -> dict[str, NvmlGpu]:
    gpus = (_gpu(raw) for raw in raws)
    return {gpu.pci_address: gpu for gpu in gpus}


class RecordedNvml:
    """Implements [Nvml] from a recording (see the module docstring for its format)."""

    def __init__(self, recording: Mapping[str, Any]) -> None:
        self.recording = recording

    @classmethod
    def from_file(cls, path: str) -> RecordedNvml:
        with open(path) as f:
            return cls(json.load(f))

    def gpus(self) -> dict[str, NvmlGpu]:
        if "error" in self.recording:  # a recorded nvmlInit failure
            raise NvmlUnavailable(str(self.recording["error"]))
        return _by_address(self.recording.get("devices", []))


class PynvmlNvml:
    """Implements [Nvml] with nvidia-ml-py. Initialises and shuts NVML down on each call."""

    def __init__(self, pynvml: Any) -> None:
        self.pynvml = pynvml

    def gpus(self) -> dict[str, NvmlGpu]:
        nvml = self.pynvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            raise NvmlUnavailable(f"nvmlInit: {error}") from error
        try:
            return _by_address([self._raw(nvml.nvmlDeviceGetHandleByIndex(i))
                                for i in range(nvml.nvmlDeviceGetCount())])
        except nvml.NVMLError as error:
            raise NvmlUnavailable(str(error)) from error
        finally:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass

    def _optional(self, call: Callable[..., Any], *args: Any) -> Any:
        """NVML's answer, or None where the GPU does not support the query."""
        try:
            value = call(*args)
        except self.pynvml.NVMLError as error:
            if getattr(error, "value", None) in (self.pynvml.NVML_ERROR_NOT_SUPPORTED,
                                                 self.pynvml.NVML_ERROR_NOT_FOUND):
                return None
            raise
        return value.decode() if isinstance(value, bytes) else value

    def _raw(self, handle: Any) -> dict[str, Any]:
        nvml = self.pynvml
        raw: dict[str, Any] = {
            "pci_bus_id": nvml.nvmlDeviceGetPciInfo(handle).busId,
            "name": self._optional(nvml.nvmlDeviceGetName, handle),
            "uuid": self._optional(nvml.nvmlDeviceGetUUID, handle),
            "serial": self._optional(nvml.nvmlDeviceGetSerial, handle),
            "vbios_version": self._optional(nvml.nvmlDeviceGetVbiosVersion, handle),
            "mig_mode": self._optional(nvml.nvmlDeviceGetMigMode, handle),
            "mig_devices": [],
        }
        if raw["mig_mode"] and int(raw["mig_mode"][0]) == nvml.NVML_DEVICE_MIG_ENABLE:
            for index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                mig = self._optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
                if mig is None:  # an empty slot
                    continue
                memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, mig)
                raw["mig_devices"].append({
                    "uuid": self._optional(nvml.nvmlDeviceGetUUID, mig),
                    "name": self._optional(nvml.nvmlDeviceGetName, mig) or "",
                    "gpu_instance_id": nvml.nvmlDeviceGetGpuInstanceId(mig),
                    "compute_instance_id": nvml.nvmlDeviceGetComputeInstanceId(mig),
                    "memory_total": memory.total if memory is not None else None,
                })
        return raw


def open_pynvml() -> PynvmlNvml | None:
    """The real NVML, or None when nvidia-ml-py, the library or the driver is missing."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None
    return PynvmlNvml(pynvml)
