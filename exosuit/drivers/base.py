"""The driver contract: a driver's ``discover()`` returns ``Device`` values.

A driver knows nothing of HTTP, the database or Placement. It reads the host
(sysfs under a root, vendor tools through a command runner) and returns frozen
dataclasses; the agent turns them into a snapshot (``Device.to_snapshot``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

__all__ = ["AttachHandle", "Deployable", "Device", "Driver", "pci_cpid"]


@dataclasses.dataclass(frozen=True)
class AttachHandle:
    """One thing a VM or container can be given: a PCI function, an mdev …"""

    attach_type: str  # PCI, MDEV, TEST_PCI …
    attach_info: Mapping[str, str]

    def to_snapshot(self) -> dict:
        return {"attach_type": self.attach_type, "attach_info": dict(self.attach_info)}


@dataclasses.dataclass(frozen=True)
class Deployable:
    """A unit Placement sees as one resource provider."""

    name: str
    num_accelerators: int
    resource_class: str
    traits: tuple[str, ...] = ()
    attach_handles: tuple[AttachHandle, ...] = ()
    driver_name: str | None = None
    extra_attributes: tuple[tuple[str, str], ...] = ()

    def to_snapshot(self) -> dict:
        attributes = [{"key": "rc", "value": self.resource_class}]
        attributes += [{"key": f"trait{i}", "value": t} for i, t in enumerate(self.traits)]
        attributes += [{"key": k, "value": v} for k, v in self.extra_attributes]
        body = {
            "name": self.name,
            "num_accelerators": self.num_accelerators,
            "attributes": attributes,
            "attach_handles": [h.to_snapshot() for h in self.attach_handles],
        }
        if self.driver_name is not None:
            body["driver_name"] = self.driver_name
        return body


@dataclasses.dataclass(frozen=True)
class Device:
    """One physical card (or function) of the host."""

    type: str  # GPU, FPGA, AICHIP, QAT, NIC, SSD …
    vendor: str
    model: str
    driver_name: str
    controlpath_id: Mapping[str, str]  # PCI: domain, bus, device, function
    deployables: tuple[Deployable, ...]
    pci_address: str | None = None
    numa_node: int | None = None
    firmware_version: str | None = None
    std_board_info: Mapping[str, str] = dataclasses.field(default_factory=dict)
    vendor_board_info: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_snapshot(self) -> dict:
        return {
            "type": self.type,
            "vendor": self.vendor,
            "model": self.model,
            "driver_name": self.driver_name,
            "controlpath_id": {"cpid_type": "PCI", "cpid_info": dict(self.controlpath_id)},
            "pci_address": self.pci_address,
            "numa_node": self.numa_node,
            "firmware_version": self.firmware_version,
            "std_board_info": dict(self.std_board_info),
            "vendor_board_info": dict(self.vendor_board_info),
            "deployables": [d.to_snapshot() for d in self.deployables],
        }


@runtime_checkable
class Driver(Protocol):
    """What the agent calls. ``discover`` must be free of side effects."""

    name: str

    def discover(self) -> list[Device]: ...


def pci_cpid(address: str) -> dict[str, str]:
    """``0000:3b:00.1`` → ``{"domain": "0000", "bus": "3b", "device": "00", "function": "1"}``."""
    domain, bus, rest = address.split(":")
    device, function = rest.split(".")
    return {"domain": domain, "bus": bus, "device": device, "function": function}
