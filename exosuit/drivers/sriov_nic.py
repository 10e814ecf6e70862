"""SR-IOV NICs: network-class PCI functions (class 02) with virtual functions, for Nova's
SR-IOV ports (Cyborg's ``intel_nic_driver``, for every vendor).

* One device per physical function (PF); one deployable per virtual function (VF), each
  with one PCI attach handle whose ``attach_info`` carries ``physical_network`` when the
  PF is mapped to one (Nova copies it into the port binding).
* A PF with no VFs enabled is one deployable itself (the whole port for one VM) when the
  operator mapped it, or when the host has no interface on it (bound to vfio-pci or to no
  driver). An unmapped PF whose interface the host has is left alone: it may carry the
  host's own traffic.
* Resource class ``CUSTOM_NIC``; traits ``CUSTOM_VF`` or ``CUSTOM_PF``, then
  ``CUSTOM_<FUNCTION>`` and ``CUSTOM_<PHYSNET>`` from the mappings (Cyborg's order).
* NICs that are not SR-IOV capable are ignored unless mapped.

Mappings (``[sriov_nic]``) use Cyborg's syntax, ``NAME:DEV|DEV``, where DEV is a PF's
interface name or PCI address::

    physical_device_mappings = physnet1:ens1f0|ens1f1,physnet2:0000:af:00.0
    function_device_mappings = dpdk:ens4f0np0

doc/drivers/sriov_nic.md is the operator's guide.
"""

from __future__ import annotations

import logging

import os_traits
from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from exosuit.drivers.device_spec import is_pci_address
from exosuit.drivers.pci import board_info
from exosuit.drivers.sysfs import PciFunction, Sysfs

LOG = logging.getLogger(__name__)

__all__ = ["SriovNicDriver", "parse_mappings"]

RESOURCE_CLASS = "CUSTOM_NIC"


def parse_mappings(values: list[str] | None, option: str) -> dict[str, str]:
    """``["physnet1:ens1f0|ens1f1"]`` → ``{"ens1f0": "physnet1", "ens1f1": "physnet1"}``.

    The key is before the first colon, so PCI addresses may be used as devices.
    """
    by_device: dict[str, str] = {}
    seen: set[str] = set()
    for item in values or ():
        key, sep, devices = item.partition(":")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"[sriov_nic] {option}: {item!r} is not NAME:DEV[|DEV…]")
        if key in seen:
            raise ValueError(f"[sriov_nic] {option}: {key!r} is mapped twice")
        seen.add(key)
        for device in (d.strip() for d in devices.split("|")):
            if not device:
                continue
            if is_pci_address(device.lower()):
                device = device.lower()
            if device in by_device:
                raise ValueError(f"[sriov_nic] {option}: {device!r} is mapped to both "
                                 f"{by_device[device]!r} and {key!r}")
            by_device[device] = key
    return by_device


class SriovNicDriver:
    """Implements [exosuit.drivers.base.Driver]."""

    name = "sriov_nic"
    OPTIONS = [
        cfg.ListOpt(
            "physical_device_mappings",
            default=[],
            help="PHYSNET:DEV[|DEV...] pairs: the Neutron physical network each PF's ports "
            "are wired to (DEV is the PF's interface name or PCI address). Its VFs get the "
            "trait CUSTOM_<PHYSNET> and physical_network in their attach handle.",
        ),
        cfg.ListOpt(
            "function_device_mappings",
            default=[],
            help="FUNCTION:DEV[|DEV...] pairs: a function name whose trait CUSTOM_<FUNCTION> "
            "the PF's deployables get.",
        ),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = Sysfs(context.sysfs_root)
        self.physnets = parse_mappings(context.settings.get("physical_device_mappings"),
                                       "physical_device_mappings")
        self.functions = parse_mappings(context.settings.get("function_device_mappings"),
                                        "function_device_mappings")

    def discover(self) -> list[Device]:
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        devices = []
        for pf in functions.values():
            if pf.base_class != "02" or pf.is_vf:
                continue
            device = self._device(pf, functions)
            if device is not None:
                devices.append(device)
        return devices

    def _interfaces(self, address: str) -> list[str]:
        return self.sysfs.listdir("bus", "pci", "devices", address, "net")

    def _lookup(self, mapping: dict[str, str], pf: PciFunction, names: list[str]) -> str | None:
        for device in [pf.address, *names]:
            if device in mapping:
                return mapping[device]
        return None

    def _device(self, pf: PciFunction, functions: dict[str, PciFunction]) -> Device | None:
        names = self._interfaces(pf.address)
        physnet = self._lookup(self.physnets, pf, names)
        function_name = self._lookup(self.functions, pf, names)
        mapped = physnet is not None or function_name is not None
        vfs = [functions[a] for a in pf.virtfns if a in functions]
        if vfs:
            units = vfs
        elif mapped or ((pf.sriov_totalvfs or 0) > 0 and not names):
            units = [pf]
        else:
            if (pf.sriov_totalvfs or 0) > 0:
                LOG.info("sriov_nic: not offering %s (%s): no VFs enabled and the host has "
                         "its interface; map it in [sriov_nic] physical_device_mappings to "
                         "offer the whole port", pf.address, ", ".join(names))
            return None
        extra = []
        if function_name:
            extra.append(os_traits.normalize_name(function_name))
        if physnet:
            extra.append(os_traits.normalize_name(physnet))
        info = board_info(pf)
        if names:
            info["interface"] = names[0]
        if pf.sriov_totalvfs is not None:
            info["sriov_totalvfs"] = str(pf.sriov_totalvfs)
        return Device(
            type="NIC",
            vendor=pf.vendor_id,
            model=pf.device_id,
            driver_name=self.name,
            controlpath_id=pci_cpid(pf.address),
            pci_address=pf.address,
            numa_node=pf.numa_node,
            std_board_info=info,
            deployables=tuple(self._deployable(unit, unit is not pf, physnet, extra)
                              for unit in units),
        )

    def _deployable(self, unit: PciFunction, is_vf: bool, physnet: str | None,
                    extra: list[str]) -> Deployable:
        attach_info = pci_cpid(unit.address)
        if physnet:
            attach_info["physical_network"] = physnet
        return Deployable(
            name=f"{self.hostname}_{unit.address}",
            num_accelerators=1,
            resource_class=RESOURCE_CLASS,
            traits=tuple(dict.fromkeys(["CUSTOM_VF" if is_vf else "CUSTOM_PF", *extra])),
            attach_handles=(AttachHandle("PCI", attach_info),),
            driver_name=self.name,
        )
