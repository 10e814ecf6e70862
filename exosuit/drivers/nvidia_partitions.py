"""nvidia_gpu's partitions (``Partitionable``): vGPU mdevs as the operator's layout says.

``{"mdev": {type: count}}`` on a GPU (doc/devices.md, "Partitions"): the GPU is offered as
vGPUs of that type (the layout's type wins over ``[nvidia_gpu] vgpu_types``; it is kept in
the state folder, ``PARTITIONS_FILE``, so discovery offers it after a restart) and has
exactly ``count`` mdevs of it, made and removed through the kernel's mdev sysfs ABI as
Nova's own mdev code does (Documentation/driver-api/vfio-mediated-device.rst):

* made: a slot UUID written to ``mdev_supported_types/<type>/create`` of the GPU, or of
  its VFs on SR-IOV vGPU cards (the A100), where ``available_instances`` allows; each is
  remembered with those the install step made (``MDEVS_FILE``), so that marking the GPU
  inactive removes them too;
* removed: ``1`` written to ``/sys/bus/mdev/devices/<uuid>/remove``; mdevs of another type
  go first, then those in excess (Exosuit's own before others, the last slots first).
  **Never one in use**: when one that must go is named by the NVIDIA vGPU manager's
  ``nvidia/vm_name``, nothing is removed and the layout fails (``PartitionError``).

One vGPU type at a time per GPU (time-sliced vGPUs of one GPU share one type). Count 0
for every type removes them all and gives the GPU back to its configuration.

``{"mdev": {type: count}, "on_demand": true}`` (``OnDemandSlices``): the GPU offers
``count`` slots of the type, the first ``count`` of each parent's slot UUIDs (as many per
parent as its ``available_instances`` and its mdevs of the type allow), made or not;
``partition`` makes none, and removes every mdev but those slots (never one in use). A
bind's slot is made (``make_slice``: its UUID written to ``create``) when the agent is
told, and removed once it is released (``remove_slice``; not while ``nvidia/vm_name``
names a VM). The count is kept beside the type (``PARTITIONS_FILE``, ``on_demand``).

``{"mig": {profile: count}}`` (never on demand) on a GPU in MIG mode: exactly ``count``
MIG devices of each profile (one GPU instance with one compute instance spanning it
each), made and destroyed through NVML (exosuit/drivers/nvml_mig.py); profiles the
layout does not name are destroyed. **Never one in use**: when a MIG device that must go
runs processes, nothing is destroyed and the layout fails naming them. Switching MIG
mode on or off needs a GPU reset, which a layout never does: a GPU not in MIG mode
refuses a MIG layout. The GPU's own SR-IOV VFs are not partitioned by this driver.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from exosuit.drivers.base import AttachHandle, Device, PartitionError, pci_cpid
from exosuit.drivers.nvml import Nvml, NvmlUnavailable, PynvmlNvml, RecordedNvml
from exosuit.drivers.nvml_mig import (
    MigControl,
    MigError,
    PynvmlMigControl,
    RecordedMigControl,
)
from exosuit.drivers.state import read_state, write_state
from exosuit.drivers.sysfs import PciFunction, Sysfs

LOG = logging.getLogger(__name__)

__all__ = ["PARTITIONS_FILE", "MdevPartitions"]

# In the driver's state folder: the vGPU type each GPU's layout asks (PCI address → type).
PARTITIONS_FILE = "partitions.json"


class MdevPartitions:
    """Implements [exosuit.drivers.base.Partitionable] for nvidia_gpu (the module's
    docstring). Mixed into ``NvidiaGpuDriver``, whose mdev helpers it uses."""

    sysfs: Sysfs
    sysfs_root: str
    state_dir: str | None
    _partition_types_here: dict[str, str]
    _on_demand_here: dict[str, int]

    if TYPE_CHECKING:  # the driver's helpers (exosuit/drivers/nvidia/vgpu.py, discovery.py)

        def _mdev_parents(self, gpu: PciFunction) -> list[str]: ...
        def _type_dir(self, parent: str, vgpu_type: str, *rest: str) -> tuple[str, ...]: ...
        def _mdevs_on_bus(self) -> set[str]: ...
        def _existing_mdevs(self, parent: str, vgpu_type: str, on_bus: set[str]) -> list[str]: ...
        def _available(self, parent: str, vgpu_type: str) -> int: ...
        def _free_slots(
            self, parent: str, vgpu_type: str, on_bus: set[str], count: int
        ) -> list[str]: ...
        def _slot_uuid(self, parent: str, vgpu_type: str, index: int) -> str: ...
        def _created(self) -> dict[str, dict[str, str]]: ...
        def _save_created(self, created: dict[str, dict[str, str]]) -> None: ...
        def _nvml_source(self) -> Nvml | None: ...
        def _type_parents(self, parents: list[str], vgpu_type: str) -> list[str]: ...

    # -- Partitionable -----------------------------------------------------------------

    def partition(self, device: Device, layout: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Partitionable] (the module's docstring)."""
        if "mig" in layout:
            if layout.get("on_demand"):
                raise PartitionError(
                    f"GPU {device.pci_address}: MIG instances are not made on demand: NVML "
                    "names a MIG device only once it is made, so there is no slice to offer "
                    "before; set the MIG layout without on_demand"
                )
            self._partition_mig(device, layout["mig"])
            return
        address = device.pci_address or ""
        vgpu_type, count = _asked(address, layout)
        gpu = self.sysfs.pci_function(address)
        if gpu is None:
            raise PartitionError(f"{address}: no such PCI function")
        parents = self._mdev_parents(gpu)
        supported = sorted({t for p in parents for t in self._types(p)})
        if vgpu_type is not None and vgpu_type not in supported:
            raise PartitionError(
                f"GPU {address} has no mediated device type {vgpu_type} (bound to "
                f"{gpu.driver or 'no driver'}); it has: {', '.join(supported) or 'none'}"
            )
        existing = self._all_mdevs(parents)
        on_demand = bool(layout.get("on_demand")) and vgpu_type is not None and count > 0
        keep = [m for m in existing if m[1] == vgpu_type]
        going = [m for m in existing if m[1] != vgpu_type]
        if on_demand:
            assert vgpu_type is not None
            self._check_slots(address, parents, vgpu_type, count, going)
            slots = {
                h.attach_info["mdev_uuid"] for h in self._slot_handles(parents, vgpu_type, count)
            }
            going += [m for m in keep if m[2] not in slots]
            keep = [m for m in keep if m[2] in slots]
        excess = len(keep) - count
        if excess > 0:
            going += self._removable_first(keep)[:excess]
        in_use = {mdev: vm for _, _, mdev in going if (vm := self._vm_of(mdev))}
        if in_use:
            users = ", ".join(f"{m} (VM {vm})" for m, vm in sorted(in_use.items()))
            raise PartitionError(
                f"GPU {address}: the layout would remove mdevs in use, so none is removed: {users}"
            )
        needed = 0 if on_demand else count - len(keep)
        if vgpu_type is not None and needed > 0 and not going:
            self._check_room(address, parents, vgpu_type, needed)  # before anything is written
        created = self._created()
        self._remove(address, [mdev for _, _, mdev in going], created)
        if vgpu_type is not None and needed > 0:
            self._create(address, parents, vgpu_type, needed, created)
        self._save_type(address, vgpu_type if count else None, count if on_demand else None)

    def partitioned(self, device: Device, layout: Mapping[str, Any]) -> bool:
        """Implements [exosuit.drivers.base.Partitionable]: the GPU has exactly the
        layout's mdevs (of its type, none of another) and is offered as vGPUs of it; for
        a MIG layout, exactly its MIG devices, offered as such."""
        if "mig" in layout:
            wanted = {str(p): int(n) for p, n in layout["mig"].items() if int(n)}
            offered: dict[str, int] = {}
            for deployable in device.deployables:
                for handle in deployable.attach_handles:
                    if handle.attach_type == "MIG":
                        name = str(handle.attach_info.get("profile"))
                        offered[name] = offered.get(name, 0) + 1
            return offered == wanted
        address = device.pci_address or ""
        vgpu_type, count = _asked(address, layout)
        gpu = self.sysfs.pci_function(address)
        if gpu is None:
            return False
        existing = self._all_mdevs(self._mdev_parents(gpu))
        if layout.get("on_demand") and count:
            slots = [
                h for d in device.deployables for h in d.attach_handles if h.attach_type == "MDEV"
            ]
            return (
                self.on_demand_count(address) == count
                and len(slots) == count
                and all(t == vgpu_type for _, t, _ in existing)
            )
        if any(t != vgpu_type for _, t, _ in existing) or len(existing) != count:
            return False
        if not count:
            return True
        return any(
            d.resource_class == "VGPU" and dict(d.extra_attributes).get("vgpu_type") == vgpu_type
            for d in device.deployables
        )

    # -- MIG -------------------------------------------------------------------------

    def _partition_mig(self, device: Device, counts: Mapping[str, Any]) -> None:
        address = device.pci_address or ""
        wanted = {str(p): int(n) for p, n in counts.items() if int(n)}
        nvml = self._nvml_source()
        control = self._mig_control(nvml)
        try:
            gpu = nvml.gpus().get(address) if nvml is not None else None
        except NvmlUnavailable as error:
            raise PartitionError(f"GPU {address}: NVML unavailable: {error}") from error
        if gpu is None or control is None:
            raise PartitionError(f"GPU {address}: no NVML to make MIG instances with")
        if gpu.mig_mode != "enabled":
            raise PartitionError(
                f"GPU {address} is not in MIG mode; enabling it needs a GPU reset, which a "
                f"layout never does (nvidia-smi -i {address} -mig 1, then reset the GPU)"
            )
        profiles = {p.name: p for p in gpu.mig_profiles}
        unknown = sorted(set(wanted) - set(profiles))
        if unknown:
            raise PartitionError(
                f"GPU {address} has no MIG profile {', '.join(unknown)}; it has: "
                + ", ".join(sorted(profiles))
            )
        existing: dict[str, list[int]] = {}
        for instance in gpu.mig_instances:
            ids = existing.setdefault(instance.profile, [])
            if instance.gpu_instance_id not in ids:
                ids.append(instance.gpu_instance_id)
        busy = {
            gi: pids
            for ids in existing.values()
            for gi in ids
            if (pids := self._mig_processes(control, address, gi))
        }
        going: list[int] = []
        for profile, ids in sorted(existing.items()):
            excess = len(ids) - wanted.get(profile, 0)
            if excess > 0:  # free ones first, the last made first
                going += sorted(ids, key=lambda gi: (gi in busy, -gi))[:excess]
        held = {gi: busy[gi] for gi in going if gi in busy}
        if held:
            users = ", ".join(
                f"GPU instance {gi} (PIDs {', '.join(map(str, pids))})"
                for gi, pids in sorted(held.items())
            )
            raise PartitionError(
                f"GPU {address}: the layout would destroy MIG devices in use, so none is "
                f"destroyed: {users}"
            )
        missing = {p: n - len(existing.get(p, [])) for p, n in wanted.items()}
        missing = {p: n for p, n in missing.items() if n > 0}
        if not going:
            short = [
                f"{n} more of {p} (NVML allows {profiles[p].available or 0})"
                for p, n in sorted(missing.items())
                if n > (profiles[p].available or 0)
            ]
            if short:
                raise PartitionError(f"GPU {address}: the layout asks {'; '.join(short)}")
        try:
            for gi in going:
                control.destroy(address, gi)
            for profile, count in sorted(missing.items()):
                for _ in range(count):
                    control.create(address, profiles[profile].profile_id)
        except MigError as error:
            raise PartitionError(f"GPU {address}: {error}") from error

    def _mig_processes(self, control: MigControl, address: str, gi: int) -> list[int]:
        try:
            return control.processes(address, gi)
        except MigError as error:
            raise PartitionError(f"GPU {address}: {error}") from error

    def _mig_control(self, nvml: Nvml | None) -> MigControl | None:
        """What makes and destroys MIG instances: NVML itself on a live host, the
        recording of a recorded one (written back to its ``nvml.json``)."""
        if isinstance(nvml, RecordedNvml):
            path = os.path.join(self.sysfs_root, "nvml.json")
            return RecordedMigControl(nvml, path if os.path.exists(path) else None)
        if isinstance(nvml, PynvmlNvml):
            return PynvmlMigControl(nvml.pynvml)
        return None

    def partition_type(self, address: str) -> str | None:
        """The vGPU type the GPU's layout asks (None: no layout, or no mdev asked)."""
        return self._partition_types().get(address)

    def on_demand_count(self, address: str) -> int | None:
        """The slots the GPU's on-demand layout offers (None: its layout is not one)."""
        if self.state_dir is None:
            counts = dict(getattr(self, "_on_demand_here", {}))
        else:
            counts = read_state(self.state_dir, PARTITIONS_FILE).get("on_demand", {})
        found = counts.get(address)
        return int(found) if found is not None else None

    # -- OnDemandSlices --------------------------------------------------------------

    def made_slices(self, device: Device) -> list[AttachHandle]:
        """Implements [exosuit.drivers.base.OnDemandSlices]: the slots offered whose mdev
        exists."""
        on_bus = self._mdevs_on_bus()
        return [
            h
            for d in device.deployables
            for h in d.attach_handles
            if h.attach_type == "MDEV" and str(h.attach_info.get("mdev_uuid")).lower() in on_bus
        ]

    def make_slice(self, device: Device, handle: AttachHandle) -> None:
        """Implements [exosuit.drivers.base.OnDemandSlices]: the slot's UUID written to
        its parent's ``mdev_supported_types/<type>/create`` (remembered first)."""
        address, parent, vgpu_type, mdev = self._slot_of(device, handle)
        if mdev in self._mdevs_on_bus():
            return
        created = self._created()
        created[mdev] = {"gpu": address, "parent": parent, "type": vgpu_type}
        self._save_created(created)
        try:
            self.sysfs.write(*self._type_dir(parent, vgpu_type, "create"), value=mdev)
        except OSError as error:
            created.pop(mdev, None)
            self._save_created(created)
            raise PartitionError(
                f"GPU {address}: writing {mdev} to {parent}'s "
                f"mdev_supported_types/{vgpu_type}/create: {error}"
            ) from error

    def remove_slice(self, device: Device, handle: AttachHandle) -> None:
        """Implements [exosuit.drivers.base.OnDemandSlices]: ``1`` written to the mdev's
        ``remove``; never while ``nvidia/vm_name`` names a VM."""
        address, _, _, mdev = self._slot_of(device, handle)
        created = self._created()
        if mdev not in self._mdevs_on_bus():
            if created.pop(mdev, None) is not None:
                self._save_created(created)
            return
        vm = self._vm_of(mdev)
        if vm:
            raise PartitionError(f"GPU {address}: mdev {mdev} is in use by VM {vm}")
        self._remove(address, [mdev], created)

    def _slot_of(self, device: Device, handle: AttachHandle) -> tuple[str, str, str, str]:
        """(GPU address, parent, vGPU type, mdev UUID) of one of the device's MDEV slots."""
        address = device.pci_address or ""
        info = handle.attach_info
        keys = ("domain", "bus", "device", "function")
        if handle.attach_type != "MDEV" or not all(k in info for k in (*keys, "mdev_uuid")):
            raise PartitionError(f"GPU {address}: {handle.attach_type} {dict(info)} is no mdev")
        parent = "{domain}:{bus}:{device}.{function}".format(**info)
        return address, parent, str(info.get("asked_type")), str(info["mdev_uuid"]).lower()

    def _slot_handles(self, parents: list[str], vgpu_type: str, count: int) -> list[AttachHandle]:
        """The first ``count`` slots of ``vgpu_type`` over the GPU's parents (each parent as
        many as its available instances and its mdevs of the type make), as the handles
        they are once made."""
        on_bus = self._mdevs_on_bus()
        handles: list[AttachHandle] = []
        for parent in self._type_parents(parents, vgpu_type):
            room = self._available(parent, vgpu_type)
            room += len(self._existing_mdevs(parent, vgpu_type, on_bus))
            for index in range(min(room, count - len(handles))):
                handles.append(
                    AttachHandle(
                        "MDEV",
                        {
                            **pci_cpid(parent),
                            "asked_type": vgpu_type,
                            "vgpu_mark": f"{vgpu_type}_{index}",
                            "mdev_uuid": self._slot_uuid(parent, vgpu_type, index),
                        },
                    )
                )
        return handles

    def _check_slots(
        self,
        address: str,
        parents: list[str],
        vgpu_type: str,
        count: int,
        going: list[tuple[str, str, str]],
    ) -> None:
        """PartitionError when the GPU cannot offer ``count`` slots of the type (mdevs of
        other types, which the layout removes, count as room)."""
        room = len(self._slot_handles(parents, vgpu_type, count))
        if room < count and not going:
            raise PartitionError(
                f"GPU {address}: the layout asks {count} slots of {vgpu_type}; "
                f"available_instances allows {room}"
            )

    def _types(self, parent: str) -> list[str]:
        return self.sysfs.listdir("bus", "pci", "devices", parent, "mdev_supported_types")

    def _all_mdevs(self, parents: list[str]) -> list[tuple[str, str, str]]:
        """(parent, type, mdev UUID) of every mdev on the GPU's parents."""
        on_bus = self._mdevs_on_bus()
        return [
            (parent, vgpu_type, mdev)
            for parent in parents
            for vgpu_type in self._types(parent)
            for mdev in self._existing_mdevs(parent, vgpu_type, on_bus)
        ]

    def _removable_first(self, mdevs: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """The order mdevs in excess go in: free before in use, Exosuit's own slots
        (the last first) before mdevs made elsewhere."""
        slots: dict[str, int] = {}
        for parent, vgpu_type, _ in mdevs:
            for index in range(64):
                slots.setdefault(self._slot_uuid(parent, vgpu_type, index), index)

        def order(item: tuple[str, str, str]) -> tuple[bool, bool, int, str]:
            mdev = item[2]
            index = slots.get(mdev)
            return (bool(self._vm_of(mdev)), index is None, -(index or 0), mdev)

        return sorted(mdevs, key=order)

    def _vm_of(self, mdev: str) -> str | None:
        return self.sysfs.read("bus", "mdev", "devices", mdev, "nvidia", "vm_name") or None

    def _remove(self, address: str, mdevs: list[str], created: dict[str, dict[str, str]]) -> None:
        try:
            for mdev in mdevs:
                try:
                    self.sysfs.write("bus", "mdev", "devices", mdev, "remove", value="1")
                except OSError as error:
                    raise PartitionError(
                        f"GPU {address}: writing 1 to /sys/bus/mdev/devices/{mdev}/remove: {error}"
                    ) from error
                created.pop(mdev, None)
        finally:
            self._save_created(created)

    def _create(
        self,
        address: str,
        parents: list[str],
        vgpu_type: str,
        needed: int,
        created: dict[str, dict[str, str]],
    ) -> None:
        on_bus = self._mdevs_on_bus()
        typed, available = self._check_room(address, parents, vgpu_type, needed)
        plan = [
            (parent, mdev)
            for parent in typed
            for mdev in self._free_slots(parent, vgpu_type, on_bus, available[parent])
        ][:needed]
        for parent, mdev in plan:  # remembered first: a crash in between leaves none unknown
            created[mdev] = {"gpu": address, "parent": parent, "type": vgpu_type}
        self._save_created(created)
        for made, (parent, mdev) in enumerate(plan):
            try:
                self.sysfs.write(*self._type_dir(parent, vgpu_type, "create"), value=mdev)
            except OSError as error:
                for _, unmade in plan[made:]:
                    created.pop(unmade, None)
                self._save_created(created)
                raise PartitionError(
                    f"GPU {address}: writing {mdev} to {parent}'s "
                    f"mdev_supported_types/{vgpu_type}/create: {error} ({made} of {needed} made)"
                ) from error

    def _check_room(
        self, address: str, parents: list[str], vgpu_type: str, needed: int
    ) -> tuple[list[str], dict[str, int]]:
        """The parents of the type and their available instances; PartitionError when
        they cannot make ``needed`` more."""
        typed = [p for p in parents if vgpu_type in self._types(p)]
        available = {p: self._available(p, vgpu_type) for p in typed}
        if sum(available.values()) < needed:
            raise PartitionError(
                f"GPU {address}: the layout asks {needed} more mdevs of {vgpu_type}; "
                f"available_instances allows {sum(available.values())}"
            )
        return typed, available

    def _partition_types(self) -> dict[str, str]:
        if self.state_dir is None:
            return dict(getattr(self, "_partition_types_here", {}))
        types: dict[str, str] = read_state(self.state_dir, PARTITIONS_FILE).get("types", {})
        return types

    def _save_type(self, address: str, vgpu_type: str | None, slots: int | None = None) -> None:
        types = self._partition_types()
        counts: dict[str, int] = (
            dict(getattr(self, "_on_demand_here", {}))
            if self.state_dir is None
            else read_state(self.state_dir, PARTITIONS_FILE).get("on_demand", {})
        )
        if vgpu_type is None:
            types.pop(address, None)
        else:
            types[address] = vgpu_type
        if slots is None:
            counts.pop(address, None)
        else:
            counts[address] = slots
        if self.state_dir is None:
            self._partition_types_here = types
            self._on_demand_here = counts
        else:
            write_state(
                self.state_dir,
                PARTITIONS_FILE,
                {"version": 1, "types": types, "on_demand": counts},
            )


def _asked(address: str, layout: Mapping[str, Any]) -> tuple[str | None, int]:
    """(the vGPU type, its count) of an mdev layout; (None, 0) when it asks none."""
    if "mdev" not in layout:
        raise PartitionError(
            f"GPU {address}: the nvidia_gpu driver partitions a GPU into vGPU mdevs or MIG "
            "instances, not SR-IOV VFs"
        )
    asked = {str(t): int(n) for t, n in layout["mdev"].items() if int(n)}
    if len(asked) > 1:
        raise PartitionError(
            f"GPU {address}: one vGPU type at a time per GPU, not {', '.join(sorted(asked))}"
        )
    if not asked:
        return None, 0
    ((vgpu_type, count),) = asked.items()
    return vgpu_type, count
