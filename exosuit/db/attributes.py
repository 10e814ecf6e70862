"""Attributes of deployables (``rc``, ``trait*`` …): queries, create, delete."""

from __future__ import annotations

import uuid as uuidlib

import sqlalchemy as sa

from exosuit import exceptions
from exosuit.db import models
from exosuit.db.pagination import Page, paginate

__all__ = ["create", "delete", "get", "list_attributes"]

t = models.attributes
SORT_COLUMNS = {"created_at": t.c.created_at, "uuid": t.c.uuid, "key": t.c.key}


def list_attributes(conn, *, deployable_id: int | None = None, key: str | None = None,
                    page: Page | None = None) -> list[dict]:
    stmt = sa.select(t)
    if deployable_id is not None:
        stmt = stmt.where(t.c.deployable_id == deployable_id)
    if key is not None:
        stmt = stmt.where(t.c.key == key)
    stmt = paginate(conn, stmt, t, page, SORT_COLUMNS)
    return [dict(r._mapping) for r in conn.execute(stmt)]


def get(conn, uuid: str) -> dict:
    row = conn.execute(sa.select(t).where(t.c.uuid == uuid)).first()
    if row is None:
        raise exceptions.AttributeNotFound(uuid=uuid)
    return dict(row._mapping)


def create(conn, *, deployable_id: int, key: str, value: str) -> dict:
    """An operator's attribute: kept across agent snapshots (source ``api``)."""
    exists = conn.execute(
        sa.select(models.deployables.c.id).where(models.deployables.c.id == deployable_id)
    ).first()
    if exists is None:
        raise exceptions.Invalid(reason=f"deployable_id {deployable_id} does not exist")
    uuid = str(uuidlib.uuid4())
    conn.execute(sa.insert(t).values(uuid=uuid, deployable_id=deployable_id, key=key,
                                     value=value, source="api", created_at=models.utcnow()))
    return get(conn, uuid)


def delete(conn, uuid: str) -> None:
    if not conn.execute(sa.delete(t).where(t.c.uuid == uuid)).rowcount:
        raise exceptions.AttributeNotFound(uuid=uuid)
