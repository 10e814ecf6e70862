"""What a container needs of a PCI function, as the kernel names it: shared by the shipped
drivers' ``container_edits`` (exosuit.drivers.base.ContainerDevice). Not SDK.

Read from sysfs only (no side effects):

* a function bound to ``vfio-pci``: ``/dev/vfio/vfio`` and ``/dev/vfio/<group>``, the
  group being the name its ``iommu_group`` link points to
  (Documentation/ABI/testing/sysfs-kernel-iommu_groups, Documentation/driver-api/vfio.rst);
  an mdev likewise, through its own ``iommu_group``;
* DRM render nodes: ``/dev/dri/renderD<n>`` for each ``drm/renderD<n>`` below the function
  (Documentation/gpu/drm-uapi.rst: render nodes, not the card's modesetting node);
* compute accelerators: ``/dev/accel/accel<n>`` for each ``accel/accel<n>`` below it
  (Documentation/accel/introduction.rst);
* the environment every PCI handle carries: ``PCI_ADDRESS``; for an SR-IOV VF also
  ``PF_PCI_ADDRESS`` and ``VF_INDEX`` (the ``n`` of the PF's ``virtfn<n>`` link to it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from exosuit.drivers.base import AttachHandle, ContainerEdits, DeviceNode
from exosuit.drivers.sysfs import PciFunction, Sysfs

__all__ = [
    "VFIO_PCI",
    "accel_nodes",
    "function_edits",
    "handle_address",
    "pci_env",
    "render_nodes",
    "vf_index",
    "vfio_nodes",
]

VFIO_PCI = "vfio-pci"
VFIO_CONTAINER = DeviceNode("/dev/vfio/vfio")
_NUMBERED = re.compile(r"^(\D+)(\d+)$")


def handle_address(handle: AttachHandle) -> str:
    """The PCI address an attach handle names (``domain``, ``bus``, ``device``,
    ``function`` of its info: a PCI function, or an mdev's or MIG instance's parent)."""
    info = handle.attach_info
    try:
        return f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}".lower()
    except KeyError:
        raise ValueError(
            f"the {handle.attach_type} attach handle names no PCI function: {dict(info)}"
        ) from None


def vfio_nodes(sysfs: Sysfs, what: str, *device: str) -> tuple[DeviceNode, ...]:
    """``/dev/vfio/vfio`` and the group node of the device at ``device`` (a sysfs path)."""
    group = sysfs.link_name(*device, "iommu_group")
    if group is None:
        raise ValueError(
            f"{what} has no IOMMU group (no iommu_group in sysfs): turn the IOMMU on "
            "(intel_iommu=on or amd_iommu=on) to give it to a container through vfio"
        )
    return (VFIO_CONTAINER, DeviceNode(f"/dev/vfio/{group}"))


def _class_nodes(
    sysfs: Sysfs, address: str, subsystem: str, prefix: str, dev_dir: str
) -> tuple[DeviceNode, ...]:
    names = []
    for name in sysfs.listdir("bus", "pci", "devices", address, subsystem):
        match = _NUMBERED.match(name)
        if match and match.group(1) == prefix:
            names.append((int(match.group(2)), name))
    return tuple(DeviceNode(f"/dev/{dev_dir}/{name}") for _, name in sorted(names))


def render_nodes(sysfs: Sysfs, address: str) -> tuple[DeviceNode, ...]:
    """The function's DRM render nodes (``/dev/dri/renderD128`` …)."""
    return _class_nodes(sysfs, address, "drm", "renderD", "dri")


def accel_nodes(sysfs: Sysfs, address: str) -> tuple[DeviceNode, ...]:
    """The function's compute accelerator nodes (``/dev/accel/accel0`` …)."""
    return _class_nodes(sysfs, address, "accel", "accel", "accel")


def vf_index(sysfs: Sysfs, pf: str, vf: str) -> int | None:
    """The index of VF ``vf`` on its PF ``pf`` (the PF's ``virtfn<n>`` that links to it)."""
    for name in sysfs.listdir("bus", "pci", "devices", pf):
        if name.startswith("virtfn") and name[6:].isdigit():
            if sysfs.link_name("bus", "pci", "devices", pf, name) == vf:
                return int(name[6:])
    return None


def pci_env(sysfs: Sysfs, function: PciFunction) -> dict[str, str]:
    """``PCI_ADDRESS``; for a VF, ``PF_PCI_ADDRESS`` and ``VF_INDEX`` too."""
    env = {"PCI_ADDRESS": function.address}
    if function.physfn is not None:
        env["PF_PCI_ADDRESS"] = function.physfn
        index = vf_index(sysfs, function.physfn, function.address)
        if index is not None:
            env["VF_INDEX"] = str(index)
    return env


def function_edits(
    sysfs: Sysfs,
    address: str,
    *,
    nodes: Iterable[DeviceNode] = (),
    env: Mapping[str, str] | None = None,
    require_nodes: bool = True,
) -> ContainerEdits:
    """A PCI function's edits: its vfio nodes when it is bound to vfio-pci; otherwise
    ``nodes`` (the vendor driver's, from the caller) and its DRM render and accel nodes.
    ``env`` is added to ``pci_env``'s. ``require_nodes``: raise ValueError when the
    function gives a container no node (a NIC VF handed over by its netdev need not)."""
    function = sysfs.pci_function(address)
    if function is None:
        raise ValueError(f"there is no PCI function {address} on this host")
    full_env = {**pci_env(sysfs, function), **(env or {})}
    if function.driver == VFIO_PCI:
        vfio = vfio_nodes(sysfs, address, "bus", "pci", "devices", address)
        return ContainerEdits(device_nodes=vfio, env=full_env)
    found = (*nodes, *render_nodes(sysfs, address), *accel_nodes(sysfs, address))
    if require_nodes and not found:
        bound = f"bound to {function.driver}" if function.driver else "bound to no driver"
        raise ValueError(
            f"{address} is {bound}, which gives a container no device node: bind it to "
            f"{VFIO_PCI} (the driver's bind_driver option) to hand it over whole"
        )
    return ContainerEdits(device_nodes=tuple(dict.fromkeys(found)), env=full_env)
