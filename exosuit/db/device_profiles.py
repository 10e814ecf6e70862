"""Device profiles: named lists of request groups."""

from __future__ import annotations

import json
import uuid as uuidlib

import sqlalchemy as sa

from exosuit import exceptions
from exosuit.db import models
from exosuit.db.pagination import Page, paginate

__all__ = ["create", "delete_by_names", "delete_by_uuid", "get", "list_profiles"]

t = models.device_profiles
SORT_COLUMNS = {"created_at": t.c.created_at, "name": t.c.name, "uuid": t.c.uuid}

# Built once: reusing a statement object spares SQLAlchemy building it and computing
# its cache key at every request.
_IDS = sa.bindparam("p_ids", expanding=True)
_Q_ID_BY = {field: sa.select(t.c.id).where(t.c[field] == sa.bindparam("p_value"))
            for field in ("name", "uuid")}
_Q_GET_BY = {field: sa.select(t).where(t.c[field] == sa.bindparam("p_value"))
             for field in ("name", "uuid")}
_Q_INSERT = sa.insert(t)
_Q_DELETE = sa.delete(t).where(t.c.id.in_(_IDS))
_Q_ROWS_BY_UUID = sa.select(t.c.id, t.c.name).where(t.c.uuid == sa.bindparam("p_value"))
_arq = models.accelerator_requests
_Q_IN_USE = (
    sa.select(_arq.c.device_profile_id, sa.func.count())
    .where(_arq.c.device_profile_id.in_(_IDS))
    .group_by(_arq.c.device_profile_id)
)


def _to_dict(row) -> dict:
    data = dict(row._mapping)
    data["groups"] = json.loads(data.pop("profile_json")).get("groups", [])
    return data


def create(conn, *, name: str, groups: list[dict], description: str | None = None,
           uuid: str | None = None) -> dict:
    """Insert a profile; DeviceProfileExists if the name or uuid is taken."""
    for field, value in (("name", name), ("uuid", uuid)):
        if value is not None and conn.execute(_Q_ID_BY[field], {"p_value": value}).first():
            raise exceptions.DeviceProfileExists(field=field, value=value)
    values = {
        "uuid": uuid or str(uuidlib.uuid4()),
        "name": name,
        "description": description,
        "profile_json": json.dumps({"groups": groups}),
        "created_at": models.utcnow(),
    }
    try:
        # No savepoint: nothing follows a failed insert but the transaction's rollback.
        conn.execute(_Q_INSERT, values)
    except sa.exc.IntegrityError:
        # A concurrent create took the name between our check and the insert.
        raise exceptions.DeviceProfileExists(field="name", value=name) from None
    return get(conn, values["uuid"])


def get(conn, ident: str, *, by_name: bool = False) -> dict:
    row = conn.execute(_Q_GET_BY["name" if by_name else "uuid"], {"p_value": ident}).first()
    if row is None:
        raise exceptions.DeviceProfileNotFound(ident=ident)
    return _to_dict(row)


def list_profiles(conn, *, names: list[str] | None = None, page: Page | None = None) -> list:
    stmt = sa.select(t)
    if names is not None:
        stmt = stmt.where(t.c.name.in_(names))
    stmt = paginate(conn, stmt, t, page, SORT_COLUMNS)
    return [_to_dict(row) for row in conn.execute(stmt)]


def _delete(conn, rows) -> None:
    ids = [row.id for row in rows]
    in_use = conn.execute(_Q_IN_USE, {"p_ids": ids}).all()
    if in_use:
        names = {row.id: row.name for row in rows}
        profile_id, count = in_use[0]
        raise exceptions.DeviceProfileInUse(name=names[profile_id], count=count)
    conn.execute(_Q_DELETE, {"p_ids": ids})


def delete_by_uuid(conn, uuid: str) -> None:
    rows = conn.execute(_Q_ROWS_BY_UUID, {"p_value": uuid}).all()
    if not rows:
        raise exceptions.DeviceProfileNotFound(ident=uuid)
    _delete(conn, rows)


def delete_by_names(conn, names: list[str]) -> None:
    """Delete all named profiles, or none: DeviceProfileNotFound names the missing ones."""
    rows = conn.execute(sa.select(t.c.id, t.c.name).where(t.c.name.in_(names))).all()
    missing = sorted(set(names) - {row.name for row in rows})
    if missing:
        raise exceptions.DeviceProfileNotFound(ident=", ".join(missing))
    _delete(conn, rows)
