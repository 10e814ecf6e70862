"""Device drivers: they read the host and return plain data (frozen dataclasses).

Drivers are found through the entry point group ``exosuit.drivers`` (the packages'
metadata; a driver's module is imported only when that driver is asked for):
a vendor adds one module and one entry point. A driver class takes a
``DriverContext`` and may declare ``OPTIONS`` (oslo.config options, registered in
the configuration group named after the driver; the agent hands the values to
the driver as ``context.settings``). doc/drivers.md is the guide for vendors.

The driver SDK is what ``__all__`` lists here: the names of ``exosuit.drivers.base``
(the contract), ``exosuit.drivers.runner`` (vendor tools), ``exosuit.drivers.sysfs``
(the host's sysfs) and the health readings every PCI driver shares
(``exosuit.drivers.health``), re-exported, plus the context and the registry below. Everything
else under ``exosuit.drivers`` belongs to a shipped driver and may change.
tests/drivers/test_driver_sdk.py holds the list.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from exosuit.drivers.base import (
    HEALTH_OK,
    HEALTH_STATES,
    HEALTH_UNHEALTHY,
    HEALTH_WARNING,
    PROGRAM_FORMATS,
    AttachHandle,
    ContainerDevice,
    ContainerEdits,
    Deployable,
    Device,
    DeviceNode,
    Driver,
    Health,
    HealthReader,
    ImageFile,
    Installable,
    InstallError,
    LoadedImage,
    Mount,
    OnDemandSlices,
    Partitionable,
    PartitionError,
    ProgramError,
    Programmable,
    Service,
    UsageReader,
    pci_cpid,
    trait_suffix,
)
from exosuit.drivers.runner import (
    CommandFailed,
    CommandNotRecorded,
    CommandResult,
    CommandRunner,
    RecordedRunner,
    SubprocessRunner,
)
from exosuit.drivers.sysfs import PciFunction, Sysfs, normalize_id

if TYPE_CHECKING:
    from exosuit.drivers.health import CounterWindow, HealthSettings, PciHealth, hwmon_health

# NOTE: the health readings (exosuit.drivers.health) are imported when first asked for
# (``__getattr__`` below), not with the package: the agent lists its plug-ins by importing
# this package, and must not import more than the contract to do so (tests/agent).
_HEALTH_NAMES = frozenset({"CounterWindow", "HealthSettings", "PciHealth", "hwmon_health"})

__all__ = [
    "ENTRY_POINT_GROUP",
    "HEALTH_OK",
    "HEALTH_STATES",
    "HEALTH_UNHEALTHY",
    "HEALTH_WARNING",
    "PROGRAM_FORMATS",
    "AttachHandle",
    "CommandFailed",
    "CommandNotRecorded",
    "CommandResult",
    "CommandRunner",
    "ContainerDevice",
    "ContainerEdits",
    "CounterWindow",
    "Deployable",
    "Device",
    "DeviceNode",
    "Driver",
    "DriverContext",
    "Health",
    "HealthReader",
    "HealthSettings",
    "ImageFile",
    "InstallError",
    "Installable",
    "LoadedImage",
    "Mount",
    "OnDemandSlices",
    "PartitionError",
    "Partitionable",
    "PciFunction",
    "PciHealth",
    "ProgramError",
    "Programmable",
    "RecordedRunner",
    "Service",
    "SubprocessRunner",
    "Sysfs",
    "UsageReader",
    "available_drivers",
    "driver_class",
    "hwmon_health",
    "load_driver",
    "normalize_id",
    "pci_cpid",
    "trait_suffix",
]

ENTRY_POINT_GROUP = "exosuit.drivers"


def __getattr__(name: str) -> Any:
    """The health readings' names, imported from exosuit.drivers.health when first used."""
    if name in _HEALTH_NAMES:
        from exosuit.drivers import health

        return getattr(health, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass(frozen=True)
class DriverContext:
    """Everything a driver may know about its host: plain values, no services.

    ``state_dir``: a directory of the agent's state folder that is the driver's own
    (``<[agent] state_dir>/drivers/<name>``), for what a driver must remember across
    restarts (the simulated driver keeps its loaded images there); None where nothing
    may be written (``exosuit-agent discover``). The driver creates it when it writes.

    ``sysfs``: what the driver reads and writes sysfs through (``open_sysfs()``); None,
    the default, is ``Sysfs(sysfs_root)``. Tests give one whose writes act on a copied
    tree as the kernel would (tests/drivers/kernel.py), as they give a recorded runner.
    """

    hostname: str
    sysfs_root: str = "/"
    runner: CommandRunner = dataclasses.field(default_factory=SubprocessRunner)
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    state_dir: str | None = None
    sysfs: Sysfs | None = None
    health: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sysfs is not None and self.sysfs.root != os.path.abspath(self.sysfs_root):
            raise ValueError(
                f"the context's sysfs is under {self.sysfs.root}, its sysfs_root is "
                f"{self.sysfs_root}"
            )

    def open_sysfs(self) -> Sysfs:
        """The host's sysfs under ``sysfs_root``: the context's ``sysfs`` when given."""
        return self.sysfs if self.sysfs is not None else Sysfs(self.sysfs_root)

    def health_settings(self) -> HealthSettings:
        """The ``[health]`` thresholds of ``health`` (defaults where it says nothing)."""
        from exosuit.drivers.health import HealthSettings

        return HealthSettings.from_mapping(self.health)


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    """The group's entry points, read from the installed packages' metadata (no driver
    module is imported for it)."""
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def available_drivers() -> list[str]:
    return sorted({entry_point.name for entry_point in _entry_points()})


# Any: an entry point may name any object; that it is a driver class is the documented
# contract (doc/drivers.md), which no type checker can see through the entry point.
def driver_class(name: str) -> Callable[[DriverContext], Driver]:
    """The class the installed driver ``name`` registered: called with a context, a driver.
    Only that driver's module is imported (an agent loads the drivers it runs, not every
    one installed); the first of two entry points with one name wins, as stevedore's
    lookup did."""
    for entry_point in _entry_points():
        if entry_point.name == name:
            plugin: Callable[[DriverContext], Driver] = entry_point.load()
            return plugin
    raise LookupError(
        f"unknown driver {name!r}; installed drivers: {', '.join(available_drivers())}"
    )


def load_driver(name: str, context: DriverContext) -> Driver:
    return driver_class(name)(context)
