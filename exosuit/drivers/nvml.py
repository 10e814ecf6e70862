"""What the nvidia_gpu driver asks NVIDIA's management library (NVML), behind one interface.

``Nvml.gpus()`` returns one ``NvmlGpu`` per physical GPU the NVIDIA driver manages,
keyed by PCI address, with its MIG instances and the GPU-instance profiles it supports;
``Nvml.usage(address)`` one GPU's live figures (utilisation, memory), cheap enough for
every report; ``Nvml.health(address)`` what NVML says of its health (lost, XID errors,
retired pages, remapped rows, ECC counts). Two implementations:

* ``PynvmlNvml`` asks the real library through nvidia-ml-py (``import pynvml``);
  ``open_pynvml()`` returns None when the module, ``libnvidia-ml.so.1`` or the
  kernel driver is missing, so a host without them simply has no NVML.
* ``RecordedNvml`` answers from a JSON recording of NVML's answers (tests, and
  ``<sysfs root>/nvml.json`` of a host tree such as ``tests/fixtures/nvidia-gpu-host``).

Both turn NVML's raw answers (bus ids such as ``00000000:41:00.0``, MIG modes 0/1,
MIG device names such as ``NVIDIA A100-SXM4-40GB MIG 1g.5gb``) into values
through the same functions, so a recording exercises the same parsing as a host.

Recording format::

    {"devices": [{"pci_bus_id": "00000000:41:00.0", "name": "NVIDIA A100-SXM4-40GB",
                  "uuid": "GPU-…", "serial": "…", "vbios_version": "92.00.45.00.06",
                  "mig_mode": [1, 1],            # [current, pending]; null: not MIG capable
                  "mig_devices": [{"uuid": "MIG-…", "name": "… MIG 1g.5gb",
                                   "gpu_instance_id": 9, "compute_instance_id": 0,
                                   "memory_total": 4987027456}],
                  # nvmlDeviceGetGpuInstanceProfileInfo (v2) for each profile index the
                  # GPU supports, with nvmlDeviceGetGpuInstanceRemainingCapacity (null
                  # while MIG is disabled): the profiles it could be partitioned into.
                  "gpu_instance_profiles": [{"profile": 0, "id": 19, "name": "MIG 1g.5gb",
                                             "instance_count": 7, "memory_size_mb": 4864,
                                             "remaining_capacity": 2}],
                  # nvmlDeviceGetUtilizationRates and nvmlDeviceGetMemoryInfo
                  "utilization": {"gpu": 37, "memory": 12},
                  "memory": {"total": 16106127360, "used": 2147483648},
                  # What health() reads: "lost", NVML_ERROR_GPU_IS_LOST for the GPU;
                  # "xid_errors", the XIDs of the nvmlEventTypeXidCriticalError events an
                  # event set delivered (replayed at every read);
                  # nvmlDeviceGetRetiredPages (per cause) and …PendingStatus;
                  # nvmlDeviceGetRemappedRows; nvmlDeviceGetTotalEccErrors (volatile).
                  "health": {"lost": false, "xid_errors": [],
                             "retired_pages": {"single_bit": 0, "double_bit": 0},
                             "retired_pages_pending": false,
                             "remapped_rows": {"correctable": 0, "uncorrectable": 0,
                                               "pending": false, "failure": false},
                             "ecc_errors": {"volatile_corrected": 0,
                                            "volatile_uncorrected": 0}}}]}

A field that NVML answered with an error (Not Supported …) is null (a GPU without
``health`` answered none of the health queries).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

LOG = logging.getLogger(__name__)

__all__ = [
    "MigInstance",
    "MigProfile",
    "Nvml",
    "NvmlGpu",
    "NvmlHealth",
    "NvmlUnavailable",
    "NvmlUsage",
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
class MigProfile:
    """A GPU-instance profile the GPU supports (``nvidia-smi mig -lgip``)."""

    name: str  # 1g.5gb, 1g.5gb+me, 7g.40gb …
    profile_id: int  # what nvmlDeviceCreateGpuInstance takes
    max_instances: int  # how many of it the whole GPU holds
    memory_mib: int | None
    available: int | None  # how many more can be created now; None: MIG is disabled


@dataclasses.dataclass(frozen=True)
class NvmlUsage:
    """One GPU's live figures; None where NVML does not say (utilisation in MIG mode …)."""

    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


