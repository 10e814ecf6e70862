"""Deployables (what Placement sees as one resource provider each): queries."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import changes, models
from exosuit.db.pagination import Page, paginate

__all__ = ["DeployableRow", "get", "list_all_unless", "list_deployables"]

t = models.deployables
attr = models.attributes
SORT_COLUMNS = {
    "created_at": t.c.created_at,
    "uuid": t.c.uuid,
    "name": t.c.name,
}


class DeployableRow(TypedDict):
    """A deployable as the API shows it: a row of ``deployables`` and its attributes."""

    id: int
    uuid: str
    parent_id: int | None
    root_id: int | None
    name: str
    num_accelerators: int
    device_id: int
    rp_uuid: str | None
    driver_name: str | None
    bitstream_id: str | None
    program_uuid: str | None
    created_at: dt.datetime
    updated_at: dt.datetime | None
    # Each attribute as a one-key {key: value} (Cyborg's attributes_list).
    attributes: list[dict[str, str]]


# Built once: reusing a statement object spares SQLAlchemy building it and computing
# its cache key at every request.
# The unpaged list (microversions 2.0-2.3, what clients call) and its attributes in one
# round trip: one row per attribute, or one with NULLs for a deployable without any.
_Q_ALL = (
    sa.select(t, attr.c.key.label("attribute_key"), attr.c.value.label("attribute_value"))
    .select_from(t.outerjoin(attr, attr.c.deployable_id == t.c.id))
    .order_by(t.c.created_at.desc(), t.c.id.desc(), attr.c.id)
)
_COLUMNS = tuple(t.c.keys())  # the first columns of each _Q_ALL row
_Q_GET = sa.select(t).where(t.c.uuid == sa.bindparam("p_uuid"))
_Q_ATTRIBUTES = (
    sa.select(attr.c.deployable_id, attr.c.key, attr.c.value)
    .where(attr.c.deployable_id.in_(sa.bindparam("p_ids", expanding=True)))
    .order_by(attr.c.id)
)


def _with_attributes(
    conn: Connection, rows: Iterable[sa.Row[*tuple[Any, ...]]]
) -> list[DeployableRow]:
    result = [dict(r._mapping) for r in rows]
    if not result:
        return []
    by_id: dict[int, list[dict[str, str]]] = defaultdict(list)
    for row in conn.execute(_Q_ATTRIBUTES, {"p_ids": [d["id"] for d in result]}):
        by_id[row.deployable_id].append({row.key: row.value})
    for deployable in result:
        deployable["attributes"] = by_id.get(deployable["id"], [])
    # Rows of the whole table with their attributes: DeployableRow's keys.
    return cast(list[DeployableRow], result)


def list_deployables(
    conn: Connection, *, filters: dict[str, str] | None = None, page: Page | None = None
) -> list[DeployableRow]:
    if not filters and page is None:
        return _list_all(conn)
    stmt = sa.select(t)
    for name, value in (filters or {}).items():
        stmt = stmt.where(t.c[name] == value)
    stmt = paginate(conn, stmt, t, page, SORT_COLUMNS)
    return _with_attributes(conn, conn.execute(stmt))


def list_all_unless(conn: Connection, known: int | None) -> tuple[int, list[DeployableRow] | None]:
    """The unpaged list's version (exosuit/db/changes.py) and the list, or None in its
    place when the version is ``known`` (nothing changed since the caller read it).

    The version is read before the list: a change committed between the two reads
    leaves the version older than the list (the next call reads it again), never newer.
    """
    version = changes.version(conn)
    if version == known:
        return version, None
    return version, _list_all(conn)


def _list_all(conn: Connection) -> list[DeployableRow]:
    result: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    for row in conn.execute(_Q_ALL):
        if not result or current["id"] != row.id:
            # zip stops at the deployable's columns, before the attribute's two.
            current = dict(zip(_COLUMNS, row, strict=False))
            current["attributes"] = []
            result.append(current)
        if row.attribute_key is not None:
            current["attributes"].append({row.attribute_key: row.attribute_value})
    # The table's columns with their attributes: DeployableRow's keys.
    return cast(list[DeployableRow], result)


def get(conn: Connection, uuid: str) -> DeployableRow:
    rows = conn.execute(_Q_GET, {"p_uuid": uuid}).all()
    if not rows:
        raise exceptions.DeployableNotFound(uuid=uuid)
    return _with_attributes(conn, rows)[0]
