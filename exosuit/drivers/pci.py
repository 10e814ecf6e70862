"""The generic PCI driver: any PCI function an operator selects with ``[pci] device_spec``.

Cyborg's ``pci_driver`` with Nova's device_spec syntax (exosuit.drivers.device_spec).
Each selected function is one device with one deployable and one PCI attach handle:

* resource class ``CUSTOM_PCI``, or the spec's ``resource_class`` tag;
* traits ``OWNER_CYBORG``, ``CUSTOM_PCI_<VENDOR>`` (the vendor's name for the vendors
  Cyborg names — NVIDIA, MATROX — else the vendor id, e.g. ``CUSTOM_PCI_1AF4``),
  ``CUSTOM_PCI_PRODUCT_ID_<ID>``, then the spec's ``traits`` tag;
* device type from the PCI class (exosuit.drivers.pci_classes.device_type), or the spec's
  ``device_type`` tag, or ``[pci] device_type`` for all (``GPU`` is what Cyborg reports).

Functions that no spec selects are ignored. The install step (``Installable``, when an
operator marks a device ready) binds the function to ``[pci] bind_driver`` (e.g.
vfio-pci) through ``driver_override`` (exosuit.drivers.binding); the driver reports no
services. A container (``ContainerDevice``) gets ``/dev/vfio/<group>`` of a function bound
to vfio-pci, else its DRM render and accel nodes (exosuit.drivers.container). Health
(``HealthReader``): the function's PCIe AER counters, link and bus (exosuit.drivers.health).
doc/drivers/pci.md is the operator's guide.
"""

from __future__ import annotations

from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import (
    AttachHandle,
    ContainerEdits,
    Deployable,
    Device,
    Health,
    pci_cpid,
)
from exosuit.drivers.binding import BindingInstall, bind_driver_option
from exosuit.drivers.container import function_edits, handle_address
from exosuit.drivers.device_spec import DeviceSpec, parse_device_specs
from exosuit.drivers.health import PciHealth
from exosuit.drivers.pci_classes import class_name, device_type
from exosuit.drivers.sysfs import PciFunction

__all__ = ["RESOURCE_CLASS", "VENDOR_NAMES", "PciDriver", "board_info"]

# Cyborg's pci driver names these vendors in its vendor trait (VENDOR_MAPS); other
# vendors get their id. Adding a vendor here renames its trait: don't, without a
# release note.
VENDOR_NAMES = {"10de": "NVIDIA", "102b": "MATROX"}

RESOURCE_CLASS = "CUSTOM_PCI"


class PciDriver(BindingInstall):
    """Implements [exosuit.drivers.base.Driver], [exosuit.drivers.base.Installable],
    [exosuit.drivers.base.HealthReader] and [exosuit.drivers.base.ContainerDevice]."""

    name = "pci"
    OPTIONS = [
        cfg.MultiStrOpt(
            "device_spec",
            default=[],
            deprecated_name="passthrough_whitelist",
            help="PCI functions to hand out, in Nova's [pci] device_spec syntax: a JSON "
            "object (or list of objects) with vendor_id, product_id, address (glob string "
            "or dict of regular expressions) or devname, and optional resource_class, "
            "traits and device_type tags. Repeat the option for several specs. Functions "
            "no spec selects are ignored.",
        ),
        cfg.StrOpt(
            "device_type",
            default="auto",
            help="Device type reported for selected functions: 'auto' derives it from "
            "the PCI class (GPU, NIC, SSD, STORAGE, ACCELERATOR, ... or PCI); any other "
            "value (e.g. GPU, what Cyborg reports) is used for all of them. A spec's "
            "device_type tag wins.",
        ),
        bind_driver_option(),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = context.open_sysfs()
        self.pci_health = PciHealth(self.sysfs, context.health_settings())
        self.state_dir = context.state_dir
        self.specs = parse_device_specs(context.settings.get("device_spec") or [])
        configured = (context.settings.get("device_type") or "auto").strip()
        self.default_type = None if configured.lower() == "auto" else configured.upper()
        if self.default_type is not None:
            DeviceSpec.from_dict({"device_type": self.default_type})  # validates the word

    def discover(self) -> list[Device]:
        if not self.specs:
            return []
        bound = [spec.bind(self.sysfs) for spec in self.specs]
        devices = []
        for function in self.sysfs.pci_functions():
            spec = next((b.spec for b in bound if b.matches(function)), None)
            if spec is not None:
                devices.append(self._device(function, spec))
        return devices

    def health(self, device: Device) -> Health:
        """Implements [exosuit.drivers.base.HealthReader]: the function's PCIe AER
        counters, link and bus (exosuit.drivers.health)."""
        return self.pci_health.check(device.pci_address or "")

    def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits:
        """Implements [exosuit.drivers.base.ContainerDevice]: the function's vfio nodes
        when it is bound to vfio-pci, else its DRM render and accel nodes."""
        return function_edits(self.sysfs, handle_address(attach_handle))

    def _device(self, function: PciFunction, spec: DeviceSpec) -> Device:
        vendor_trait = VENDOR_NAMES.get(function.vendor_id, function.vendor_id.upper())
        traits = (
            "OWNER_CYBORG",
            f"CUSTOM_PCI_{vendor_trait}",
            f"CUSTOM_PCI_PRODUCT_ID_{function.device_id.upper()}",
        ) + spec.traits
        return Device(
            type=spec.device_type or self.default_type or device_type(function.class_code),
            vendor=function.vendor_id,
            model=function.device_id,
            driver_name=self.name,
            controlpath_id=pci_cpid(function.address),
            pci_address=function.address,
            numa_node=function.numa_node,
            pcie_root=function.pcie_root,
            iommu_group=function.iommu_group,
            std_board_info=board_info(function),
            deployables=(
                Deployable(
                    name=f"{self.hostname}_{function.address}",
                    num_accelerators=1,
                    resource_class=spec.resource_class or RESOURCE_CLASS,
                    traits=tuple(dict.fromkeys(traits)),
                    attach_handles=(AttachHandle("PCI", pci_cpid(function.address)),),
                    driver_name=self.name,
                ),
            ),
        )


def board_info(function: PciFunction) -> dict[str, str]:
    """What every PCI driver reports in std_board_info (Cyborg: product_id, controller)."""
    info = {
        "vendor_id": function.vendor_id,
        "product_id": function.device_id,
        "class": function.class_code,
        "controller": class_name(function.class_code),
    }
    optional = {
        "subsystem_vendor_id": function.subsystem_vendor_id,
        "subsystem_device_id": function.subsystem_device_id,
        "revision": function.revision,
        "physfn": function.physfn,
    }
    info.update({k: v for k, v in optional.items() if v})
    return info
