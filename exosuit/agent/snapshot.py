"""Turn what the drivers found into an inventory snapshot (schemas/inventory-v1.json)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from exosuit import __version__, schemas
from exosuit.drivers.base import Driver

LOG = logging.getLogger(__name__)

__all__ = ["build_snapshot"]


# (identity, kept driver, dropped driver) already logged by this process: a claim that
# repeats at every discovery is said once, not every minute.
_CLAIMS_LOGGED: set[tuple[str, str, str]] = set()


def build_snapshot(hostname: str, drivers: Iterable[Driver]) -> dict:
    """Run every driver; one failing does not stop the others, its error travels along.

    A device two drivers find (a ``[pci] device_spec`` that also selects an NVMe
    drive, say) is reported once, by the driver listed first: one PCI function is
    one device, whatever finds it.
    """
    by_identity: dict[str, dict] = {}
    errors: list[dict] = []
    for driver in drivers:
        try:
            found = driver.discover()
        except Exception as error:  # a driver's failure is data, not a crash
            LOG.warning("driver %s failed: %s", driver.name, error)
            errors.append({"driver": driver.name, "error": f"{type(error).__name__}: {error}"})
            continue
        for device in found:
            snapshot = device.to_snapshot()
            identity = schemas.canonical_json(snapshot["controlpath_id"])
            kept = by_identity.setdefault(identity, snapshot)
            if kept is not snapshot:
                claim = (identity, kept["driver_name"], snapshot["driver_name"])
                if claim not in _CLAIMS_LOGGED:
                    _CLAIMS_LOGGED.add(claim)
                    LOG.warning("device %s is found by drivers %s and %s: reported by %s "
                                "(listed first in [agent] enabled_drivers)",
                                snapshot["pci_address"] or identity, kept["driver_name"],
                                snapshot["driver_name"], kept["driver_name"])
    devices = [by_identity[i] for i in sorted(by_identity)]
    return {
        "schema_version": 1,
        "hostname": hostname,
        "hash": schemas.snapshot_hash(devices, errors),
        "agent_version": __version__,
        "devices": devices,
        "driver_errors": errors,
    }
