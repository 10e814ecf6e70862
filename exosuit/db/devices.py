"""Devices (one physical card each): queries and enable/disable."""

from __future__ import annotations

import sqlalchemy as sa

from exosuit import exceptions
from exosuit.db import models
from exosuit.db.pagination import Page, paginate
from exosuit.placement.state import enqueue_sync

__all__ = ["get", "list_devices", "set_status"]

t = models.devices
SORT_COLUMNS = {
    "created_at": t.c.created_at,
    "uuid": t.c.uuid,
    "hostname": t.c.hostname,
    "type": t.c.type,
    "vendor": t.c.vendor,
}
FILTERS = ("type", "vendor", "hostname", "status")


def list_devices(conn, *, filters: dict[str, str], page: Page | None = None) -> list[dict]:
    stmt = sa.select(t)
    for name, value in filters.items():
        stmt = stmt.where(t.c[name] == value)
    stmt = paginate(conn, stmt, t, page, SORT_COLUMNS)
    return [dict(r._mapping) for r in conn.execute(stmt)]


def get(conn, uuid: str) -> dict:
    row = conn.execute(sa.select(t).where(t.c.uuid == uuid)).first()
    if row is None:
        raise exceptions.DeviceNotFound(uuid=uuid)
    return dict(row._mapping)


def set_status(conn, uuid: str, status: str) -> dict:
    """enabled or maintaining. A disabled device takes no new binds."""
    updated = conn.execute(
        sa.update(t).where(t.c.uuid == uuid).values(status=status, updated_at=models.utcnow())
    ).rowcount
    if not updated:
        raise exceptions.DeviceNotFound(uuid=uuid)
    device = get(conn, uuid)
    # Its providers in Placement follow (all reserved while disabled), in this transaction.
    enqueue_sync(conn, device["hostname"])
    return device
