"""sriov_nic's partitions (``Partitionable``): ``{"vfs": n}`` VFs on a PF.

As the install step does (``[sriov_nic] num_vfs``), through the PF's ``sriov_numvfs``
(Documentation/PCI/pci-iov-howto.rst): ``n`` written, ``0`` first when another non-zero
count is set (the kernel refuses a change between two non-zero counts), nothing when the
PF has ``n`` already; more than ``sriov_totalvfs`` is refused before anything is written.
Discovery then offers each VF (one deployable each). The kernel removes every VF when
the count changes, and a VF gives no sign on the host of a VM using it: the API refuses a
VF count change while a VF is held (exosuit/db/partitions.py), which is the check here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exosuit.drivers.base import Device, PartitionError
from exosuit.drivers.sysfs import Sysfs

__all__ = ["VfPartitions"]


class VfPartitions:
    """Implements [exosuit.drivers.base.Partitionable] for sriov_nic (the module's
    docstring). Mixed into ``SriovNicDriver``."""

    sysfs: Sysfs

    def partition(self, device: Device, layout: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Partitionable]: the PF gets ``vfs`` VFs."""
        address, wanted = self._vfs_asked(device, layout)
        pf = self.sysfs.pci_function(address)
        if pf is None or pf.sriov_numvfs is None or not pf.sriov_totalvfs:
            raise PartitionError(f"{address} is not SR-IOV capable (no sriov_numvfs)")
        if wanted > pf.sriov_totalvfs:
            raise PartitionError(f"{address} has at most {pf.sriov_totalvfs} VFs, not {wanted}")
        if pf.sriov_numvfs == wanted:
            return
        counts = [0, wanted] if pf.sriov_numvfs and wanted else [wanted]
        for count in counts:
            try:
                self.sysfs.write("bus", "pci", "devices", address, "sriov_numvfs", value=str(count))
            except OSError as error:
                raise PartitionError(
                    f"{address}: writing {count} to sriov_numvfs: {error}"
                ) from error

    def partitioned(self, device: Device, layout: Mapping[str, Any]) -> bool:
        """Implements [exosuit.drivers.base.Partitionable]: the PF has ``vfs`` VFs."""
        address, wanted = self._vfs_asked(device, layout)
        pf = self.sysfs.pci_function(address)
        return pf is not None and (pf.sriov_numvfs or 0) == wanted

    @staticmethod
    def _vfs_asked(device: Device, layout: Mapping[str, Any]) -> tuple[str, int]:
        address = device.pci_address or ""
        if "vfs" not in layout:
            kind = "vGPU mdevs" if "mdev" in layout else "MIG instances"
            raise PartitionError(f"{address}: a NIC is partitioned into SR-IOV VFs, not {kind}")
        return address, int(layout["vfs"])
