"""nvidia_gpu's container edits (``ContainerDevice``, for CDI specs), per attach handle:

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

import os
from collections.abc import Mapping

from exosuit.drivers.base import AttachHandle, ContainerEdits, Device, DeviceNode
from exosuit.drivers.container import VFIO_PCI, function_edits, handle_address, vfio_nodes
from exosuit.drivers.sysfs import Sysfs

__all__ = ["GpuContainers"]


class GpuContainers:
    """Implements [exosuit.drivers.base.ContainerDevice] for nvidia_gpu (the module's
    docstring). Mixed into ``NvidiaGpuDriver``, which sets these attributes."""

    sysfs: Sysfs
    sysfs_root: str

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
