"""Attributes of deployables (``rc``, ``trait*`` …): queries, create, delete.

Attributes ``rc`` and ``trait*`` shape the deployable's provider in Placement, so
creating or deleting one queues its host's Placement sync in the same transaction.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import audit, changes, models
from exosuit.db.pagination import Page, paginate
from exosuit.db.placement import enqueue_sync_of_deployable

__all__ = ["AttributeRow", "create", "delete", "get", "list_attributes"]

t = models.attributes
SORT_COLUMNS = {"created_at": t.c.created_at, "uuid": t.c.uuid, "key": t.c.key}


class AttributeRow(TypedDict):
    """An attribute as the API shows it: a row of ``attributes``."""

    id: int
    uuid: str
    deployable_id: int
    key: str
    value: str
    source: str  # agent | api
    created_at: dt.datetime
    updated_at: dt.datetime | None


def _attribute(row: sa.Row[*tuple[Any, ...]]) -> AttributeRow:
    # A row of the whole table: its columns are AttributeRow's keys.
    return cast(AttributeRow, dict(row._mapping))


def list_attributes(
    conn: Connection,
    *,
    deployable_id: int | None = None,
    key: str | None = None,
    page: Page | None = None,
) -> list[AttributeRow]:
    stmt = sa.select(t)
    if deployable_id is not None:
        stmt = stmt.where(t.c.deployable_id == deployable_id)
    if key is not None:
        stmt = stmt.where(t.c.key == key)
    stmt = paginate(conn, stmt, t, page, SORT_COLUMNS)
    return [_attribute(r) for r in conn.execute(stmt)]


def get(conn: Connection, uuid: str) -> AttributeRow:
    row = conn.execute(sa.select(t).where(t.c.uuid == uuid)).first()
    if row is None:
        raise exceptions.AttributeNotFound(uuid=uuid)
    return _attribute(row)


def create(conn: Connection, *, deployable_id: int, key: str, value: str) -> AttributeRow:
    """An operator's attribute: kept across agent snapshots (source ``api``)."""
    exists = conn.execute(
        sa.select(models.deployables.c.id).where(models.deployables.c.id == deployable_id)
    ).first()
    if exists is None:
        raise exceptions.Invalid(reason=f"deployable_id {deployable_id} does not exist")
    uuid = str(uuidlib.uuid4())
    conn.execute(
        sa.insert(t).values(
            uuid=uuid,
            deployable_id=deployable_id,
            key=key,
            value=value,
            source="api",
            created_at=models.utcnow(),
        )
    )
    changes.mark(conn, changes.DEPLOYABLES)
    enqueue_sync_of_deployable(conn, deployable_id)
    _record(conn, "attribute.create", deployable_id, None, {"key": key, "value": value})
    return get(conn, uuid)


def delete(conn: Connection, uuid: str) -> None:
    attribute = get(conn, uuid)
    deployable_id = attribute["deployable_id"]
    if not conn.execute(sa.delete(t).where(t.c.uuid == uuid)).rowcount:
        raise exceptions.AttributeNotFound(uuid=uuid)
    changes.mark(conn, changes.DEPLOYABLES)
    enqueue_sync_of_deployable(conn, deployable_id)
    before = {"key": attribute["key"], "value": attribute["value"]}
    _record(conn, "attribute.delete", deployable_id, before, None)


def _record(
    conn: Connection,
    action: str,
    deployable_id: int,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    """The audit record of an operator's attribute change: on its deployable."""
    dep, dev = models.deployables, models.devices
    row = conn.execute(
        sa.select(dep.c.uuid, dev.c.hostname)
        .join(dev, dev.c.id == dep.c.device_id)
        .where(dep.c.id == deployable_id)
    ).one()
    audit.record(conn, action, "deployable", row.uuid, before, after, host=row.hostname)
