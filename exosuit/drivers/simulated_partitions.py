"""The simulated driver's partitions (``Partitionable``), kept in its state folder.

So that ``exosuit serve`` shows partition layouts with no hardware (doc/devices.md,
"Partitions"): the simulated GPU takes ``{"mdev": {type: count}}`` (one of the vGPU
types its model lists, at most its ``available_instances``) or ``{"mig": {profile:
count}}`` (profiles of its model, each at most its ``max_instances``); the fake FPGA
takes ``{"vfs": n}`` (1 to 16 functions). ``partition`` records the layout in
``<state_dir>/partitions.json`` (``PARTITIONS_FILE``), by PCI address, and discovery
then offers the slices: the GPU as ``VGPU`` with one ``MDEV`` handle per mdev (UUIDs
derived from host, address, type and index: the same every discovery), or as one
deployable per MIG profile (``CUSTOM_NVIDIA_MIG_<PROFILE>``) with one ``MIG`` handle per
instance, named as nvidia_gpu names them (exosuit/drivers/gpu_naming.py); the FPGA with
``n`` attach handles instead of 16. A layout of count 0 leaves the device as it was
shaped (whole). Nothing is in use on a simulated host, so nothing is ever refused for
being in use here: the API refuses that (exosuit/db/partitions.py).

With ``"on_demand": true`` (mdev and MIG layouts) the slices are offered all the same,
and which of them are made is kept beside the layout (``made``: PCI address → the mdev
or MIG UUIDs): ``make_slice`` and ``remove_slice`` (``OnDemandSlices``) add and drop
one, and the GPU's service shows how many are made (``instances``).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any

from exosuit.drivers.base import AttachHandle, Deployable, Device, PartitionError, pci_cpid
from exosuit.drivers.gpu_naming import mig_slice, vgpu
from exosuit.drivers.state import read_state, write_state

__all__ = ["PARTITIONS_FILE", "SimulatedPartitions", "with_partitions"]

PARTITIONS_FILE = "partitions.json"
MAX_FPGA_FUNCTIONS = 16
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "simulated.exosuit.dev")


def _services(device: Device, kind: str, limit: str) -> dict[str, int]:
    """Service name → its limit (``available_instances``, ``max_instances``)."""
    return {s.name: int(s.details.get(limit, "0") or 0) for s in device.services if s.kind == kind}


def _check(device: Device, layout: Mapping[str, Any]) -> None:
    """PartitionError when the simulated device cannot make ``layout``."""
    where = device.pci_address
    if "vfs" in layout:
        if device.type != "FPGA":
            raise PartitionError(f"the simulated GPU {where} has no SR-IOV VFs")
        if not 0 <= int(layout["vfs"]) <= MAX_FPGA_FUNCTIONS:
            raise PartitionError(
                f"the simulated FPGA {where} has 1 to {MAX_FPGA_FUNCTIONS} functions"
            )
        return
    kind, limit = ("mdev", "available_instances") if "mdev" in layout else ("mig", "max_instances")
    if device.type != "GPU":
        raise PartitionError(f"the simulated FPGA {where} makes no {kind} partitions")
    known = _services(device, "vgpu" if kind == "mdev" else "mig", limit)
    counts = {str(t): int(n) for t, n in layout.get(kind, {}).items()}
    for name, count in sorted(counts.items()):
        if name not in known:
            raise PartitionError(
                f"the simulated {device.model} {where} has no {kind} type {name}; it has: "
                + (", ".join(sorted(known)) or "none")
            )
        if count > known[name]:
            raise PartitionError(
                f"the simulated {device.model} {where} makes at most {known[name]} of {name}, "
                f"not {count}"
            )
    if kind == "mdev" and sum(1 for n in counts.values() if n) > 1:
        raise PartitionError(f"the simulated GPU {where} runs one vGPU type at a time")


def _mdevs(
    hostname: str, device: Device, base: Deployable, vgpu_type: str, count: int
) -> Deployable:
    address = device.pci_address or ""
    handles = tuple(
        AttachHandle(
            "MDEV",
            {
                **pci_cpid(address),
                "asked_type": vgpu_type,
                "vgpu_mark": f"{vgpu_type}_{i}",
                "mdev_uuid": str(uuid.uuid5(_NAMESPACE, f"{hostname}/{address}/{vgpu_type}/{i}")),
            },
        )
        for i in range(count)
    )
    names = {s.name: s.details.get("description", s.name) for s in device.services}
    mig_capable = any(s.kind == "mig" for s in device.services)
    naming = vgpu(_product_id(device), vgpu_type, names.get(vgpu_type, vgpu_type), mig_capable)
    return dataclasses.replace(
        base,
        num_accelerators=count,
        resource_class=naming.resource_class,
        traits=naming.traits,
        attach_handles=handles,
        extra_attributes=naming.attributes,
    )


def _product_id(device: Device) -> str:
    return str(device.std_board_info.get("product_id", ""))


def _migs(
    hostname: str, device: Device, base: Deployable, counts: dict[str, int]
) -> list[Deployable]:
    address = device.pci_address or ""
    found = []
    for profile, count in sorted(counts.items()):
        if not count:
            continue
        handles = tuple(
            AttachHandle(
                "MIG",
                {
                    **pci_cpid(address),
                    "profile": profile,
                    "mig_uuid": "MIG-"
                    + str(uuid.uuid5(_NAMESPACE, f"{hostname}/{address}/{profile}/{i}")),
                },
            )
            for i in range(count)
        )
        naming = mig_slice(_product_id(device), profile)
        found.append(
            dataclasses.replace(
                base,
                name=f"{base.name}_{profile.replace('.', '_')}",
                num_accelerators=count,
                resource_class=naming.resource_class,
                traits=naming.traits,
                attach_handles=handles,
                extra_attributes=naming.attributes,
            )
        )
    return found


def slice_id(handle: AttachHandle) -> str:
    """What names a slice: its mdev UUID, its MIG UUID (else its attach info)."""
    info = handle.attach_info
    return str(info.get("mdev_uuid") or info.get("mig_uuid") or sorted(info.items()))


def with_partitions(
    device: Device,
    layouts: Mapping[str, Any],
    hostname: str,
    made: Mapping[str, list[str]] | None = None,
) -> Device:
    """The device as its recorded layout shapes it (itself when it has none, or when the
    layout asks no slice); ``made``: the on-demand slices made, by PCI address."""
    shaped = _shaped(device, layouts, hostname)
    layout = layouts.get(device.pci_address or "")
    if not layout or not layout.get("on_demand") or shaped is device:
        return shaped
    ids = set((made or {}).get(device.pci_address or "", ()))
    count = sum(1 for d in shaped.deployables for h in d.attach_handles if slice_id(h) in ids)
    services = tuple(
        dataclasses.replace(s, details={**s.details, "instances": str(count)})
        if s.enabled and s.kind in ("vgpu", "mig")
        else s
        for s in shaped.services
    )
    return dataclasses.replace(shaped, services=services)


def _shaped(device: Device, layouts: Mapping[str, Any], hostname: str) -> Device:
    layout = layouts.get(device.pci_address or "")
    if not layout or not device.deployables:
        return device
    base = device.deployables[0]
    if "vfs" in layout and device.type == "FPGA" and int(layout["vfs"]):
        handles = base.attach_handles[: int(layout["vfs"])]
        shaped = dataclasses.replace(base, num_accelerators=len(handles), attach_handles=handles)
        return dataclasses.replace(device, deployables=(shaped, *device.deployables[1:]))
    if "mdev" in layout and device.type == "GPU":
        asked = {str(t): int(n) for t, n in layout["mdev"].items() if n}
        if asked:
            ((vgpu_type, count),) = asked.items()
            services = tuple(
                dataclasses.replace(s, enabled=True, details={**s.details, "instances": str(count)})
                if (s.kind, s.name) == ("vgpu", vgpu_type)
                else s
                for s in device.services
            )
            deployable = _mdevs(hostname, device, base, vgpu_type, count)
            return dataclasses.replace(device, deployables=(deployable,), services=services)
    if "mig" in layout and device.type == "GPU":
        counts = {str(t): int(n) for t, n in layout["mig"].items()}
        deployables = _migs(hostname, device, base, counts)
        if deployables:
            services = tuple(
                dataclasses.replace(
                    s, enabled=True, details={**s.details, "instances": str(counts[s.name])}
                )
                if s.kind == "mig" and counts.get(s.name)
                else s
                for s in device.services
            )
            return dataclasses.replace(device, deployables=tuple(deployables), services=services)
    return device


def _slices(device: Device) -> dict[str, int]:
    """Slice type → how many the discovered device offers."""
    found: dict[str, int] = {}
    for deployable in device.deployables:
        for handle in deployable.attach_handles:
            info = handle.attach_info
            key = {"MDEV": info.get("asked_type"), "MIG": info.get("profile")}.get(
                handle.attach_type, "vf"
            )
            found[str(key)] = found.get(str(key), 0) + 1
    return found


class SimulatedPartitions:
    """Implements [exosuit.drivers.base.Partitionable] and
    [exosuit.drivers.base.OnDemandSlices] for the simulated driver."""

    hostname: str
    state_dir: str | None
    _layouts_here: dict[str, Any]
    _made_here: dict[str, list[str]]

    def partition(self, device: Device, layout: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Partitionable]: checks the layout against the
        model's types and limits, then records it (on demand: with the slices made that
        it still offers; the others are removed)."""
        _check(device, layout)
        address = device.pci_address or ""
        layouts = self.partition_layouts()
        layouts[address] = dict(layout)
        made = self.made()
        if layout.get("on_demand"):
            offered = {
                slice_id(h)
                for d in _shaped(device, layouts, self.hostname).deployables
                for h in d.attach_handles
            }
            made[address] = [m for m in made.get(address, []) if m in offered]
        else:
            made.pop(address, None)
        self._save(layouts, made)

    # -- OnDemandSlices ----------------------------------------------------------------

    def made_slices(self, device: Device) -> list[AttachHandle]:
        """Implements [exosuit.drivers.base.OnDemandSlices]."""
        ids = set(self.made().get(device.pci_address or "", ()))
        return [h for d in device.deployables for h in d.attach_handles if slice_id(h) in ids]

    def make_slice(self, device: Device, handle: AttachHandle) -> None:
        """Implements [exosuit.drivers.base.OnDemandSlices]: a slice the device's
        on-demand layout offers is recorded as made."""
        address = device.pci_address or ""
        offered = {slice_id(h) for d in device.deployables for h in d.attach_handles}
        ident = slice_id(handle)
        if ident not in offered:
            raise PartitionError(
                f"the simulated device {address} offers no slice {ident} (its layout: "
                f"{self.partition_layouts().get(address)})"
            )
        made = self.made()
        if ident not in made.get(address, []):
            made.setdefault(address, []).append(ident)
            self._save(self.partition_layouts(), made)

    def remove_slice(self, device: Device, handle: AttachHandle) -> None:
        """Implements [exosuit.drivers.base.OnDemandSlices]."""
        address = device.pci_address or ""
        made = self.made()
        ident = slice_id(handle)
        if ident in made.get(address, []):
            made[address].remove(ident)
            self._save(self.partition_layouts(), made)

    def made(self) -> dict[str, list[str]]:
        """PCI address → the on-demand slices made (their mdev or MIG UUIDs)."""
        if self.state_dir is None:
            return {a: list(m) for a, m in getattr(self, "_made_here", {}).items()}
        made: dict[str, list[str]] = read_state(self.state_dir, PARTITIONS_FILE).get("made", {})
        return made

    def _save(self, layouts: dict[str, Any], made: dict[str, list[str]]) -> None:
        if self.state_dir is None:
            self._layouts_here, self._made_here = layouts, made
        else:
            write_state(
                self.state_dir,
                PARTITIONS_FILE,
                {"version": 1, "layouts": layouts, "made": made},
            )

    def partitioned(self, device: Device, layout: Mapping[str, Any]) -> bool:
        """Implements [exosuit.drivers.base.Partitionable]: the discovered device offers
        the slices the layout asks (a layout of no slice: the device whole)."""
        have = _slices(device)
        if "vfs" in layout:
            wanted = {"vf": int(layout["vfs"])} if int(layout["vfs"]) else {}
        else:
            kind = "mdev" if "mdev" in layout else "mig"
            wanted = {str(t): int(n) for t, n in layout.get(kind, {}).items() if n}
        if not wanted:
            return all(
                h.attach_type not in ("MDEV", "MIG")
                for d in device.deployables
                for h in d.attach_handles
            )
        return have == wanted if "vfs" not in layout else have.get("vf") == wanted["vf"]

    def partition_layouts(self) -> dict[str, Any]:
        """PCI address → the layout recorded."""
        if self.state_dir is None:
            return dict(getattr(self, "_layouts_here", {}))
        layouts: dict[str, Any] = read_state(self.state_dir, PARTITIONS_FILE).get("layouts", {})
        return layouts
