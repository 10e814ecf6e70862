"""A node's devices as ``resource.k8s.io/v1`` ResourceSlices: pure building, no API calls.

The devices are the node's attach handles (what one container gets, as one VM gets one):
those of devices that are present, enabled and ``ready``, free or held by a claim of a
Kubernetes consumer (the scheduler's allocation then accounts for them); handles held by
Nova's ARQs or by other claims are left out, so the scheduler never picks them.

One pool per node, named after the node; at most 128 devices per slice, in as many
slices as needed (``resourceSliceCount``). A device's name is a DNS label derived from
its attach handle, unique on the node and stable (``fpga-0000-0c-00-1``,
``mdev-<uuid>``); ``handle_names`` is the same naming read backwards, for prepare.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

__all__ = [
    "API_VERSION",
    "DRIVER",
    "LABELS_DOMAIN",
    "MAX_DEVICES_PER_SLICE",
    "PCIE_ROOT",
    "Inventory",
    "build_slices",
    "device_names",
    "devices_of",
    "fingerprint",
    "handle_names",
    "pcie_root_complex",
    "quantity",
    "serialize",
    "slice_devices",
]

LOG = logging.getLogger(__name__)

DRIVER = "exosuit.dev"
API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTE_STRING = 64  # longer values are left out (CEL compares whole strings)
MAX_NAME = 63  # a DNS label
# An operator's device labels (API 2.10, doc/devices.md "Labels") are attributes of this
# domain: a CEL selector reads device.attributes["labels.exosuit.dev"].rack. Only a key
# that is a C identifier of at most 32 characters can be an attribute's name there
# (resource.k8s.io's QualifiedName); others (team.ml, cooling-zone) are left out.
LABELS_DOMAIN = "labels.exosuit.dev"
_ATTRIBUTE_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")

# Kubernetes' standard attribute (k8s.io/dynamic-resource-allocation/deviceattribute):
# the PCIe root complex, ``pci<domain>:<bus>``, that devices may be asked to share
# (matchAttribute) whatever their driver.
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
_ROOT_PORT = re.compile(r"^([0-9a-f]{4,5}):([0-9a-f]{2}):[0-9a-f]{2}\.[0-7]$")
_PCI_KEYS = ("domain", "bus", "device", "function")
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class Inventory:
    """What Exosuit's API says of one node: ``devices`` as ``GET /v2/devices`` (2.7)
    shows them, ``attach_handles`` as ``GET /v2/attach_handles`` (2.5) does, and the
    uuids of the handles held by claims of Kubernetes consumers (``k8s:…``)."""

    node: str
    devices: Sequence[Mapping[str, Any]] = ()
    attach_handles: Sequence[Mapping[str, Any]] = ()
    kubernetes_held: frozenset[str] = field(default_factory=frozenset)


def _label(text: str) -> str:
    """``text`` as a DNS label's characters: lower case, runs of others as one ``-``."""
    return _NOT_LABEL.sub("-", text.lower()).strip("-")


def _device_class(device: Mapping[str, Any] | None) -> str:
    return _label(str((device or {}).get("type") or "")) or "device"


def pcie_root_complex(root_port: Any) -> str | None:
    """The root complex of a device whose root port (Exosuit's ``pcie_root``) is
    ``root_port``: the host bridge whose root bus the port sits on (``0000:3a:00.0`` →
    ``pci0000:3a``, the kernel's name for it). None when unknown."""
    match = _ROOT_PORT.match(root_port) if isinstance(root_port, str) else None
    return f"pci{match[1]}:{match[2]}" if match else None


def _pci_address(info: Mapping[str, Any]) -> str | None:
    if not all(isinstance(info.get(k), str) and info.get(k) for k in _PCI_KEYS):
        return None
    return "{domain}:{bus}:{device}.{function}".format(**info).lower()


