"""nvidia_gpu's discovery: the GPUs of the host and the ``Device`` each one is.

A GPU is a PCI function with vendor ``10de`` and class ``0300xx`` (VGA compatible
controller) or ``0302xx`` (3D controller), never an SR-IOV virtual function (Documentation/
ABI/testing/sysfs-bus-pci). What ``nvidia-smi`` (through the command runner) and NVML
(exosuit/drivers/nvml.py) say of it is added when they answer. The GPU is offered whole
(PGPU), as vGPUs (exosuit/drivers/nvidia/vgpu.py) or as its MIG instances
(exosuit/drivers/nvidia/mig.py); exosuit/drivers/nvidia_gpu.py has the whole story. A GPU
that carries mdevs Exosuit did not make is not offered whole (``not_offered_reason`` in its
``vendor_board_info`` says why). Names: exosuit/drivers/gpu_naming.py.
"""

from __future__ import annotations

import enum
import logging
import os
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from exosuit.drivers.base import AttachHandle, Deployable, Device, Service, pci_cpid
from exosuit.drivers.gpu_naming import trait_token, whole_gpu
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

__all__ = ["NVIDIA", "UNSET", "GpuDiscovery", "Unset", "is_nvidia_gpu", "trait_token"]

# The driver's one logger, whichever of its modules logs.
LOG = logging.getLogger("exosuit.drivers.nvidia_gpu")

NVIDIA = "10de"
_CONTROLLERS = {"0300": "VGA compatible controller", "0302": "3D controller"}
_NOT_AVAILABLE = {"", "N/A", "[N/A]", "[Not Supported]", "[Unknown Error]"}
_SMI_DEVICE_QUERY = "pci.bus_id,vbios_version,serial,name"
_SMI_MIG_QUERY = "pci.bus_id,mig.mode.current,mig.mode.pending"


class Unset(enum.Enum):
    """The type of ``UNSET``, so that "not given" and None ("no NVML") stay apart."""

    UNSET = enum.auto()


UNSET: Final = Unset.UNSET


class GpuDiscovery:
    """``discover`` (implements [exosuit.drivers.base.Driver]'s) and the vendor tools it
    asks. Mixed into ``NvidiaGpuDriver``, which sets these attributes."""

    name: str
    hostname: str
    sysfs: Sysfs
    sysfs_root: str
    runner: CommandRunner
    nvidia_smi: str
    use_nvml: bool
    vgpu_types: dict[str, str]
    _nvml: Nvml | None | Unset

    if TYPE_CHECKING:  # the other concerns' (exosuit/drivers/nvidia/, nvidia_partitions.py)

        def partition_type(self, address: str) -> str | None: ...
        def _check_vgpu_addresses(
            self, gpus: list[PciFunction], functions: Mapping[str, PciFunction]
        ) -> None: ...
        def _vgpu(self, gpu: PciFunction, vgpu_type: str, mig_capable: bool) -> Deployable: ...
        def _vgpu_services(self, gpu: PciFunction) -> tuple[Service, ...]: ...
        def _foreign_mdevs(self, gpu: PciFunction) -> list[tuple[str, str]]: ...
        def _mig(
            self, gpu: PciFunction, instances: tuple[MigInstance, ...]
        ) -> tuple[Deployable, ...]: ...
        @staticmethod
        def _mig_services(nvml: NvmlGpu | None) -> tuple[Service, ...]: ...

    def discover(self) -> list[Device]:
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        gpus = [f for f in functions.values() if is_nvidia_gpu(f) and not f.is_vf]
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
        mig_capable = mig_mode is not None
        not_offered = None

        # The operator's partition layout, when it asks mdevs, wins over the configuration.
        vgpu_type = self.partition_type(gpu.address) or self.vgpu_types.get(gpu.address)
        if vgpu_type is not None:
            deployables: tuple[Deployable, ...] = (self._vgpu(gpu, vgpu_type, mig_capable),)
        elif mig_mode == "enabled":
            # A partitioned GPU is offered as its MIG instances, never whole.
            instances = nvml.mig_instances if nvml is not None else ()
            deployables = self._mig(gpu, instances)
        elif foreign := self._foreign_mdevs(gpu):
            # Passing the GPU through whole would take it from under those mdevs' users.
            deployables, not_offered = (), _not_offered(foreign)
        else:
            whole = whole_gpu(gpu.device_id, mig_capable)
            deployables = (
                Deployable(
                    name=f"{self.hostname}_{gpu.address}",
                    num_accelerators=1,
                    resource_class=whole.resource_class,
                    traits=whole.traits,
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
            "not_offered_reason": not_offered,
        }
        return Device(
            type="GPU",
            vendor=NVIDIA,
            model=smi_name or (nvml.name if nvml else None) or f"NVIDIA {NVIDIA}:{gpu.device_id}",
            driver_name=self.name,
            controlpath_id=pci_cpid(gpu.address),
            pci_address=gpu.address,
            numa_node=gpu.numa_node,
            pcie_root=gpu.pcie_root,
            iommu_group=gpu.iommu_group,
            firmware_version=vbios or (nvml.vbios_version if nvml else None),
            std_board_info={
                "product_id": gpu.device_id,
                "controller": _CONTROLLERS[gpu.class_code[:4]],
            },
            vendor_board_info={k: v for k, v in board.items() if v},
            deployables=deployables,
            services=self._vgpu_services(gpu) + self._mig_services(nvml),
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
        if not isinstance(self._nvml, Unset):
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


def is_nvidia_gpu(function: PciFunction) -> bool:
    return function.vendor_id == NVIDIA and function.class_code[:4] in _CONTROLLERS


def _not_offered(foreign: list[tuple[str, str]]) -> str:
    """Why a GPU carrying mdevs Exosuit did not make is not offered whole."""
    mdevs = ", ".join(f"{m} ({t})" for t, m in foreign)
    count = f"{len(foreign)} mdev{'s' if len(foreign) > 1 else ''}"
    return (
        f"not offered whole for passthrough: it carries {count} Exosuit did not make: "
        f"{mdevs}; remove them, or offer the GPU as vGPUs of their type (a partition "
        "layout, or [nvidia_gpu] vgpu_types)"
    )


def _smi_mode(value: str | None) -> str | None:
    return value.strip().lower() if value else None


def _str(value: int | None) -> str | None:
    return str(value) if value is not None else None
