"""The intel_qat driver: Intel QuickAssist (QAT) crypto and compression engines.

What it reads (doc/drivers/intel_qat.md has the operator's view):

* sysfs (Documentation/ABI/testing/sysfs-bus-pci): the physical functions (PFs) with
  a QAT device id (``QAT_GENERATIONS``) and their SR-IOV virtual functions (VFs,
  ``virtfn<N>`` links).
* the QAT driver's attributes (Documentation/ABI/testing/sysfs-driver-qat, qat_4xxx
  and qat_6xxx, Linux 6.0+): ``qat/state`` (up/down) and ``qat/cfg_services`` (the
  enabled services, e.g. ``sym;dc``), which become traits.
* the firmware version where the driver exposes it: Intel's out-of-tree driver
  writes it to ``/sys/kernel/debug/qat_<device>_<address>/version/fw``; the in-tree
  driver exposes none.

As Cyborg's QAT driver: one device per PF; one deployable (resource class
CUSTOM_QAT) per VF with one PCI attach handle, or one for the PF itself when it has
no VFs.
"""

from __future__ import annotations

import dataclasses
import re

from exosuit.drivers import DriverContext
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from exosuit.drivers.sysfs import PciFunction, Sysfs

__all__ = ["QAT_GENERATIONS", "IntelQatDriver", "QatGeneration"]

INTEL = "8086"


@dataclasses.dataclass(frozen=True)
class QatGeneration:
    name: str  # the kernel's device name for the PF (its PCI driver's name)
    pf_id: str
    vf_id: str


# PF and VF device ids, from the kernel: include/linux/pci_ids.h
# (PCI_DEVICE_ID_INTEL_QAT_*) and drivers/crypto/intel/qat/qat_common/
# adf_accel_devices.h (ADF_*_PCI_DEVICE_ID, ADF_*IOV_PCI_DEVICE_ID).
QAT_GENERATIONS = (
    QatGeneration("dh895xcc", "0435", "0443"),
    QatGeneration("c6xx", "37c8", "37c9"),  # C62x chipsets
    QatGeneration("c3xxx", "19e2", "19e3"),
    QatGeneration("4xxx", "4940", "4941"),
    QatGeneration("401xx", "4942", "4943"),
    QatGeneration("402xx", "4944", "4945"),
    QatGeneration("420xx", "4946", "4947"),
    QatGeneration("6xxx", "4948", "4949"),
)
_BY_PF = {g.pf_id: g for g in QAT_GENERATIONS}

# cfg_services words (sysfs-driver-qat): sym, asym, dc, dcc, decomp. Intel's
# out-of-tree driver also writes "cy" for sym and asym together.
_SERVICE_ALIASES = {"cy": ("sym", "asym")}


def service_traits(cfg_services: str | None) -> tuple[str, ...]:
    """``sym;dc`` → ``("CUSTOM_QAT_DC", "CUSTOM_QAT_SYM")``; None or empty → ()."""
    services: set[str] = set()
    for word in re.split(r"[;,\s]+", (cfg_services or "").strip().lower()):
        if word:
            services.update(_SERVICE_ALIASES.get(word, (word,)))
    return tuple(sorted("CUSTOM_QAT_" + re.sub(r"[^A-Z0-9]+", "_", s.upper())
                        for s in services))


class IntelQatDriver:
    """Implements [exosuit.drivers.base.Driver]."""

    name = "intel_qat"
    OPTIONS: list = []

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = Sysfs(context.sysfs_root)

    def discover(self) -> list[Device]:
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        return [
            self._device(pf, _BY_PF[pf.device_id], functions)
            for pf in functions.values()
            if pf.vendor_id == INTEL and pf.device_id in _BY_PF and not pf.is_vf
        ]

    def _device(self, pf: PciFunction, generation: QatGeneration,
                functions: dict[str, PciFunction]) -> Device:
        base = ("bus", "pci", "devices", pf.address)
        state = self.sysfs.read(*base, "qat", "state")
        cfg_services = self.sysfs.read(*base, "qat", "cfg_services")
        traits = ("OWNER_CYBORG", *service_traits(cfg_services))
        # Only the PF's own VFs with the VF id of its generation are offered.
        vfs = [a for a in pf.virtfns
               if a in functions and functions[a].device_id == generation.vf_id]
        deployables = tuple(
            Deployable(
                name=f"{self.hostname}_{address}",
                num_accelerators=1,
                resource_class="CUSTOM_QAT",
                traits=traits,
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
                driver_name=self.name,
            )
            for address in (vfs or [pf.address])
        )
        board = {
            "kernel_driver": pf.driver,
            "state": state,
            "cfg_services": cfg_services,
            "sriov_totalvfs": None if pf.sriov_totalvfs is None else str(pf.sriov_totalvfs),
            "sriov_numvfs": None if pf.sriov_numvfs is None else str(pf.sriov_numvfs),
            "vf_kernel_drivers": ",".join(sorted({functions[a].driver or "none"
                                                  for a in vfs})) or None,
        }
        return Device(
            type="QAT",
            # Cyborg's QAT driver reports the raw sysfs ids ("0x8086", "0x37c8").
            vendor=f"0x{INTEL}",
            model=f"Intel QAT {generation.name}",
            driver_name=self.name,
            controlpath_id=pci_cpid(pf.address),
            pci_address=pf.address,
            numa_node=pf.numa_node,
            firmware_version=self._firmware(pf.address),
            std_board_info={"product_id": f"0x{pf.device_id}"},
            vendor_board_info={k: v for k, v in board.items() if v},
            deployables=deployables,
        )

    def _firmware(self, address: str) -> str | None:
        """``version/fw`` in the driver's debugfs directory, ``qat_<device>_<address>``."""
        for entry in self.sysfs.listdir("kernel", "debug"):
            if entry.startswith("qat_") and entry.endswith("_" + address):
                version = self.sysfs.read("kernel", "debug", entry, "version", "fw")
                if version:
                    return version
        return None