def _base_name(handle: Mapping[str, Any], device: Mapping[str, Any] | None) -> str:
    """The name the handle's kind gives it: its PCI function for PCI-like handles,
    the mdev's or the MIG instance's identity for those."""
    info = handle.get("attach_info") or {}
    kind = str(handle.get("attach_type") or "").upper()
    cls = _device_class(device)
    address = _pci_address(info)
    if kind == "MDEV" and info.get("mdev_uuid"):
        return f"mdev-{info['mdev_uuid']}"
    if kind == "MIG" and address and info.get("gpu_instance_id") is not None:
        gi, ci = info.get("gpu_instance_id"), info.get("compute_instance_id", "0")
        return f"mig-{address}-{gi}-{ci}"
    if address and set(info) <= set(_PCI_KEYS):
        return f"{cls}-{address}"
    return f"{cls}-{handle['uuid']}"


def _as_label(name: str, handle_uuid: str) -> str:
    label = _label(name)
    if not label or len(label) > MAX_NAME:
        label = _label(f"h-{handle_uuid}")
    return label


def device_names(inventory: Inventory) -> dict[str, str]:
    """attach handle uuid → device name, for every handle of the node (published or
    not: the names do not depend on which are offered now). Two handles that would
    share a name both take their uuid's form."""
    devices = {d["uuid"]: d for d in inventory.devices}
    wanted = {
        h["uuid"]: _as_label(_base_name(h, devices.get(h.get("device_uuid"))), h["uuid"])
        for h in inventory.attach_handles
    }
    counts: dict[str, int] = {}
    for name in wanted.values():
        counts[name] = counts.get(name, 0) + 1
    return {
        uuid: name if counts[name] == 1 else _as_label(f"h-{uuid}", uuid)
        for uuid, name in wanted.items()
    }


def handle_names(inventory: Inventory) -> dict[str, str]:
    """device name → attach handle uuid: what a ResourceClaim's allocation names, read
    back (every handle of the node, published or not)."""
    return {name: uuid for uuid, name in device_names(inventory).items()}


def _offered(device: Mapping[str, Any] | None) -> bool:
    return bool(
        device
        and device.get("activation", "ready") == "ready"
        and device.get("presence", "present") == "present"
        and device.get("status", "enabled") == "enabled"
        # Held back as unhealthy (API 2.9, doc/devices.md, Health): not published.
        and (device.get("health") or {}).get("offered", True)
    )


def _published(handle: Mapping[str, Any], inventory: Inventory) -> bool:
    if handle.get("presence", "present") != "present":
        return False
    held = handle.get("in_use") or handle.get("holder") is not None
    return not held or handle["uuid"] in inventory.kubernetes_held


def _loaded_function(device: Mapping[str, Any]) -> str | None:
    for service in device.get("services") or ():
        if service.get("kind") == "fpga_function" and service.get("enabled", True):
            return str(service.get("name"))
    return None


def _string(value: Any) -> client.V1DeviceAttribute | None:
    if value is None or value == "":
        return None
    text = str(value)
    if len(text) > MAX_ATTRIBUTE_STRING:
        LOG.info(
            "attribute value %r is longer than %d characters: left out", text, MAX_ATTRIBUTE_STRING
        )
        return None
    return client.V1DeviceAttribute(string=text)


def _attributes(
    handle: Mapping[str, Any], device: Mapping[str, Any]
) -> dict[str, client.V1DeviceAttribute]:
    """The device's attributes under the driver's domain (unprefixed names), and its
    labels under LABELS_DOMAIN (those whose key can be an attribute's name)."""
    info = handle.get("attach_info") or {}
    found: dict[str, client.V1DeviceAttribute | None] = {
        "type": _string(device.get("type")),
        "vendor": _string(device.get("vendor")),
        "model": _string(device.get("model")),
        "pciAddress": _string(_pci_address(info) or device.get("pci_address")),
        "driver": _string(device.get("driver_name")),
        "function": _string(_loaded_function(device)),
        "attachType": _string(handle.get("attach_type")),
        "deviceUuid": _string(device.get("uuid")),
        "attachHandleUuid": _string(handle.get("uuid")),
    }
    numa = device.get("numa_node")
    if isinstance(numa, int) and not isinstance(numa, bool):
        found["numaNode"] = client.V1DeviceAttribute(int=numa)
    for key, value in sorted((device.get("labels") or {}).items()):
        if _ATTRIBUTE_ID.match(key):
            found[f"{LABELS_DOMAIN}/{key}"] = _string(value)
    found[PCIE_ROOT] = _string(pcie_root_complex(device.get("pcie_root")))
    return {name: value for name, value in found.items() if value is not None}


