"""The removal grace: a device missing from one discovery is still reported for a while.

A device can vanish for a moment (a driver reloading, a reset, a flaky tool), and
dropping it at once would delete its deployables and resource providers only to create
them again at the next discovery. So a device missing from a discovery is kept in the
snapshot, marked with ``missing_since``, for ``[agent] removal_grace`` seconds (the API
shows it as missing and binds nothing to it); then it is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from exosuit import schemas
from exosuit.agent.cache import SeenDevice

__all__ = ["Graced", "apply_removal_grace"]


class Graced(NamedTuple):
    """What ``apply_removal_grace`` returns."""

    snapshot: dict[str, Any]
    """The snapshot to send: the discovery plus the devices still within their grace
    (its hash recomputed, its ``drivers`` included)."""
    remembered: dict[str, SeenDevice]
    """What to remember until the next discovery (identity → last seen, device)."""


def apply_removal_grace(
    found: Mapping[str, Any],
    remembered: Mapping[str, SeenDevice],
    now: float,
    grace: float,
    *,
    found_by: Mapping[str, str] | None = None,
    no_grace: Collection[str] = (),
) -> Graced:
    """Keep the devices of ``remembered`` that ``found`` lacks, for ``grace`` seconds.

    ``found`` is a fresh discovery (agent/snapshot.py), ``remembered`` what the previous
    call returned (device identity → ``{"last_seen", "device"}``), ``now`` the time in
    epoch seconds. A device found is remembered as seen ``now``. A device not found
    that was last seen less than ``grace`` seconds ago is added to the snapshot with
    ``missing_since`` (its last sighting, ISO 8601 UTC) and stays remembered as it
    was; any other is forgotten.

    ``found_by`` (identity → the driver that found the device) is remembered with each
    device found; a remembered device found by a driver of ``no_grace`` (drivers
    disabled on purpose) is forgotten at once, whatever its age.

    When a device is kept, the snapshot's devices are sorted by identity (as a
    discovery's are) and its hash recomputed; otherwise the snapshot equals ``found``,
    hash included. Pure: neither input is changed, nothing else is read.
    """
    devices = {schemas.device_identity(d["controlpath_id"]): d for d in found["devices"]}
    kept: dict[str, dict[str, Any]] = {}
    new_remembered: dict[str, SeenDevice] = {}
    for identity, entry in remembered.items():
        if identity in devices or entry.get("found_by") in no_grace:
            continue
        if now - entry["last_seen"] < grace:
            kept[identity] = {**entry["device"], "missing_since": _iso(entry["last_seen"])}
            new_remembered[identity] = entry
    for identity, device in devices.items():
        seen: SeenDevice = {"last_seen": now, "device": device}
        driver = (found_by or {}).get(identity)
        if driver is not None:
            seen["found_by"] = driver
        new_remembered[identity] = seen
    if not kept:
        return Graced(dict(found), new_remembered)
    all_devices = [device for _, device in sorted({**devices, **kept}.items())]
    return Graced(
        {
            **found,
            "devices": all_devices,
            "hash": schemas.snapshot_hash(
                all_devices, found["driver_errors"], found.get("drivers")
            ),
        },
        new_remembered,
    )


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
