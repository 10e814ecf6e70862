"""Drain (doc/devices.md, "Drain"): a device or a whole host taken out of service for
maintenance, without disturbing what holds it.

Draining a device is Cyborg's disable (``status`` ``maintaining``): Placement reserves its
providers (exosuit/placement/providers.py), binds and claims refuse it
(exosuit/db/arqs.py, exosuit/db/claims.py) and DRA no longer publishes it; the attach
handles already held stay held. What drain adds is the view: a maintaining device is
``draining`` while an attach handle of it is held (its ``holders``: the ARQs, with their
instance or claim) and ``drained`` once none is, and then ready for maintenance
(programming, a partition change, an uninstall, removal), which each refuse a held
device by themselves.

Draining a host drains every device it has and marks the host (``hosts.drained_at``), so
that a device it reports later starts maintaining too (exosuit/db/inventory.py);
undraining it enables its devices again, but those Exosuit disabled itself (a
``status_reason``, e.g. a program that could not restore the previous image): only an
operator's own undrain (or enable) of such a device takes it back.

Each change is one transaction that also queues the host's Placement sync.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import audit, models
from exosuit.db.placement import enqueue_sync

__all__ = [
    "DRAINED",
    "DRAINING",
    "ENABLED",
    "MAINTAINING",
    "DrainedDevice",
    "DrainedHost",
    "Holder",
    "HostHolder",
    "drain_device",
    "drain_host",
    "holders",
    "host_holders",
    "host_maintenance",
    "maintenance",
    "with_maintenance",
]

ENABLED = "enabled"
MAINTAINING = "maintaining"
# A maintaining device (or a drained host) is draining while anything holds it, drained
# when nothing does.
DRAINING = "draining"
DRAINED = "drained"


class Holder(TypedDict):
    """What holds a held attach handle of a device: its ARQ (and that ARQ's instance, or
    the standalone claim it belongs to)."""

    attach_handle_uuid: str
    arq_uuid: str | None
    arq_state: str | None
    instance_uuid: str | None
    project_id: str | None
    claim_uuid: str | None


class HostHolder(Holder):
    """A holder of one of a host's devices."""

    device_uuid: str


class DrainedDevice(TypedDict):
    """A device after its drain or undrain."""

    uuid: str
    hostname: str
    status: str
    maintenance: str | None
    holders: list[Holder]


class DrainedHostDevice(TypedDict):
    """A device of a host after the host's drain or undrain."""

    uuid: str
    status: str
    status_reason: str | None
    maintenance: str | None
    holders: list[Holder]


class DrainedHost(TypedDict):
    """A host after its drain or undrain, with its devices."""

    hostname: str
    drained_at: dt.datetime | None
    maintenance: str | None
    devices: list[DrainedHostDevice]


dev = models.devices
dep = models.deployables
ah = models.attach_handles
arq = models.accelerator_requests
claims = models.claims
hosts = models.hosts

# What a holder is: the held attach handle and the ARQ that holds it (with its claim).
_HOLDER = (
    ah.c.uuid.label("attach_handle_uuid"),
    arq.c.uuid.label("arq_uuid"),
    arq.c.state.label("arq_state"),
    arq.c.instance_uuid,
    arq.c.project_id,
    claims.c.uuid.label("claim_uuid"),
)
_HELD = (
    ah.join(dep, ah.c.deployable_id == dep.c.id)
    .outerjoin(arq, arq.c.attach_handle_id == ah.c.id)
    .outerjoin(claims, arq.c.claim_id == claims.c.id)
)
_Q_HOLDERS = (
    sa.select(dep.c.device_id, *_HOLDER)
    .select_from(_HELD)
    .where(dep.c.device_id.in_(sa.bindparam("p_ids", expanding=True)), ah.c.in_use.is_(True))
    .order_by(dep.c.device_id, ah.c.id)
)
_Q_HOST_HOLDERS = (
    sa.select(dev.c.uuid.label("device_uuid"), *_HOLDER)
    .select_from(_HELD.join(dev, dev.c.id == dep.c.device_id))
    .where(dev.c.hostname == sa.bindparam("p_hostname"), ah.c.in_use.is_(True))
    .order_by(dev.c.id, ah.c.id)
)
_Q_SET_STATUS = (
    sa.update(dev)
    .where(dev.c.id == sa.bindparam("p_id"))
    .values(status=sa.bindparam("p_status"), status_reason=None, updated_at=sa.bindparam("p_now"))
)


def holders(conn: Connection, device_ids: Collection[int]) -> dict[int, list[Holder]]:
    """What holds attach handles of the devices, by device id (each device has a list,
    empty when nothing holds it): per held handle ``attach_handle_uuid``, ``arq_uuid``,
    ``arq_state``, ``instance_uuid``, ``project_id`` and ``claim_uuid`` (None but for a
    standalone claim's ARQ). Not locked: a view."""
    found: dict[int, list[Holder]] = {i: [] for i in device_ids}
    if not device_ids:
        return found
    for r in conn.execute(_Q_HOLDERS, {"p_ids": sorted(device_ids)}):
        holder = dict(r._mapping)
        # _HOLDER's columns once device_id is taken out: Holder's keys.
        found.setdefault(holder.pop("device_id"), []).append(cast(Holder, holder))
    return found


def host_holders(conn: Connection, hostname: str) -> list[HostHolder]:
    """What holds attach handles of the host's devices: ``holders``' fields and the
    ``device_uuid``, by device and handle."""
    rows = conn.execute(_Q_HOST_HOLDERS, {"p_hostname": hostname})
    return [cast(HostHolder, dict(r._mapping)) for r in rows]  # its columns are the keys


