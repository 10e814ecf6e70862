"""Small drivers for the agent's tests: options, install steps and usage, without a host.

The host they "drive" is a ``Bench``: plain data shared by every driver object built for
it, so a driver rebuilt with new options (agent/plugins.py) sees what the previous one
left, as a real driver sees sysfs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from oslo_config import cfg

from exosuit.agent.plugins import DriverSet
from exosuit.drivers.base import Device, InstallError
from tests.helpers.inventory import fpga

OPTIONS = [
    cfg.IntOpt("count", default=1, min=0, max=16, help="Devices found."),
    cfg.StrOpt("bind_driver", default="vfio-pci", help="What install binds."),
]
DEFAULTS = {"count": 1, "bind_driver": "vfio-pci"}


@dataclasses.dataclass
class Bench:
    """What the drivers of one test share: the bus of each driver's devices, which
    devices are installed (bound to what), and every call made."""

    buses: dict[str, str] = dataclasses.field(default_factory=dict)
    bound: dict[str, str] = dataclasses.field(default_factory=dict)  # PCI address → driver
    calls: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    built: list[tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=list)
    broken: set[str] = dataclasses.field(default_factory=set)  # kernel drivers that fail
    vanishing: set[str] = dataclasses.field(default_factory=set)  # not found any more
    vanish_on_install: set[str] = dataclasses.field(default_factory=set)
    # bound to another kernel driver behind the install's back (a udev rule, say)
    stolen: dict[str, str] = dataclasses.field(default_factory=dict)
    usage: dict[str, float] = dataclasses.field(default_factory=dict)
    # bound as the options say before any install of ours: uninstall leaves them so
    foreign: set[str] = dataclasses.field(default_factory=set)


class Counted:
    """Finds ``count`` FPGAs on its bus."""

    def __init__(self, name: str, settings: Mapping[str, Any], bench: Bench) -> None:
        self.name = name
        self.settings = dict(settings)
        self.bench = bench
        self.discoveries = 0
        bench.built.append((name, dict(settings)))

    def discover(self) -> list[Device]:
        self.discoveries += 1
        bus = self.bench.buses[self.name]
        addresses = [f"0000:{bus}:{i:02x}.0" for i in range(self.settings["count"])]
        return [fpga(a) for a in addresses if a not in self.bench.vanishing]


class Installing(Counted):
    """``install`` binds a device to ``bind_driver`` (refused for one of
    ``bench.broken``); ``uninstall`` unbinds it; ``installed`` says whether it is bound
    as the options say. Implements Installable."""

    def install(self, device: Device, settings: Mapping[str, Any]) -> None:
        self.bench.calls.append(("install", device.pci_address or "", settings["bind_driver"]))
        if settings["bind_driver"] in self.bench.broken:
            raise InstallError(f"{settings['bind_driver']}: no such kernel driver")
        self.bench.bound[device.pci_address or ""] = settings["bind_driver"]
        if device.pci_address in self.bench.vanish_on_install:
            self.bench.vanishing.add(device.pci_address or "")
        self.bench.bound.update(self.bench.stolen)

    def uninstall(self, device: Device, settings: Mapping[str, Any]) -> None:
        self.bench.calls.append(("uninstall", device.pci_address or "", settings["bind_driver"]))
        if "uninstall" in self.bench.broken:
            raise InstallError("the device is busy")
        if device.pci_address in self.bench.foreign:
            return  # not ours to undo
        self.bench.bound.pop(device.pci_address or "", None)

    def installed(self, device: Device, settings: Mapping[str, Any]) -> bool:
        return self.bench.bound.get(device.pci_address or "") == settings["bind_driver"]


class Metered(Counted):
    """Reads usage: ``bench.usage`` for every device (what the wire cannot carry
    included, for the agent to leave out). Implements UsageReader."""

    def usage(self, device: Device) -> Mapping[str, float]:
        if "usage" in self.bench.broken:
            raise OSError("nvml: GPU is lost")
        return dict(self.bench.usage)


KINDS: dict[str, type[Counted]] = {"counted": Counted, "installing": Installing, "metered": Metered}


def driver_set(
    bench: Bench,
    drivers: Mapping[str, tuple[str, str]],
    enabled: list[str],
    *,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
) -> DriverSet:
    """A DriverSet of ``drivers`` (name → (kind, bus)), the file enabling ``enabled``,
    each with DEFAULTS and its ``settings`` over them."""
    for name, (_, bus) in drivers.items():
        bench.buses[name] = bus

    def load(name: str, values: Mapping[str, Any]) -> Counted:
        return KINDS[drivers[name][0]](name, values, bench)

    return DriverSet(
        enabled,
        load,
        settings=lambda name: {**DEFAULTS, **(settings or {}).get(name, {})},
        options=lambda name: OPTIONS,
        installed={name: f"{len(name)}.0" for name in drivers},
    )
