"""nvidia_gpu's vGPUs: mediated devices (Documentation/ABI/testing/sysfs-bus-vfio-mdev).

A GPU that ``[nvidia_gpu] vgpu_types`` (or its partition layout) gives a type is offered as
the mdevs of that type that exist, one attach handle each; its mdev types are listed as
services (kind ``vgpu``) whether configured or not. ``mdev_supported_types`` is the GPU's,
or each of its VFs' on SR-IOV vGPU cards. The install step (``Installable``): the GPU's
binding (exosuit/drivers/binding.py), then ``[nvidia_gpu] mdevs`` (``TYPE:COUNT``) mdevs
made with Exosuit's slot UUIDs and remembered in ``MDEVS_FILE``, the only ones uninstall
removes (never one the NVIDIA vGPU manager shows in use). The operator's partition layouts
of mdevs are exosuit/drivers/nvidia_partitions.py's, on these helpers.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oslo_config import types

from exosuit.drivers.base import AttachHandle, Deployable, Device, InstallError, Service, pci_cpid
from exosuit.drivers.binding import BindingInstall
from exosuit.drivers.gpu_naming import vgpu
from exosuit.drivers.nvidia.discovery import is_nvidia_gpu
from exosuit.drivers.state import read_state, write_state
from exosuit.drivers.sysfs import PciFunction

__all__ = ["MDEVS_FILE", "InvalidVgpuConfig", "VgpuMdevs", "parse_mdevs", "parse_vgpu_types"]

# The driver's one logger, whichever of its modules logs.
LOG = logging.getLogger("exosuit.drivers.nvidia_gpu")

_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# Generated mdev UUIDs are uuid5(this, "<host>/<parent address>/<type>/<slot>"): the
# same on every discovery, so an attach handle keeps its identity when its mdev is
# created with that UUID and then shows up among the existing ones.
_MDEV_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "mdev.exosuit.dev")
# In the driver's state folder: the mdevs the install step created (UUID → its GPU, parent
# and type), which are the only ones uninstall removes.
MDEVS_FILE = "mdevs.json"
# What an mdev type id may be: it is a directory name in sysfs (``nvidia-223``, ``i915-GVTg_V5_4``).
_TYPE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


class InvalidVgpuConfig(ValueError):
    """``[nvidia_gpu] vgpu_types`` names a GPU or a vGPU type this host does not have."""


def parse_vgpu_types(value: Any) -> dict[str, str]:
    if not value:
        return {}
    if isinstance(value, str):
        try:
            value = types.Dict(key_value_separator="=")(value)
        except ValueError as error:
            raise InvalidVgpuConfig(f"[nvidia_gpu] vgpu_types: {error}") from error
    parsed: dict[str, str] = {}
    for address, vgpu_type in dict(value).items():
        address = str(address).strip().lower()
        if not _PCI_ADDRESS.match(address):
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: {address!r} is not a PCI address such as 0000:af:00.0"
            )
        if address in parsed:
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: {address} is given more than one vGPU type"
            )
        if not str(vgpu_type).strip():
            raise InvalidVgpuConfig(f"[nvidia_gpu] vgpu_types: no vGPU type for {address}")
        parsed[address] = str(vgpu_type).strip()
    return parsed


def parse_mdevs(value: Any) -> dict[str, int]:
    """``[nvidia_gpu] mdevs``: ``["nvidia-223:4", "nvidia-471:2"]`` (or one string,
    comma-separated) → ``{"nvidia-223": 4, "nvidia-471": 2}``; empty → {}. Raises
    InvalidVgpuConfig for an item that is not ``TYPE:COUNT``, a count that is not a whole
    number ≥ 0, or a type given twice."""
    if not value:
        return {}
    items = value.split(",") if isinstance(value, str) else list(value)
    parsed: dict[str, int] = {}
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        vgpu_type, colon, count = (part.strip() for part in item.rpartition(":"))
        if not colon or not _TYPE_ID.match(vgpu_type):
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] mdevs: {item!r} is not TYPE:COUNT, such as nvidia-223:4"
            )
        if not count.isdigit():
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] mdevs: the count of {vgpu_type} ({count!r}) is not a whole number"
            )
        if vgpu_type in parsed:
            raise InvalidVgpuConfig(f"[nvidia_gpu] mdevs: {vgpu_type} is given more than once")
        parsed[vgpu_type] = int(count)
    return parsed


class VgpuMdevs(BindingInstall):
    """The vGPU deployable and services of a GPU, and the install step (the module's
    docstring). Mixed into ``NvidiaGpuDriver``, which sets these attributes."""

    name: str
    hostname: str
    vgpu_types: dict[str, str]
    _created_here: dict[str, dict[str, str]]

    if TYPE_CHECKING:  # the partitions' (exosuit/drivers/nvidia_partitions.py)

        def on_demand_count(self, address: str) -> int | None: ...
        def _slot_handles(
            self, parents: list[str], vgpu_type: str, count: int
        ) -> list[AttachHandle]: ...

    def _check_vgpu_addresses(
        self, gpus: list[PciFunction], functions: Mapping[str, PciFunction]
    ) -> None:
        found = {g.address for g in gpus}
        for address in sorted(set(self.vgpu_types) - found):
            function = functions.get(address)
            if function is not None and function.is_vf and is_nvidia_gpu(function):
                raise InvalidVgpuConfig(
                    f"[nvidia_gpu] vgpu_types: {address} is an SR-IOV virtual function; "
                    f"configure its GPU, {function.physfn}"
                )
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: there is no NVIDIA GPU at {address} on this host"
            )

    def _vgpu_services(self, gpu: PciFunction) -> tuple[Service, ...]:
        """Every mdev type the GPU (or its VFs) supports, configured or not."""
        on_bus = {m.lower() for m in self.sysfs.listdir("bus", "mdev", "devices")}
        types: dict[str, dict[str, Any]] = {}
        for parent in self._mdev_parents(gpu):
            for type_id in self.sysfs.listdir(
                "bus", "pci", "devices", parent, "mdev_supported_types"
            ):
                found = types.setdefault(
                    type_id,
                    {
                        "name": self.sysfs.read(*self._type_dir(parent, type_id, "name"))
                        or type_id,
                        "available": 0,
                        "instances": 0,
                    },
                )
                found["available"] += _int(
                    self.sysfs.read(*self._type_dir(parent, type_id, "available_instances"))
                )
                found["instances"] += sum(
                    m.lower() in on_bus
                    for m in self.sysfs.listdir(*self._type_dir(parent, type_id, "devices"))
                )
        configured = self.vgpu_types.get(gpu.address)
        return tuple(
            Service(
                "vgpu",
                type_id,
                type_id == configured,
                {
                    "description": found["name"],
                    "available_instances": str(found["available"]),
                    "instances": str(found["instances"]),
                },
            )
            for type_id, found in sorted(types.items(), key=lambda t: _natural(t[0]))
        )

    def _foreign_mdevs(self, gpu: PciFunction) -> list[tuple[str, str]]:
        """(type, UUID) of each mdev on the GPU (or its VFs) that Exosuit did not make:
        neither one the install step or a layout made (the state folder's ``MDEVS_FILE``)
        nor one with an Exosuit slot UUID."""
        on_bus = self._mdevs_on_bus()
        created = self._created()
        found = []
        for parent in self._mdev_parents(gpu):
            for type_id in self.sysfs.listdir(
                "bus", "pci", "devices", parent, "mdev_supported_types"
            ):
                existing = self._existing_mdevs(parent, type_id, on_bus)
                slots = {
                    self._slot_uuid(parent, type_id, i) for i in range(max(64, 2 * len(existing)))
                }
                found += [(type_id, m) for m in existing if m not in created and m not in slots]
        return sorted(found)

    def _mdev_parents(self, gpu: PciFunction) -> list[str]:
        """Where the GPU's mdev types are: on the GPU, or on each VF (SR-IOV vGPU cards)."""
        if self.sysfs.listdir("bus", "pci", "devices", gpu.address, "mdev_supported_types"):
            return [gpu.address]
        return [
            vf
            for vf in gpu.virtfns
            if self.sysfs.listdir("bus", "pci", "devices", vf, "mdev_supported_types")
        ]

    def _type_dir(self, parent: str, vgpu_type: str, *rest: str) -> tuple[str, ...]:
        return ("bus", "pci", "devices", parent, "mdev_supported_types", vgpu_type, *rest)

    def _vgpu(self, gpu: PciFunction, vgpu_type: str, mig_capable: bool) -> Deployable:
        parents = self._mdev_parents(gpu)
        supported: dict[str, str] = {}
        for parent in parents:
            for type_id in self.sysfs.listdir(
                "bus", "pci", "devices", parent, "mdev_supported_types"
            ):
                supported.setdefault(
                    type_id, self.sysfs.read(*self._type_dir(parent, type_id, "name")) or type_id
                )
        if not supported:
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: GPU {gpu.address} offers no mediated device "
                f"types (bound to {gpu.driver or 'no driver'}; vGPUs need the NVIDIA vGPU "
                "host driver, and SR-IOV vGPU cards need their VFs enabled)"
            )
        if vgpu_type not in supported:
            known = ", ".join(f"{t} ({n})" for t, n in sorted(supported.items()))
            raise InvalidVgpuConfig(
                f"[nvidia_gpu] vgpu_types: GPU {gpu.address} does not support vGPU type "
                f"{vgpu_type!r}; it supports: {known}"
            )
        # Named as exosuit/drivers/gpu_naming.py names a vGPU (Cyborg's trait).
        naming = vgpu(gpu.device_id, vgpu_type, supported[vgpu_type], mig_capable)

        # Only mdevs that exist are offered (the install step creates them, ``mdevs``): a
        # handle for an instance still available would be a device that is not there;
        # but an on-demand layout offers its slots, made or not (a bind makes its own).
        on_bus = self._mdevs_on_bus()
        handles: list[AttachHandle] = []
        slots = self.on_demand_count(gpu.address)
        if slots is not None:
            handles = self._slot_handles(parents, vgpu_type, slots)
        for parent in self._type_parents(parents, vgpu_type) if slots is None else ():
            available = self._available(parent, vgpu_type)
            existing = self._existing_mdevs(parent, vgpu_type, on_bus)
            handles += self._mdev_handles(parent, vgpu_type, available, existing)
        return Deployable(
            name=f"{self.hostname}_{gpu.address}",
            num_accelerators=len(handles),
            resource_class=naming.resource_class,
            traits=naming.traits,
            attach_handles=tuple(handles),
            driver_name=self.name,
            extra_attributes=naming.attributes,
        )

    def _mdev_handles(
        self, parent: str, vgpu_type: str, available: int, existing: list[str]
    ) -> list[AttachHandle]:
        """One MDEV handle per existing mdev, by its UUID; none for the instances still
        available (``available``), which no mdev backs until one is created.

        An mdev whose UUID is one of Exosuit's generated "slot" UUIDs (slots 0, 1, …:
        the UUIDs on-demand creation will use) is marked ``<type>_<slot>``; one made
        elsewhere ``<type>_<its UUID>``.
        """

        slots = {
            self._slot_uuid(parent, vgpu_type, i): i
            for i in range(max(64, 2 * (available + len(existing))))
        }
        # mdev UUID → its place: (0, slot) for slots, (1, UUID) for mdevs made elsewhere.
        places: dict[str, tuple[int, int | str]] = {}
        for mdev in (m.lower() for m in existing):
            index = slots.get(mdev)
            places[mdev] = (0, index) if index is not None else (1, mdev)
        cpid = pci_cpid(parent)
        return [
            AttachHandle(
                "MDEV",
                {
                    **cpid,
                    "asked_type": vgpu_type,
                    "vgpu_mark": f"{vgpu_type}_{place[1]}",
                    "mdev_uuid": mdev,
                },
            )
            for mdev, place in sorted(places.items(), key=lambda item: item[1])
        ]

    def _slot_uuid(self, parent: str, vgpu_type: str, index: int) -> str:
        """Exosuit's UUID for slot ``index`` of ``vgpu_type`` on ``parent``: the same on
        every discovery and every host restart (doc/drivers/nvidia_gpu.md)."""
        key = f"{self.hostname}/{parent}/{vgpu_type}/{index}"
        return str(uuid.uuid5(_MDEV_NAMESPACE, key))

    def _mdevs_on_bus(self) -> set[str]:
        return {m.lower() for m in self.sysfs.listdir("bus", "mdev", "devices")}

    def _type_parents(self, parents: list[str], vgpu_type: str) -> list[str]:
        """The parents that have ``vgpu_type`` among their mdev_supported_types."""
        return [p for p in parents if self.sysfs.listdir(*self._type_dir(p, vgpu_type))]

    def _available(self, parent: str, vgpu_type: str) -> int:
        return _int(self.sysfs.read(*self._type_dir(parent, vgpu_type, "available_instances")))

    def _existing_mdevs(self, parent: str, vgpu_type: str, on_bus: set[str]) -> list[str]:
        """The mdevs of ``vgpu_type`` on ``parent`` (its ``devices/``) that are on the mdev bus."""
        return [
            m.lower()
            for m in self.sysfs.listdir(*self._type_dir(parent, vgpu_type, "devices"))
            if m.lower() in on_bus
        ]

    # -- Installable: bind_driver (BindingInstall), then the configured mdevs -------------

    def install(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: ``bind_driver`` for a GPU offered
        whole; for a GPU offered as vGPUs of a type ``mdevs`` names, that many mdevs of it
        (those that exist counted), created with slot UUIDs where ``available_instances``
        allows, the GPU's own or its VFs' in order. Refused before anything is written when
        they cannot make up the count."""
        super().install(device, settings)
        work = self._mdev_work(device, settings)
        if work is None:
            return
        vgpu_type, wanted = work
        address = device.pci_address or ""
        parents = self._vgpu_parents(address, vgpu_type)
        on_bus = self._mdevs_on_bus()
        existing = sum(len(self._existing_mdevs(p, vgpu_type, on_bus)) for p in parents)
        needed = wanted - existing
        if needed <= 0:
            return
        available = {p: self._available(p, vgpu_type) for p in parents}
        if sum(available.values()) < needed:
            raise InstallError(
                f"GPU {address}: [nvidia_gpu] mdevs asks {wanted} mdevs of {vgpu_type}; "
                f"{existing} exist and available_instances allows {sum(available.values())} "
                f"more, so at most {existing + sum(available.values())} are possible"
            )
        plan: list[tuple[str, str]] = []  # (parent, UUID), in creation order
        for parent in parents:
            for mdev in self._free_slots(parent, vgpu_type, on_bus, available[parent]):
                if len(plan) < needed:
                    plan.append((parent, mdev))
        created = self._created()
        for parent, mdev in plan:  # remembered first: a crash in between leaves none unknown
            created[mdev] = {"gpu": address, "parent": parent, "type": vgpu_type}
        self._save_created(created)
        made: list[str] = []
        for parent, mdev in plan:
            try:
                self.sysfs.write(*self._type_dir(parent, vgpu_type, "create"), value=mdev)
            except OSError as error:
                for _, unmade in plan[len(made) :]:
                    del created[unmade]
                self._save_created(created)
                self._roll_back(made, created)
                raise InstallError(
                    f"GPU {address}: writing {mdev} to {parent}'s "
                    f"mdev_supported_types/{vgpu_type}/create: {error}"
                ) from error
            made.append(mdev)

    def _free_slots(self, parent: str, vgpu_type: str, on_bus: set[str], count: int) -> list[str]:
        """The first ``count`` slot UUIDs of ``parent`` that no mdev has."""
        found: list[str] = []
        index = 0
        while len(found) < count:
            mdev = self._slot_uuid(parent, vgpu_type, index)
            if mdev not in on_bus:
                found.append(mdev)
            index += 1
        return found

    def _roll_back(self, made: list[str], created: dict[str, dict[str, str]]) -> None:
        """After a failed create: remove the mdevs this install made (best effort: the
        create's own error is what the operator needs to read)."""
        try:
            self._remove_mdevs(made, created)
        except InstallError as error:
            LOG.warning("nvidia_gpu: %s", error)

    def uninstall(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: removes the mdevs the install
        step created on this GPU (the state folder says which; never one made elsewhere),
        whatever ``mdevs`` says now; refused, with nothing removed, while the NVIDIA vGPU
        manager shows one of them in use by a VM (``nvidia/vm_name``). Then the binding."""
        address = device.pci_address or ""
        created = self._created()
        ours = sorted(m for m, at in created.items() if at.get("gpu") == address)
        if ours:
            on_bus = self._mdevs_on_bus()
            held = {
                m: vm
                for m in ours
                if m in on_bus
                and (vm := self.sysfs.read("bus", "mdev", "devices", m, "nvidia", "vm_name"))
            }
            if held:
                users = ", ".join(f"{m} (VM {vm})" for m, vm in sorted(held.items()))
                raise InstallError(
                    f"GPU {address}: its mdevs are in use, so none is removed: {users}"
                )
            self._remove_mdevs(ours, created)
        super().uninstall(device, settings)

    def _remove_mdevs(self, mdevs: list[str], created: dict[str, dict[str, str]]) -> None:
        """Write 1 to each mdev's ``remove`` (one gone already is only forgotten), and
        forget each removed from ``created`` (saved)."""
        try:
            for mdev in mdevs:
                if mdev in self._mdevs_on_bus():
                    try:
                        self.sysfs.write("bus", "mdev", "devices", mdev, "remove", value="1")
                    except OSError as error:
                        raise InstallError(
                            f"writing 1 to /sys/bus/mdev/devices/{mdev}/remove: {error}"
                        ) from error
                created.pop(mdev, None)
        finally:
            self._save_created(created)

    def installed(self, device: Device, settings: Mapping[str, Any]) -> bool:
        """Implements [exosuit.drivers.base.Installable]: bound as ``bind_driver`` says,
        and, for a GPU offered as vGPUs of a type ``mdevs`` names, at least that many mdevs
        of it exist (on the mdev bus)."""
        if not super().installed(device, settings):
            return False
        work = self._mdev_work(device, settings)
        if work is None:
            return True
        vgpu_type, wanted = work
        parents = self._vgpu_parents(device.pci_address or "", vgpu_type)
        on_bus = self._mdevs_on_bus()
        return sum(len(self._existing_mdevs(p, vgpu_type, on_bus)) for p in parents) >= wanted

    def _mdev_work(self, device: Device, settings: Mapping[str, Any]) -> tuple[str, int] | None:
        """(type, count) when the device is offered as vGPUs of a type ``mdevs`` names
        with a count; None: no mdev to create."""
        try:
            mdevs = parse_mdevs(settings.get("mdevs"))
        except InvalidVgpuConfig as error:
            raise InstallError(str(error)) from None
        for deployable in device.deployables:
            if deployable.resource_class == "VGPU":
                vgpu_type = dict(deployable.extra_attributes).get("vgpu_type")
                if vgpu_type is not None and mdevs.get(vgpu_type):
                    return vgpu_type, mdevs[vgpu_type]
        return None

    def _vgpu_parents(self, address: str, vgpu_type: str) -> list[str]:
        """Where the GPU's mdevs of ``vgpu_type`` are made: the GPU, or its VFs."""
        gpu = self.sysfs.pci_function(address)
        if gpu is None:
            raise InstallError(f"{address}: no such PCI function")
        parents = self._type_parents(self._mdev_parents(gpu), vgpu_type)
        if not parents:
            raise InstallError(
                f"GPU {address} offers no mediated device type {vgpu_type} (bound to "
                f"{gpu.driver or 'no driver'}; vGPUs need the NVIDIA vGPU host driver)"
            )
        return parents

    def _created(self) -> dict[str, dict[str, str]]:
        if self.state_dir is None:
            return {m: dict(at) for m, at in self._created_here.items()}
        created: dict[str, dict[str, str]] = read_state(self.state_dir, MDEVS_FILE).get(
            "created", {}
        )
        return created

    def _save_created(self, created: dict[str, dict[str, str]]) -> None:
        if self.state_dir is None:
            self._created_here = {m: dict(at) for m, at in created.items()}
            return
        write_state(self.state_dir, MDEVS_FILE, {"version": 1, "created": created})


def _natural(text: str) -> list[tuple[int, str]]:
    """``nvidia-99`` before ``nvidia-223``: runs of digits compared as numbers."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", text)]


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0