@dataclasses.dataclass(frozen=True)
class NvmlHealth:
    """What NVML says of one GPU's health; None where it does not say (Not Supported).

    ``xids``: the XID errors NVML reported since the last read (``PynvmlNvml``: from its
    event set; ``RecordedNvml``: the recording's, at every read). ``ecc_*``: volatile
    counts (since the driver loaded). ``retired_pages``: single- and double-bit causes
    together."""

    lost: bool = False
    xids: tuple[int, ...] = ()
    retired_pages: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    ecc_uncorrected: int | None = None
    ecc_corrected: int | None = None


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
    mig_profiles: tuple[MigProfile, ...] = ()


@runtime_checkable
class Nvml(Protocol):
    def gpus(self) -> Mapping[str, NvmlGpu]:
        """Every GPU NVML manages, by PCI address. Raises NvmlUnavailable."""
        ...

    def usage(self, address: str) -> NvmlUsage | None:
        """The live figures of the GPU at ``address``; None when NVML does not manage it.
        Raises NvmlUnavailable."""
        ...

    def health(self, address: str) -> NvmlHealth | None:
        """What NVML says of the health of the GPU at ``address``; None when NVML does
        not manage it. Raises NvmlUnavailable."""
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
        instances.append(
            MigInstance(
                uuid=str(mig["uuid"]),
                profile=mig_profile(str(mig["name"])),
                gpu_instance_id=int(mig["gpu_instance_id"]),
                compute_instance_id=int(mig["compute_instance_id"]),
                memory_mib=int(memory) // (1024 * 1024) if memory is not None else None,
            )
        )
    instances.sort(key=lambda m: (m.gpu_instance_id, m.compute_instance_id, m.uuid))
    profiles = []
    for info in sorted(raw.get("gpu_instance_profiles") or (), key=lambda i: int(i["profile"])):
        memory = info.get("memory_size_mb")
        remaining = info.get("remaining_capacity")
        profiles.append(
            MigProfile(
                name=mig_profile(str(info["name"])),
                profile_id=int(info["id"]),
                max_instances=int(info["instance_count"]),
                memory_mib=int(memory) if memory is not None else None,
                available=int(remaining) if remaining is not None else None,
            )
        )
    return NvmlGpu(
        pci_address=bus_id_to_address(raw["pci_bus_id"]),
        name=raw.get("name"),
        uuid=raw.get("uuid"),
        serial=raw.get("serial"),
        vbios_version=raw.get("vbios_version"),
        mig_mode=_mode(mode[0]) if mode else None,
        mig_mode_pending=_mode(mode[1]) if mode else None,
        mig_instances=tuple(instances),
        mig_profiles=tuple(profiles),
    )


def _usage(raw: Mapping[str, Any]) -> NvmlUsage:
    utilization = raw.get("utilization") or {}
    memory = raw.get("memory") or {}
    gpu, used, total = utilization.get("gpu"), memory.get("used"), memory.get("total")
    return NvmlUsage(
        utilization_percent=float(gpu) if gpu is not None else None,
        memory_used_bytes=int(used) if used is not None else None,
        memory_total_bytes=int(total) if total is not None else None,
    )


def _optional_int(value: Any) -> int | None:
    return int(value) if value is not None else None


def _optional_bool(value: Any) -> bool | None:
    return bool(value) if value is not None else None


