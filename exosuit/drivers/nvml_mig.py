"""Making and removing MIG instances through NVML, behind one interface (``MigControl``).

What nvidia_gpu's partitions (exosuit/drivers/nvidia_partitions.py) ask of NVML, apart
from exosuit/drivers/nvml.py, which only reads. As ``nvidia-smi mig -cgi <profile> -C``
and ``-dci``/``-dgi`` do (NVIDIA's MIG user guide, "Getting Started with MIG"):

* ``create(address, profile_id)``: a GPU instance of the GPU-instance profile
  (``nvmlDeviceCreateGpuInstance``) with one compute instance spanning it
  (``nvmlGpuInstanceCreateComputeInstance`` with the compute-instance profile of as many
  slices as the GPU instance has): one MIG device;
* ``destroy(address, gpu_instance_id)``: its compute instances, then the GPU instance
  (``nvmlComputeInstanceDestroy``, ``nvmlGpuInstanceDestroy``);
* ``processes(address, gpu_instance_id)``: the PIDs running on the MIG devices of that GPU
  instance (``nvmlDeviceGetComputeRunningProcesses`` on each): a MIG device in use.

Two implementations, as for ``Nvml``:

* ``PynvmlMigControl`` calls nvidia-ml-py on a live host. NOTE: there is no GPU on the
  machines the tests run on, so this one is not exercised by them;
* ``RecordedMigControl`` acts on a recording of NVML's answers (``RecordedNvml``: the
  ``nvml.json`` of a host tree) as a GPU would, the way the test kernel acts on sysfs: a
  create adds a MIG device (next free GPU-instance id, a UUID derived from the GPU's and
  that id) and takes one from the profile's ``remaining_capacity`` (refused at 0, as
  NVML answers ``NVML_ERROR_INSUFFICIENT_RESOURCES``); a destroy gives it back. A MIG
  device's ``processes`` (a list of PIDs) may be recorded. It writes the recording back
  to its file, so a new driver (an agent restart) sees what exists. Simplification:
  only the profile's own capacity moves (real placements also narrow other profiles').
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Protocol, runtime_checkable

from exosuit.drivers.nvml import RecordedNvml, bus_id_to_address, mig_profile
from exosuit.files import atomic_write

__all__ = ["MigControl", "MigError", "PynvmlMigControl", "RecordedMigControl"]


class MigError(RuntimeError):
    """NVML refused a MIG change; the message says what and why."""


@runtime_checkable
class MigControl(Protocol):
    def create(self, address: str, profile_id: int) -> None: ...

    def destroy(self, address: str, gpu_instance_id: int) -> None: ...

    def processes(self, address: str, gpu_instance_id: int) -> list[int]: ...


class RecordedMigControl:
    """Implements [MigControl] on a ``RecordedNvml``'s recording (the module docstring)."""

    def __init__(self, nvml: RecordedNvml, path: str | None = None) -> None:
        self.nvml = nvml
        self.path = path

    def _device(self, address: str) -> dict[str, Any]:
        for raw in self.nvml.recording.get("devices", []):
            if bus_id_to_address(raw["pci_bus_id"]) == address:
                device: dict[str, Any] = raw
                return device
        raise MigError(f"NVML knows no GPU at {address}")

    def create(self, address: str, profile_id: int) -> None:
        device = self._device(address)
        profile = next(
            (p for p in device.get("gpu_instance_profiles") or () if int(p["id"]) == profile_id),
            None,
        )
        if profile is None:
            raise MigError(f"GPU {address} has no GPU-instance profile id {profile_id}")
        if not profile.get("remaining_capacity"):
            raise MigError(
                f"GPU {address}: creating a GPU instance of {mig_profile(profile['name'])}: "
                "NVML_ERROR_INSUFFICIENT_RESOURCES"
            )
        migs = device.setdefault("mig_devices", [])
        used = {int(m["gpu_instance_id"]) for m in migs}
        gi = next(i for i in range(1, 64) if i not in used)
        migs.append(
            {
                "uuid": "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{device.get('uuid')}/{gi}")),
                "name": f"{device.get('name') or 'GPU'} {profile['name']}",
                "gpu_instance_id": gi,
                "compute_instance_id": 0,
                "memory_total": int(profile.get("memory_size_mb") or 0) * 1024 * 1024,
            }
        )
        profile["remaining_capacity"] = int(profile["remaining_capacity"]) - 1
        self._save()

    def destroy(self, address: str, gpu_instance_id: int) -> None:
        device = self._device(address)
        migs = device.get("mig_devices") or []
        gone = [m for m in migs if int(m["gpu_instance_id"]) == gpu_instance_id]
        if not gone:
            raise MigError(f"GPU {address} has no GPU instance {gpu_instance_id}")
        device["mig_devices"] = [m for m in migs if m not in gone]
        name = mig_profile(str(gone[0]["name"]))
        for profile in device.get("gpu_instance_profiles") or ():
            if (
                mig_profile(str(profile["name"])) == name
                and profile.get("remaining_capacity") is not None
            ):
                profile["remaining_capacity"] = int(profile["remaining_capacity"]) + 1
        self._save()

    def processes(self, address: str, gpu_instance_id: int) -> list[int]:
        device = self._device(address)
        return [
            int(pid)
            for m in device.get("mig_devices") or ()
            if int(m["gpu_instance_id"]) == gpu_instance_id
            for pid in m.get("processes") or ()
        ]

    def _save(self) -> None:
        if self.path is None:
            return
        data = json.dumps(self.nvml.recording, indent=1, sort_keys=True)
        atomic_write(self.path, data, permissions=0o644)


