"""Devices (one physical card each): queries and enable/disable."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any, NotRequired, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import audit, drain, models, services
from exosuit.db.pagination import Page, paginate
from exosuit.db.placement import enqueue_sync

__all__ = [
    "USAGE_LABELS",
    "DeviceRow",
    "get",
    "list_devices",
    "set_status",
    "usage_series",
    "with_details",
]

t = models.devices
hosts = models.hosts
SORT_COLUMNS = {
    "created_at": t.c.created_at,
    "uuid": t.c.uuid,
    "hostname": t.c.hostname,
    "type": t.c.type,
    "vendor": t.c.vendor,
}
# Exact-match filters, in the order microversions added them (status 2.3, activation 2.7).
FILTERS = ("type", "vendor", "hostname", "status", "activation")


class DeviceRow(TypedDict):
    """A device as the API shows it: a row of ``devices`` (models.Device says what each
    column holds), with what ``details`` and ``maintenance`` add when asked."""

    id: int
    uuid: str
    type: str
    vendor: str
    model: str
    std_board_info: str | None
    vendor_board_info: str | None
    hostname: str
    identity: str
    status: str
    status_reason: str | None
    presence: str
    presence_reason: str | None
    driver_name: str | None
    plugin: str | None
    pci_address: str | None
    numa_node: int | None
    firmware_version: str | None
    activation: str
    activation_reason: str | None
    activation_generation: int | None
    partition_layout: str | None
    partition_state: str | None
    partition_reason: str | None
    partition_generation: int | None
    partition_on_demand: bool
    health_state: str
    health_reason: str | None
    health_since: dt.datetime | None
    health_held: str | None
    pcie_root: str | None
    iommu_group: int | None
    labels: str | None
    created_at: dt.datetime
    updated_at: dt.datetime | None
    # details=True (with_details)
    services: NotRequired[list[services.DeviceService]]
    usage: NotRequired[dict[str, Any] | None]  # figure → value, as its host reported it
    usage_seen_at: NotRequired[dt.datetime | None]
    # maintenance=True (exosuit/db/drain.py's with_maintenance)
    holders: NotRequired[list[drain.Holder]]
    maintenance: NotRequired[str | None]


def list_devices(
    conn: Connection,
    *,
    filters: dict[str, str],
    page: Page | None = None,
    details: bool = False,
    maintenance: bool = False,
) -> list[DeviceRow]:
    """A page of devices; ``details``: with their services and usage (``with_details``);
    ``maintenance``: with their holders and maintenance state (exosuit/db/drain.py)."""
    stmt = sa.select(t)
    for name, value in filters.items():
        stmt = stmt.where(t.c[name] == value)
    stmt = paginate(conn, stmt, t, page, SORT_COLUMNS)
    devices = [dict(r._mapping) for r in conn.execute(stmt)]
    if maintenance:
        drain.with_maintenance(conn, devices)
    rows = cast(list[DeviceRow], devices)  # the table's columns: DeviceRow's keys
    return with_details(conn, rows) if details else rows


def get(
    conn: Connection, uuid: str, *, details: bool = False, maintenance: bool = False
) -> DeviceRow:
    row = conn.execute(sa.select(t).where(t.c.uuid == uuid)).first()
    if row is None:
        raise exceptions.DeviceNotFound(uuid=uuid)
    found = dict(row._mapping)
    if maintenance:
        drain.with_maintenance(conn, [found])
    device = cast(DeviceRow, found)  # the table's columns: DeviceRow's keys
    return with_details(conn, [device])[0] if details else device


def with_details(conn: Connection, devices: list[DeviceRow]) -> list[DeviceRow]:
    """``devices`` with their ``services`` and their ``usage`` as their host last
    reported it (None when it reported none for them) and ``usage_seen_at``: two more
    reads, whatever the number of devices."""
    offered = services.of_devices(conn, [d["id"] for d in devices])
    names = sorted({d["hostname"] for d in devices})
    usage = {
        r.hostname: (json.loads(r.usage) if r.usage else {}, r.usage_at)
        for r in conn.execute(
            sa.select(hosts.c.hostname, hosts.c.usage, hosts.c.usage_at).where(
                hosts.c.hostname.in_(names)
            )
        )
    }
    for device in devices:
        device["services"] = offered[device["id"]]
        figures, seen_at = usage.get(device["hostname"], ({}, None))
        device["usage"] = figures.get(device["identity"])
        device["usage_seen_at"] = seen_at if device["usage"] is not None else None
    return devices


def set_status(conn: Connection, uuid: str, status: str) -> DeviceRow:
    """enabled or maintaining. A disabled device takes no new binds. An operator's
    change clears the reason Exosuit gave when it disabled the device itself."""
    before = conn.execute(
        sa.select(t.c.status, t.c.status_reason).where(t.c.uuid == uuid).with_for_update()
    ).first()
    updated = conn.execute(
        sa.update(t)
        .where(t.c.uuid == uuid)
        .values(status=status, status_reason=None, updated_at=models.utcnow())
    ).rowcount
    if not updated:
        raise exceptions.DeviceNotFound(uuid=uuid)
    device = get(conn, uuid)
    if before is not None and (before.status, before.status_reason) != (status, None):
        action = "enable" if status == "enabled" else "disable"
        was = {"status": before.status, "status_reason": before.status_reason}
        audit.record(conn, action, "device", uuid, was, {"status": status}, host=device["hostname"])
    # Its providers in Placement follow (all reserved while disabled), in this transaction.
    enqueue_sync(conn, device["hostname"])
    return device


# The labels of a device's usage gauges (exosuit/api/handlers/metrics.py).
USAGE_LABELS = ("hostname", "device_uuid", "type", "vendor", "model", "pci_address")


def usage_series(
    conn: Connection, *, stale_after: float
) -> dict[str, list[tuple[tuple[str, ...], float]]]:
    """Each figure of the devices' usage (``{figure: [(labels, value), ...]}``, labels as
    ``USAGE_LABELS``), from the hosts whose usage is at most ``stale_after`` seconds old:
    a host that stopped reporting shows none rather than its last figures forever."""
    since = models.utcnow() - dt.timedelta(seconds=stale_after)
    reported = {
        r.hostname: json.loads(r.usage)
        for r in conn.execute(
            sa.select(hosts.c.hostname, hosts.c.usage).where(
                hosts.c.usage.is_not(None), hosts.c.usage_at >= since
            )
        )
    }
    series: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    if not reported:
        return series
    rows = conn.execute(
        sa.select(t.c.hostname, t.c.identity, t.c.uuid, t.c.type, t.c.vendor, t.c.model)
        .add_columns(t.c.pci_address)
        .where(t.c.hostname.in_(sorted(reported)))
        .order_by(t.c.hostname, t.c.id)
    )
    for r in rows:
        figures = reported[r.hostname].get(r.identity) or {}
        labels = (r.hostname, r.uuid, r.type, r.vendor, r.model, r.pci_address or "")
        for name, value in figures.items():
            if isinstance(value, int | float) and math.isfinite(value):
                series.setdefault(name, []).append((labels, float(value)))
    return series
