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

Health (``HealthReader``): the GPU's PCIe AER counters, link and bus, and what NVML says
of it (XIDs, ECC errors, retired pages, row remapping): exosuit/drivers/nvidia/health.py.

Containers (``ContainerDevice``), per attach handle: a whole GPU's nodes (``/dev/vfio/<group>``
on vfio-pci, ``/dev/nvidia<minor>`` and its companions on the ``nvidia`` driver), a vGPU's
VFIO group, a MIG instance's GPU nodes and capability nodes:
exosuit/drivers/nvidia/cdi.py.

The code keeps one concern per module of exosuit/drivers/nvidia/ (as NVIDIA's own DRA
driver does): ``discovery``, ``vgpu`` (with the install step), ``mig``, ``health`` and
``cdi`` (the containers' edits), each a mixin of ``NvidiaGpuDriver`` below; its partitions
are exosuit/drivers/nvidia_partitions.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from oslo_config import cfg, types

from exosuit.drivers import DriverContext
from exosuit.drivers.base import Device
from exosuit.drivers.binding import bind_driver_option
from exosuit.drivers.health import CounterWindow, PciHealth
from exosuit.drivers.nvidia.cdi import GpuContainers
from exosuit.drivers.nvidia.discovery import UNSET, GpuDiscovery, Unset
from exosuit.drivers.nvidia.health import GpuHealth, nvml_findings
from exosuit.drivers.nvidia.mig import MigInstances
from exosuit.drivers.nvidia.vgpu import (
    MDEVS_FILE,
    InvalidVgpuConfig,
    VgpuMdevs,
    parse_mdevs,
    parse_vgpu_types,
)
from exosuit.drivers.nvidia_partitions import MdevPartitions
from exosuit.drivers.nvml import Nvml, NvmlUnavailable
from exosuit.drivers.runner import CommandRunner

__all__ = ["MDEVS_FILE", "InvalidVgpuConfig", "NvidiaGpuDriver", "nvml_findings", "parse_mdevs"]

# The driver's one logger, whichever of its modules logs.
LOG = logging.getLogger("exosuit.drivers.nvidia_gpu")


class NvidiaGpuDriver(
    GpuDiscovery, MigInstances, GpuHealth, GpuContainers, MdevPartitions, VgpuMdevs
):
    """Implements [exosuit.drivers.base.Driver], [exosuit.drivers.base.Installable],
    [exosuit.drivers.base.UsageReader], [exosuit.drivers.base.HealthReader],
    [exosuit.drivers.base.ContainerDevice] and, for vGPU mdevs
    (exosuit/drivers/nvidia_partitions.py), [exosuit.drivers.base.Partitionable]: its
    options and state here, each concern in its module of exosuit/drivers/nvidia/."""

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

    def __init__(self, context: DriverContext, nvml: Nvml | None | Unset = UNSET) -> None:
        """``nvml``: an [exosuit.drivers.nvml.Nvml], or None for none; by default the real
        one on a live host (sysfs root ``/``) and ``<root>/nvml.json`` on a recorded one."""
        settings = context.settings or {}
        self.hostname = context.hostname
        self.sysfs_root = context.sysfs_root
        self.sysfs = context.open_sysfs()
        self.state_dir = context.state_dir
        self.runner: CommandRunner = context.runner
        self.vgpu_types = parse_vgpu_types(settings.get("vgpu_types"))
        mdevs = parse_mdevs(settings.get("mdevs"))
        unused = sorted(set(mdevs) - set(self.vgpu_types.values()))
        if unused:
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] mdevs: vgpu_types gives no GPU the type {', '.join(unused)}; "
                "mdevs are created only on GPUs offered as vGPUs of their type"
            )
        self.nvidia_smi = settings.get("nvidia_smi", "nvidia-smi")
        self.use_nvml = bool(settings.get("use_nvml", True))
        self._nvml: Nvml | None | Unset = nvml
        # What the install step created, when there is no state folder (this process only).
        self._created_here: dict[str, dict[str, str]] = {}
        self.health_settings = context.health_settings()
        self.pci_health = PciHealth(self.sysfs, self.health_settings)
        # Health's memory: when each GPU last had each XID, and its corrected ECC counts.
        self._xids_seen: dict[str, dict[int, float]] = {}
        self._ecc_corrected: dict[str, CounterWindow] = {}

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