class PynvmlMigControl:
    """Implements [MigControl] with nvidia-ml-py (the module docstring; not exercised by
    the tests: there is no GPU where they run)."""

    def __init__(self, pynvml: Any) -> None:
        self.pynvml = pynvml

    def _call(self, what: str, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except self.pynvml.NVMLError as error:
            raise MigError(f"{what}: {error}") from error

    def _handle(self, address: str) -> Any:
        nvml = self.pynvml
        self._call("nvmlInit", nvml.nvmlInit)
        return self._call(f"GPU {address}", nvml.nvmlDeviceGetHandleByPciBusId, address.encode())

    def create(self, address: str, profile_id: int) -> None:
        nvml = self.pynvml
        try:
            handle = self._handle(address)
            gi = self._call(
                f"GPU {address}: creating a GPU instance of profile id {profile_id}",
                nvml.nvmlDeviceCreateGpuInstance,
                handle,
                profile_id,
            )
            info = self._call("reading the GPU instance", nvml.nvmlGpuInstanceGetInfo, gi)
            slices = _gi_slices(nvml, handle, info.profileId)
            ci_profile = self._full_ci_profile(gi, slices)
            self._call(
                f"GPU {address}: creating the compute instance of GPU instance {info.id}",
                nvml.nvmlGpuInstanceCreateComputeInstance,
                gi,
                ci_profile,
            )
        finally:
            _shutdown(nvml)

    def _full_ci_profile(self, gi: Any, slices: int) -> int:
        """The id of the compute-instance profile spanning the whole GPU instance."""
        nvml = self.pynvml
        for index in range(getattr(nvml, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 8)):
            try:
                info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, index, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            except nvml.NVMLError:
                continue
            if int(info.sliceCount) == slices:
                return int(info.id)
        raise MigError(f"no compute-instance profile of {slices} slice(s)")

    def destroy(self, address: str, gpu_instance_id: int) -> None:
        nvml = self.pynvml
        try:
            handle = self._handle(address)
            gi = self._call(
                f"GPU {address}: GPU instance {gpu_instance_id}",
                nvml.nvmlDeviceGetGpuInstanceById,
                handle,
                gpu_instance_id,
            )
            for index in range(getattr(nvml, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 8)):
                try:
                    info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                        gi, index, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                    )
                    cis = nvml.nvmlGpuInstanceGetComputeInstances(gi, info.id)
                except nvml.NVMLError:
                    continue
                for ci in cis:
                    self._call("destroying a compute instance", nvml.nvmlComputeInstanceDestroy, ci)
            self._call(
                f"GPU {address}: destroying GPU instance {gpu_instance_id}",
                nvml.nvmlGpuInstanceDestroy,
                gi,
            )
        finally:
            _shutdown(nvml)

    def processes(self, address: str, gpu_instance_id: int) -> list[int]:
        nvml = self.pynvml
        try:
            handle = self._handle(address)
            pids: list[int] = []
            for index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
                except nvml.NVMLError:
                    continue
                if nvml.nvmlDeviceGetGpuInstanceId(mig) != gpu_instance_id:
                    continue
                running = self._call(
                    "reading the processes of a MIG device",
                    nvml.nvmlDeviceGetComputeRunningProcesses,
                    mig,
                )
                pids += [int(p.pid) for p in running]
            return pids
        finally:
            _shutdown(nvml)


def _gi_slices(nvml: Any, handle: Any, profile_id: int) -> int:
    """The slice count of the GPU-instance profile ``profile_id``."""
    for index in range(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 10)):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except nvml.NVMLError:
            continue
        if int(info.id) == profile_id:
            return int(info.sliceCount)
    raise MigError(f"no GPU-instance profile id {profile_id}")


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass
