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
* ``firmware_version``: what ``ethtool -i <PF interface>`` says (``firmware-version``),
  run through the context's runner; None for a PF without an interface on the host
  (bound to vfio-pci) or without ethtool. Exosuit never flashes NIC firmware.

* Services: each SR-IOV PF lists ``sriov``/``vf`` with its VF count (``current``,
  ``total``) and ``physical_network``, VFs enabled or not.
* Install step (``Installable``, when an operator marks a PF ready): create
  ``[sriov_nic] num_vfs`` VFs through ``sriov_numvfs`` (0 first when another non-zero
  count is set, as the kernel requires); undoing it writes 0.
* Containers (``ContainerDevice``): a function bound to vfio-pci (DPDK) gives
  ``/dev/vfio/<group>``; one with a kernel interface gives no device node, only its
  environment (``PCI_ADDRESS``, ``PF_PCI_ADDRESS`` and ``VF_INDEX`` for a VF,
  ``NET_INTERFACE``, ``PHYSICAL_NETWORK``): a CNI plug-in moves the interface into the
  container's network namespace, which a CDI spec cannot do (CDI 0.5.0 has no network
  devices).
* Health (``HealthReader``): the PF's PCIe AER counters, link and bus
  (exosuit.drivers.health).

Mappings (``[sriov_nic]``) use Cyborg's syntax, ``NAME:DEV|DEV``, where DEV is a PF's
interface name or PCI address::

    physical_device_mappings = physnet1:ens1f0|ens1f1,physnet2:0000:af:00.0
    function_device_mappings = dpdk:ens4f0np0

doc/drivers/sriov_nic.md is the operator's guide.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping
from typing import Any

import os_traits
from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import (
    AttachHandle,
    ContainerEdits,
    Deployable,
    Device,
    Health,
    InstallError,
    Service,
    pci_cpid,
)
from exosuit.drivers.container import function_edits, handle_address
from exosuit.drivers.device_spec import is_pci_address
from exosuit.drivers.health import PciHealth
from exosuit.drivers.pci import board_info
from exosuit.drivers.sriov_partitions import VfPartitions
from exosuit.drivers.sysfs import PciFunction

LOG = logging.getLogger(__name__)

__all__ = ["SriovNicDriver", "num_vfs_setting", "parse_ethtool_firmware", "parse_mappings"]

RESOURCE_CLASS = "CUSTOM_NIC"
DEFAULT_ETHTOOL = "ethtool"


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
                raise ValueError(
                    f"[sriov_nic] {option}: {device!r} is mapped to both "
                    f"{by_device[device]!r} and {key!r}"
                )
            by_device[device] = key
    return by_device


def num_vfs_setting(settings: Mapping[str, Any]) -> int:
    """``[sriov_nic] num_vfs`` as a count (0: the driver manages no VFs)."""
    value = settings.get("num_vfs") or 0
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise InstallError(f"[sriov_nic] num_vfs: {value!r} is not a number") from None
    if count < 0:
        raise InstallError(f"[sriov_nic] num_vfs: {count} is negative")
    return count