def maintenance(status: str, held: Collection[object]) -> str | None:
    """A device's maintenance state: None while it is enabled; draining while it is
    maintaining and held, drained once nothing holds it."""
    if status != MAINTAINING:
        return None
    return DRAINING if held else DRAINED


def with_maintenance(conn: Connection, devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``devices`` (rows with ``id`` and ``status``) with their ``holders`` and
    ``maintenance``: one more read, whatever the number of devices."""
    held = holders(conn, [d["id"] for d in devices])
    for device in devices:
        device["holders"] = held.get(device["id"], [])
        device["maintenance"] = maintenance(device["status"], device["holders"])
    return devices


def host_maintenance(drained_at: object, held: Iterable[object]) -> str | None:
    """A host's maintenance state: None unless drained; then draining while anything
    holds a device of it, drained once nothing does."""
    if drained_at is None:
        return None
    return DRAINING if any(True for _ in held) else DRAINED


def _device_row(conn: Connection, uuid: str) -> sa.Row[*tuple[Any, ...]]:
    row = conn.execute(
        sa.select(dev.c.id, dev.c.uuid, dev.c.hostname, dev.c.status, dev.c.status_reason)
        .where(dev.c.uuid == uuid.lower())
        .with_for_update()
    ).first()
    if row is None:
        raise exceptions.DeviceNotFound(uuid=uuid)
    return row


def drain_device(conn: Connection, uuid: str, *, drain: bool) -> DrainedDevice:
    """Drain the device (``maintaining``) or undrain it (``enabled``, and the reason
    Exosuit gave, if it disabled the device itself, cleared). Idempotent. Returns
    ``{"uuid", "hostname", "status", "maintenance", "holders"}``; raises DeviceNotFound.
    The host's Placement sync is queued when the status changed."""
    row = _device_row(conn, uuid)
    status = MAINTAINING if drain else ENABLED
    if (row.status, row.status_reason) != (status, None):
        conn.execute(_Q_SET_STATUS, {"p_id": row.id, "p_status": status, "p_now": models.utcnow()})
        enqueue_sync(conn, row.hostname)
        was = {"status": row.status, "status_reason": row.status_reason}
        action = "drain" if drain else "undrain"
        audit.record(conn, action, "device", row.uuid, was, {"status": status}, host=row.hostname)
    held = holders(conn, [row.id])[row.id]
    return {
        "uuid": row.uuid,
        "hostname": row.hostname,
        "status": status,
        "maintenance": maintenance(status, held),
        "holders": held,
    }


def drain_host(conn: Connection, hostname: str, *, drain: bool) -> DrainedHost:
    """Drain the host (every device maintaining, and those it reports later) or undrain
    it (every device enabled again but those Exosuit disabled itself, which keep their
    status and reason). Idempotent. Returns ``{"hostname", "drained_at", "maintenance",
    "devices": [{"uuid", "status", "status_reason", "maintenance", "holders"}]}``;
    raises HostNotFound."""
    host = conn.execute(
        sa.select(hosts.c.id, hosts.c.hostname, hosts.c.drained_at)
        .where(hosts.c.hostname == hostname)
        .with_for_update()
    ).first()
    # NOTE: compared again: MariaDB's collation ignores case.
    if host is None or host.hostname != hostname:
        raise exceptions.HostNotFound(hostname=hostname)
    now = models.utcnow()
    drained_at = (host.drained_at or now) if drain else None
    if drained_at != host.drained_at:
        conn.execute(
            sa.update(hosts)
            .where(hosts.c.id == host.id)
            .values(drained_at=drained_at, updated_at=now)
        )
        audit.record(
            conn,
            "drain" if drain else "undrain",
            "host",
            hostname,
            {"drained_at": host.drained_at},
            {"drained_at": drained_at},
            host=hostname,
        )
    rows = conn.execute(
        sa.select(dev.c.id, dev.c.uuid, dev.c.status, dev.c.status_reason)
        .where(dev.c.hostname == hostname)
        .order_by(dev.c.id)
        .with_for_update()
    ).all()
    changed: list[audit.Change] = []
    devices: list[dict[str, Any]] = []
    for r in rows:
        status, reason = r.status, r.status_reason
        if drain and status != MAINTAINING:
            status = MAINTAINING
        elif not drain and status == MAINTAINING and reason is None:
            status = ENABLED
        if status != r.status:
            conn.execute(_Q_SET_STATUS, {"p_id": r.id, "p_status": status, "p_now": now})
            was = {"status": r.status, "status_reason": reason}
            changed.append(audit.Change(r.uuid, was, {"status": status}, hostname))
        devices.append({"id": r.id, "uuid": r.uuid, "status": status, "status_reason": reason})
    if changed:
        enqueue_sync(conn, hostname)
        audit.record_many(conn, "drain" if drain else "undrain", "device", changed)
    held = holders(conn, [d["id"] for d in devices])
    for device in devices:
        device["holders"] = held[device.pop("id")]
        device["maintenance"] = maintenance(device["status"], device["holders"])
    return {
        "hostname": hostname,
        "drained_at": drained_at,
        "maintenance": host_maintenance(drained_at, _all_holders(held)),
        # id taken out, holders and maintenance put in: DrainedHostDevice's keys.
        "devices": cast(list[DrainedHostDevice], devices),
    }


def _all_holders(held: Mapping[int, list[Holder]]) -> list[Holder]:
    return [h for found in held.values() for h in found]