_SI = (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3))


def quantity(value: int) -> str:
    """A whole number as the API server's canonical decimal Quantity (``80000000000`` →
    ``80G``), so that what it stores reads back as written."""
    for suffix, exponent in _SI:
        if value and value % 10**exponent == 0:
            return f"{value // 10**exponent}{suffix}"
    return str(value)


def _capacity(device: Mapping[str, Any], whole: bool) -> dict[str, client.V1DeviceCapacity]:
    """Memory and storage where the inventory knows them, for a handle that is the whole
    device (a partition's share of its device is not known here)."""
    if not whole:
        return {}
    capacity = {}
    memory = (device.get("usage") or {}).get("memory_total_bytes")
    if isinstance(memory, int | float) and memory > 0:
        capacity["memory"] = client.V1DeviceCapacity(value=quantity(int(memory)))
    storage = sum(
        int(service.get("details", {}).get("capacity_bytes") or 0)
        for service in device.get("services") or ()
        if service.get("kind") == "nvme_namespace"
        and str(service.get("details", {}).get("capacity_bytes") or "0").isdigit()
    )
    if storage > 0:
        capacity["storage"] = client.V1DeviceCapacity(value=quantity(storage))
    return capacity


def devices_of(inventory: Inventory) -> list[client.V1Device]:
    """The pool's devices, sorted by name."""
    devices = {d["uuid"]: d for d in inventory.devices}
    names = device_names(inventory)
    handles_per_device: dict[str, int] = {}
    for handle in inventory.attach_handles:
        key = str(handle.get("device_uuid"))
        handles_per_device[key] = handles_per_device.get(key, 0) + 1
    found = []
    for handle in inventory.attach_handles:
        device = devices.get(handle.get("device_uuid"))
        if device is None or not _offered(device) or not _published(handle, inventory):
            continue
        whole = handles_per_device[str(handle.get("device_uuid"))] == 1
        capacity = _capacity(device, whole)
        found.append(
            client.V1Device(
                name=names[handle["uuid"]],
                attributes=_attributes(handle, device),
                capacity=capacity or None,
            )
        )
    return sorted(found, key=lambda d: d.name)


def slice_devices(devices: Sequence[client.V1Device]) -> list[list[client.V1Device]]:
    """The devices in slices of at most ``MAX_DEVICES_PER_SLICE``."""
    step = MAX_DEVICES_PER_SLICE
    return [list(devices[i : i + step]) for i in range(0, len(devices), step)]


def build_slices(
    node: str,
    chunks: Sequence[Sequence[client.V1Device]],
    generation: int,
    node_uid: str | None = None,
) -> list[client.V1ResourceSlice]:
    """One ResourceSlice per chunk, all of pool ``node`` at ``generation``; named by the
    API server (``generateName`` ``<node>-exosuit.dev-``), owned by the Node when its
    uid is known (so that they go with it)."""
    owners = None
    if node_uid:
        owners = [
            client.V1OwnerReference(
                api_version="v1", kind="Node", name=node, uid=node_uid, controller=True
            )
        ]
    pool = client.V1ResourcePool(name=node, generation=generation, resource_slice_count=len(chunks))
    return [
        client.V1ResourceSlice(
            api_version=API_VERSION,
            kind="ResourceSlice",
            metadata=client.V1ObjectMeta(
                generate_name=f"{node}-{DRIVER}-", owner_references=owners
            ),
            spec=client.V1ResourceSliceSpec(
                driver=DRIVER, node_name=node, pool=pool, devices=list(chunk)
            ),
        )
        for chunk in chunks
    ]


_serializer: client.ApiClient | None = None


def serialize(value: Any) -> Any:
    """A model (or a list or dict of them) as the JSON the API server receives."""
    global _serializer
    if _serializer is None:
        _serializer = client.ApiClient()
    return _serializer.sanitize_for_serialization(value)


def fingerprint(devices: Iterable[client.V1Device]) -> str:
    """The devices as one comparable text (what a slice holds, whatever its order)."""
    return json.dumps(
        sorted((serialize(d) for d in devices), key=lambda d: d["name"]), sort_keys=True
    )