class SriovNicDriver(VfPartitions):
    """Implements [exosuit.drivers.base.Driver], [exosuit.drivers.base.Installable],
    [exosuit.drivers.base.HealthReader], [exosuit.drivers.base.ContainerDevice] and, for
    VFs (exosuit/drivers/sriov_partitions.py), [exosuit.drivers.base.Partitionable]."""

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
        cfg.StrOpt(
            "ethtool_path",
            default=DEFAULT_ETHTOOL,
            help="ethtool, run as `ethtool -i <interface>` to read a PF's firmware version "
            "(a name is looked up in PATH). Empty: never run it.",
        ),
        cfg.IntOpt(
            "num_vfs",
            default=0,
            min=0,
            help="VFs the install step creates on a PF an operator marks ready (through "
            "sriov_numvfs; a different non-zero count is set to 0 first, as the kernel "
            "requires, which removes the VFs there were); marking it inactive removes them "
            "(0). At most the PF's sriov_totalvfs. 0: the driver creates and removes no VFs.",
        ),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = context.open_sysfs()
        self.pci_health = PciHealth(self.sysfs, context.health_settings())
        self.physnets = parse_mappings(
            context.settings.get("physical_device_mappings"), "physical_device_mappings"
        )
        self.functions = parse_mappings(
            context.settings.get("function_device_mappings"), "function_device_mappings"
        )
        self.runner = context.runner
        settings: Mapping[str, Any] = context.settings
        self.ethtool = settings.get("ethtool_path", DEFAULT_ETHTOOL)

    def health(self, device: Device) -> Health:
        """Implements [exosuit.drivers.base.HealthReader]: the function's PCIe AER
        counters, link and bus (exosuit.drivers.health)."""
        return self.pci_health.check(device.pci_address or "")

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
                LOG.info(
                    "sriov_nic: not offering %s (%s): no VFs enabled and the host has "
                    "its interface; map it in [sriov_nic] physical_device_mappings to "
                    "offer the whole port",
                    pf.address,
                    ", ".join(names),
                )
            return None
        extra = []
        if function_name:
            extra.append(os_traits.normalize_name(function_name))
        if physnet:
            extra.append(os_traits.normalize_name(physnet))
        info = board_info(pf)
        if names:
            info["interface"] = names[0]
        services: tuple[Service, ...] = ()
        if pf.sriov_totalvfs is not None:
            info["sriov_totalvfs"] = str(pf.sriov_totalvfs)
            details = {"current": str(pf.sriov_numvfs or 0), "total": str(pf.sriov_totalvfs)}
            if physnet:
                details["physical_network"] = physnet
            services = (Service("sriov", "vf", bool(pf.sriov_numvfs), details),)
        return Device(
            type="NIC",
            vendor=pf.vendor_id,
            model=pf.device_id,
            driver_name=self.name,
            controlpath_id=pci_cpid(pf.address),
            pci_address=pf.address,
            numa_node=pf.numa_node,
            pcie_root=pf.pcie_root,
            iommu_group=pf.iommu_group,
            firmware_version=self._firmware(names[0], pf.address) if names else None,
            std_board_info=info,
            deployables=tuple(
                self._deployable(unit, unit is not pf, physnet, extra) for unit in units
            ),
            services=services,
        )

    # -- ContainerDevice ---------------------------------------------------------------

    def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits:
        """Implements [exosuit.drivers.base.ContainerDevice]: the vfio nodes of a function
        bound to vfio-pci; otherwise no node, the environment only (the interface goes
        to the container through its CNI plug-in)."""
        address = handle_address(attach_handle)
        env = {}
        interfaces = self._interfaces(address)
        if interfaces:
            env["NET_INTERFACE"] = interfaces[0]
        physnet = attach_handle.attach_info.get("physical_network")
        if physnet:
            env["PHYSICAL_NETWORK"] = physnet
        return function_edits(self.sysfs, address, env=env, require_nodes=False)

    # -- Installable -------------------------------------------------------------------

    def _numvfs(self, device: Device) -> tuple[str, int, int]:
        address = device.pci_address or ""
        pf = self.sysfs.pci_function(address)
        if pf is None:
            raise InstallError(f"{address}: no such PCI function")
        if pf.sriov_numvfs is None or not pf.sriov_totalvfs:
            raise InstallError(f"{address} is not SR-IOV capable (no sriov_numvfs)")
        return address, pf.sriov_numvfs, pf.sriov_totalvfs

    def _set_numvfs(self, address: str, count: int) -> None:
        try:
            self.sysfs.write("bus", "pci", "devices", address, "sriov_numvfs", value=str(count))
        except OSError as error:
            raise InstallError(f"{address}: writing {count} to sriov_numvfs: {error}") from error

    def install(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: ``num_vfs`` VFs on the PF."""
        wanted = num_vfs_setting(settings)
        if not wanted:
            return
        address, current, total = self._numvfs(device)
        if wanted > total:
            raise InstallError(
                f"[sriov_nic] num_vfs: {address} has at most {total} VFs, not {wanted}"
            )
        if current == wanted:
            return
        if current:
            self._set_numvfs(address, 0)  # the kernel refuses a new count over another
        self._set_numvfs(address, wanted)
        now = self._numvfs(device)[1]
        if now != wanted:
            raise InstallError(f"{address} has {now} VFs after writing {wanted} to sriov_numvfs")

    def uninstall(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: no VFs (when the driver manages
        them, ``num_vfs`` > 0)."""
        if not num_vfs_setting(settings):
            return
        address, current, _ = self._numvfs(device)
        if current:
            self._set_numvfs(address, 0)

    def installed(self, device: Device, settings: Mapping[str, Any]) -> bool:
        """Implements [exosuit.drivers.base.Installable]: the PF has ``num_vfs`` VFs."""
        wanted = num_vfs_setting(settings)
        if not wanted:
            return True
        pf = self.sysfs.pci_function(device.pci_address or "")
        return pf is not None and pf.sriov_numvfs == wanted

    def _firmware(self, interface: str, address: str) -> str | None:
        """``ethtool -i``'s firmware version of the PF's interface, or None."""
        if not self.ethtool:
            return None
        try:
            result = self.runner.run([self.ethtool, "-i", interface], timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None  # no ethtool (CommandNotRecorded in tests), or it hung
        if result.returncode != 0:
            return None
        return parse_ethtool_firmware(result.stdout, address)

    def _deployable(
        self, unit: PciFunction, is_vf: bool, physnet: str | None, extra: list[str]
    ) -> Deployable:
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


def parse_ethtool_firmware(output: str, address: str | None = None) -> str | None:
    """The ``firmware-version`` of ``ethtool -i`` output; None when it is absent, empty or
    ``N/A``, or when ``bus-info`` names another PCI function than ``address``."""
    fields = {}
    for line in output.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    bus_info = fields.get("bus-info", "").lower()
    if address and bus_info and bus_info != address.lower():
        return None
    version = fields.get("firmware-version", "")
    return version if version and version.upper() != "N/A" else None
