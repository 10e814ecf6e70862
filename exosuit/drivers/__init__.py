"""Device drivers: they read the host and return plain data (frozen dataclasses).

Drivers are found through the entry point group ``exosuit.drivers`` (stevedore):
a vendor adds one module and one entry point. A driver class takes a
``DriverContext`` and may declare ``OPTIONS`` (oslo.config options, registered in
the configuration group named after the driver; the agent hands the values to
the driver as ``context.settings``). doc/drivers.md is the guide for vendors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from exosuit.drivers.runner import CommandRunner, SubprocessRunner

__all__ = [
    "ENTRY_POINT_GROUP",
    "DriverContext",
    "available_drivers",
    "driver_class",
    "load_driver",
]

ENTRY_POINT_GROUP = "exosuit.drivers"


@dataclasses.dataclass(frozen=True)
class DriverContext:
    """Everything a driver may know about its host: plain values, no services."""

    hostname: str
    sysfs_root: str = "/"
    runner: CommandRunner = dataclasses.field(default_factory=SubprocessRunner)
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _manager():
    from stevedore import ExtensionManager

    return ExtensionManager(ENTRY_POINT_GROUP, invoke_on_load=False)


def available_drivers() -> list[str]:
    return sorted(ext.name for ext in _manager())


def driver_class(name: str):
    for ext in _manager():
        if ext.name == name:
            return ext.plugin
    raise LookupError(
        f"unknown driver {name!r}; installed drivers: {', '.join(available_drivers())}"
    )


def load_driver(name: str, context: DriverContext):
    return driver_class(name)(context)