def _health(raw: Mapping[str, Any] | None) -> NvmlHealth:
    """A recording's (or PynvmlNvml's) ``health`` object as a value."""
    raw = raw or {}
    pages = raw.get("retired_pages")
    retired = None
    if isinstance(pages, Mapping) and any(v is not None for v in pages.values()):
        retired = sum(int(v) for v in pages.values() if v is not None)
    rows = raw.get("remapped_rows") or {}
    ecc = raw.get("ecc_errors") or {}
    return NvmlHealth(
        lost=bool(raw.get("lost")),
        xids=tuple(int(x) for x in raw.get("xid_errors") or ()),
        retired_pages=retired,
        retired_pages_pending=_optional_bool(raw.get("retired_pages_pending")),
        remapped_rows_pending=_optional_bool(rows.get("pending")),
        remapped_rows_failure=_optional_bool(rows.get("failure")),
        ecc_uncorrected=_optional_int(ecc.get("volatile_uncorrected")),
        ecc_corrected=_optional_int(ecc.get("volatile_corrected")),
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

    def usage(self, address: str) -> NvmlUsage | None:
        if "error" in self.recording:
            raise NvmlUnavailable(str(self.recording["error"]))
        for raw in self.recording.get("devices", []):
            if bus_id_to_address(raw["pci_bus_id"]) == address:
                return _usage(raw)
        return None

    def health(self, address: str) -> NvmlHealth | None:
        if "error" in self.recording:
            raise NvmlUnavailable(str(self.recording["error"]))
        for raw in self.recording.get("devices", []):
            if bus_id_to_address(raw["pci_bus_id"]) == address:
                return _health(raw.get("health"))
        return None


class PynvmlNvml:
    """Implements [Nvml] with nvidia-ml-py. Initialises and shuts NVML down on each call,
    but for the XID event set, which ``health`` opens at its first call and keeps (with
    its own nvmlInit: NVML counts them) until ``close``."""

    def __init__(self, pynvml: Any) -> None:
        self.pynvml = pynvml
        self._events: Any = None  # the event set; False: NVML cannot give one
        self._xids: dict[str, list[int]] = {}  # XIDs received, not yet read, by address

    def gpus(self) -> dict[str, NvmlGpu]:
        nvml = self.pynvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            raise NvmlUnavailable(f"nvmlInit: {error}") from error
        try:
            return _by_address(
                [
                    self._raw(nvml.nvmlDeviceGetHandleByIndex(i))
                    for i in range(nvml.nvmlDeviceGetCount())
                ]
            )
        except nvml.NVMLError as error:
            raise NvmlUnavailable(str(error)) from error
        finally:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass

    def usage(self, address: str) -> NvmlUsage | None:
        nvml = self.pynvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            raise NvmlUnavailable(f"nvmlInit: {error}") from error
        try:
            handle = self._optional(nvml.nvmlDeviceGetHandleByPciBusId, address)
            if handle is None:
                return None
            utilization = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, handle)
            return _usage(
                {
                    "utilization": {"gpu": utilization.gpu} if utilization is not None else None,
                    "memory": {"total": memory.total, "used": memory.used}
                    if memory is not None
                    else None,
                }
            )
        except nvml.NVMLError as error:
            raise NvmlUnavailable(str(error)) from error
        finally:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass

    def health(self, address: str) -> NvmlHealth | None:
        nvml = self.pynvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            raise NvmlUnavailable(f"nvmlInit: {error}") from error
        lost = nvml.NVML_ERROR_GPU_IS_LOST
        try:
            try:
                self._receive_xids()
            except nvml.NVMLError as error:  # the XIDs are lost; the rest is still worth reading
                LOG.warning("NVML: could not read XID events: %s", error)
            xids = self._xids.pop(address, [])
            try:
                handle = self._optional(nvml.nvmlDeviceGetHandleByPciBusId, address)
                if handle is None:
                    return None
                raw = self._raw_health(handle)
            except nvml.NVMLError as error:
                if getattr(error, "value", None) != lost:
                    raise
                raw = {"lost": True}
            raw["xid_errors"] = xids
            return _health(raw)
        except nvml.NVMLError as error:
            raise NvmlUnavailable(str(error)) from error
        finally:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass

    def _raw_health(self, handle: Any) -> dict[str, Any]:
        """One GPU's health answers, in the recording's format."""
        nvml = self.pynvml
        causes = {
            "single_bit": nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            "double_bit": nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        }
        pages = {}
        for name, cause in causes.items():
            found = self._optional(nvml.nvmlDeviceGetRetiredPages, handle, cause)
            pages[name] = len(found) if found is not None else None
        pending = self._optional(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        rows = self._optional(nvml.nvmlDeviceGetRemappedRows, handle)
        ecc = {}
        for name, error_type in (
            ("volatile_corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("volatile_uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            ecc[name] = self._optional(
                nvml.nvmlDeviceGetTotalEccErrors, handle, error_type, nvml.NVML_VOLATILE_ECC
            )
        return {
            "retired_pages": pages,
            "retired_pages_pending": None
            if pending is None
            else pending == nvml.NVML_FEATURE_ENABLED,
            "remapped_rows": None
            if rows is None
            else {
                "correctable": rows[0],
                "uncorrectable": rows[1],
                "pending": bool(rows[2]),
                "failure": bool(rows[3]),
            },
            "ecc_errors": ecc,
        }

    def _receive_xids(self) -> None:
        """Take the XID events NVML has for us (the event set opened at the first call,
        on every GPU that supports them), without waiting."""
        nvml = self.pynvml
        xid_event = nvml.nvmlEventTypeXidCriticalError
        if self._events is None:
            nvml.nvmlInit()  # the event set's own, until close()
            try:
                events = nvml.nvmlEventSetCreate()
                for index in range(nvml.nvmlDeviceGetCount()):
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    self._optional(nvml.nvmlDeviceRegisterEvents, handle, xid_event, events)
            except nvml.NVMLError as error:
                LOG.info("NVML gives no XID events: %s", error)
                self._events = False
                nvml.nvmlShutdown()
                return
            self._events = events
        if self._events is False:
            return
        timeout = nvml.NVML_ERROR_TIMEOUT
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError as error:
                if getattr(error, "value", None) == timeout:
                    return
                raise
            if data.eventType & xid_event:
                address = bus_id_to_address(nvml.nvmlDeviceGetPciInfo(data.device).busId)
                self._xids.setdefault(address, []).append(int(data.eventData))

    def close(self) -> None:
        """Free the XID event set (and its nvmlInit)."""
        nvml = self.pynvml
        if self._events:
            try:
                nvml.nvmlEventSetFree(self._events)
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass
        self._events = None

    def _optional(self, call: Callable[..., Any], *args: Any, absent: tuple[str, ...] = ()) -> Any:
        """NVML's answer, or None where the GPU does not support the query (or answers
        one of the errors named in ``absent``, e.g. ``NVML_ERROR_INVALID_ARGUMENT``)."""
        codes = {
            self.pynvml.NVML_ERROR_NOT_SUPPORTED,
            self.pynvml.NVML_ERROR_NOT_FOUND,
            *(getattr(self.pynvml, name) for name in absent),
        }
        try:
            value = call(*args)
        except self.pynvml.NVMLError as error:
            if getattr(error, "value", None) in codes:
                return None
            raise
        return value.decode() if isinstance(value, bytes) else value

    def _profiles(self, handle: Any, mig_enabled: bool) -> list[dict[str, Any]]:
        """The GPU-instance profiles the GPU supports (every profile index NVML knows)."""
        nvml = self.pynvml
        found = []
        for index in range(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 10)):
            info = self._optional(
                nvml.nvmlDeviceGetGpuInstanceProfileInfo,
                handle,
                index,
                absent=("NVML_ERROR_INVALID_ARGUMENT",),
            )
            if info is None or not info.instanceCount:
                continue
            name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
            remaining = None
            if mig_enabled:
                remaining = self._optional(
                    nvml.nvmlDeviceGetGpuInstanceRemainingCapacity, handle, info.id
                )
            found.append(
                {
                    "profile": index,
                    "id": info.id,
                    "name": name,
                    "instance_count": info.instanceCount,
                    "memory_size_mb": info.memorySizeMB,
                    "remaining_capacity": remaining,
                }
            )
        return found

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
        mig_enabled = (
            bool(raw["mig_mode"]) and int(raw["mig_mode"][0]) == nvml.NVML_DEVICE_MIG_ENABLE
        )
        if raw["mig_mode"] is not None:  # MIG capable: the profiles it could be cut into
            raw["gpu_instance_profiles"] = self._profiles(handle, mig_enabled)
        if mig_enabled:
            for index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                mig = self._optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
                if mig is None:  # an empty slot
                    continue
                memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, mig)
                raw["mig_devices"].append(
                    {
                        "uuid": self._optional(nvml.nvmlDeviceGetUUID, mig),
                        "name": self._optional(nvml.nvmlDeviceGetName, mig) or "",
                        "gpu_instance_id": nvml.nvmlDeviceGetGpuInstanceId(mig),
                        "compute_instance_id": nvml.nvmlDeviceGetComputeInstanceId(mig),
                        "memory_total": memory.total if memory is not None else None,
                    }
                )
        return raw


def open_pynvml() -> PynvmlNvml | None:
    """The real NVML, or None when nvidia-ml-py, the library or the driver is missing."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None
    return PynvmlNvml(pynvml)
