"""Turn what the drivers found into an inventory snapshot (schemas/inventory-v1.json).

Each device that its driver (a ``HealthReader``) finds in warning or unhealthy carries
its ``health`` (state and reason; doc/devices.md, "Health") in the snapshot, and so in
its hash: a change of health is a changed report, which the server applies at once. A
healthy device carries none, so that the snapshot (and its hash) of a healthy host is
what it was before drivers read health. The figures behind it (error counts,
temperatures) are usage, outside the hash.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Iterable
from typing import Any

from exosuit import __version__, schemas
from exosuit.drivers.base import HEALTH_OK, Device, Driver, HealthReader, UsageReader

LOG = logging.getLogger(__name__)

__all__ = ["Discovery", "build_snapshot", "discover", "make_snapshot"]

# The wire's bounds of ``usage`` (schemas/inventory-v1.json).
MAX_USAGE_DEVICES = 4096
MAX_FIGURES = 32
_FIGURE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

# (identity, kept driver, dropped driver) already logged by this process: a claim that
# repeats at every discovery is said once, not every minute.
_CLAIMS_LOGGED: set[tuple[str, str, str]] = set()
# Drivers whose usage could not be read, already logged (said once per driver).
_USAGE_LOGGED: set[str] = set()
# Drivers whose health could not be read, already logged (said once per driver).
_HEALTH_LOGGED: set[str] = set()


@dataclasses.dataclass
class Discovery:
    """What one run of the drivers found.

    ``devices``: the snapshot's devices (one per identity, sorted by it);
    ``driver_errors``: the snapshot's failed drivers; ``found``: devices each driver
    returned, by driver name; ``failed``: each failed driver's error; ``found_by``:
    device identity → the driver that reports it; ``usage``: device identity → its live
    figures (only when asked for, and only of drivers that can read them).
    """

    devices: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    driver_errors: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    found: dict[str, int] = dataclasses.field(default_factory=dict)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    found_by: dict[str, str] = dataclasses.field(default_factory=dict)
    usage: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)


def discover(drivers: Iterable[Driver], *, usage: bool = False) -> Discovery:
    """Run every driver; one failing does not stop the others, its error travels along.

    A device two drivers find (a ``[pci] device_spec`` that also selects an NVMe
    drive, say) is reported once, by the driver listed first: one PCI function is
    one device, whatever finds it. ``usage``: also read the live figures of the
    devices reported, from the drivers that implement ``UsageReader``.
    """
    result = Discovery()
    by_identity: dict[str, dict[str, Any]] = {}
    for driver in drivers:
        try:
            found = driver.discover()
        except Exception as error:  # a driver's failure is data, not a crash
            LOG.warning("driver %s failed: %s", driver.name, error)
            message = f"{type(error).__name__}: {error}"
            result.driver_errors.append({"driver": driver.name, "error": message})
            result.failed[driver.name] = message
            continue
        result.found[driver.name] = len(found)
        reader = driver if usage and isinstance(driver, UsageReader) else None
        judge = driver if isinstance(driver, HealthReader) else None
        for device in found:
            snapshot = device.to_snapshot()
            snapshot["plugin"] = driver.name
            identity = schemas.device_identity(snapshot["controlpath_id"])
            kept = by_identity.setdefault(identity, snapshot)
            if kept is snapshot:
                result.found_by[identity] = driver.name
                health = _health(judge, driver.name, device) if judge is not None else None
                if health is not None:
                    snapshot["health"] = health
                if reader is not None and len(result.usage) < MAX_USAGE_DEVICES:
                    figures = _usage(reader, driver.name, device)
                    if figures:
                        result.usage[identity] = figures
                continue
            claim = (identity, kept["driver_name"], snapshot["driver_name"])
            if claim not in _CLAIMS_LOGGED:
                _CLAIMS_LOGGED.add(claim)
                LOG.warning(
                    "device %s is found by drivers %s and %s: reported by %s "
                    "(listed first in [agent] enabled_drivers)",
                    snapshot["pci_address"] or identity,
                    kept["driver_name"],
                    snapshot["driver_name"],
                    kept["driver_name"],
                )
    result.devices = [by_identity[i] for i in sorted(by_identity)]
    return result


def _health(judge: HealthReader, name: str, device: Device) -> dict[str, Any] | None:
    """The device's health as the snapshot carries it; None (no health reported) when it
    is ok, or when the driver fails to read it, which is logged once per driver."""
    try:
        health = judge.health(device)
    except Exception as error:  # health is best effort: the report goes on without it
        if name not in _HEALTH_LOGGED:
            _HEALTH_LOGGED.add(name)
            LOG.warning("driver %s could not read health: %s", name, error)
        return None
    return None if health.state == HEALTH_OK else health.to_snapshot()


def _usage(reader: UsageReader, name: str, device: Any) -> dict[str, float]:
    """The figures the wire can carry: named as the schema says, finite, at most 32.
    A driver that fails to read them is logged once, and the device has none."""
    try:
        figures = reader.usage(device)
    except Exception as error:  # usage is best effort: the report goes on without it
        if name not in _USAGE_LOGGED:
            _USAGE_LOGGED.add(name)
            LOG.warning("driver %s could not read usage: %s", name, error)
        return {}
    kept: dict[str, float] = {}
    for key, value in figures.items():
        if len(kept) >= MAX_FIGURES:
            break
        if (
            isinstance(key, str)
            and _FIGURE.match(key)
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
        ):
            kept[key] = value
    return kept


def make_snapshot(
    hostname: str, found: Discovery, drivers: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The snapshot of ``found``; ``drivers`` (the installed plug-ins' report,
    agent/plugins.py) is carried, and hashed, when given."""
    snapshot: dict[str, Any] = {
        "schema_version": 1,
        "hostname": hostname,
        "hash": schemas.snapshot_hash(found.devices, found.driver_errors, drivers),
        "agent_version": __version__,
        "devices": found.devices,
        "driver_errors": found.driver_errors,
    }
    if drivers is not None:
        snapshot["drivers"] = drivers
    return snapshot


def build_snapshot(hostname: str, drivers: Iterable[Driver]) -> dict[str, Any]:
    """Run every driver (``discover``) and make the snapshot of what they found,
    without the drivers' report (its hash as a bare inventory's)."""
    return make_snapshot(hostname, discover(drivers))
