"""Turn what the drivers found into an inventory snapshot (schemas/inventory-v1.json)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from exosuit import __version__, schemas
from exosuit.drivers.base import Driver

LOG = logging.getLogger(__name__)

__all__ = ["build_snapshot"]


def build_snapshot(hostname: str, drivers: Iterable[Driver]) -> dict:
    """Run every driver; one failing does not stop the others, its error travels along."""
    devices: list[dict] = []
    errors: list[dict] = []
    for driver in drivers:
        try:
            found = driver.discover()
        except Exception as error:  # a driver's failure is data, not a crash
            LOG.warning("driver %s failed: %s", driver.name, error)
            errors.append({"driver": driver.name, "error": f"{type(error).__name__}: {error}"})
            continue
        devices.extend(device.to_snapshot() for device in found)
    devices.sort(key=lambda d: schemas.canonical_json(d["controlpath_id"]))
    return {
        "schema_version": 1,
        "hostname": hostname,
        "hash": schemas.snapshot_hash(devices, errors),
        "agent_version": __version__,
        "devices": devices,
        "driver_errors": errors,
    }
