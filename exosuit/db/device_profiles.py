"""Device profiles: named lists of request groups."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import uuid as uuidlib
from collections.abc import Iterator, Sequence
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import audit, models
from exosuit.db.pagination import Page, paginate

__all__ = [
    "DeviceProfileRow",
    "create",
    "delete_by_names",
    "delete_by_uuid",
    "get",
    "list_profiles",
]

t = models.device_profiles
SORT_COLUMNS = {"created_at": t.c.created_at, "name": t.c.name, "uuid": t.c.uuid}

# Built once: reusing a statement object spares SQLAlchemy building it and computing
# its cache key at every request.
_IDS: sa.BindParameter[list[int]] = sa.bindparam("p_ids", expanding=True)
_Q_ID_BY = {
    field: sa.select(t.c.id).where(t.c[field] == sa.bindparam("p_value"))
    for field in ("name", "uuid")
}
_Q_GET_BY = {
    field: sa.select(t).where(t.c[field] == sa.bindparam("p_value")) for field in ("name", "uuid")
}
_Q_INSERT = sa.insert(t)
_Q_DELETE = sa.delete(t).where(t.c.id.in_(_IDS))
_Q_ROWS_BY_UUID = sa.select(t.c.id, t.c.name, t.c.uuid).where(t.c.uuid == sa.bindparam("p_value"))
_arq = models.accelerator_requests
# A profile no ARQ uses, deleted in one statement (RETURNING: what _delete's audit
# record names). An ARQ created meanwhile holds the profile's row (its foreign key).
_Q_DELETE_UNUSED_BY_UUID = (
    sa.delete(t)
    .where(
        t.c.uuid == sa.bindparam("p_value"),
        ~sa.exists().where(_arq.c.device_profile_id == t.c.id),
    )
    .returning(t.c.id, t.c.name, t.c.uuid)
)
_Q_IN_USE = (
    sa.select(_arq.c.device_profile_id, sa.func.count())
    .where(_arq.c.device_profile_id.in_(_IDS))
    .group_by(_arq.c.device_profile_id)
)


class DeviceProfileRow(TypedDict):
    """A device profile as the API shows it: its row, ``profile_json``'s groups read."""

    id: int
    uuid: str
    name: str
    description: str | None
    groups: list[dict[str, str]]
    created_at: dt.datetime
    updated_at: dt.datetime | None


def _to_dict(row: sa.Row[*tuple[Any, ...]]) -> DeviceProfileRow:
    data = dict(row._mapping)
    data["groups"] = json.loads(data.pop("profile_json")).get("groups", [])
    return cast(DeviceProfileRow, data)  # the table's columns, profile_json read


def create(
    conn: Connection,
    *,
    name: str,
    groups: list[dict[str, str]],
    description: str | None = None,
    uuid: str | None = None,
) -> DeviceProfileRow:
    """Insert a profile; DeviceProfileExists if the name or uuid is taken.

    Two statements (the insert, its audit record): the unique indexes on name and uuid
    say whether either is taken, and the new row is answered as written, not read back
    (its timestamp has microseconds on every database: ``models.Timestamp``). A uuid the
    caller chose is looked up first, so that the error names the field that clashed."""
    if uuid is not None:
        for field, value in (("name", name), ("uuid", uuid)):
            if conn.execute(_Q_ID_BY[field], {"p_value": value}).first():
                raise exceptions.DeviceProfileExists(field=field, value=value)
    new_uuid = uuid or str(uuidlib.uuid4())
    created_at = models.utcnow()
    values = {
        "uuid": new_uuid,
        "name": name,
        "description": description,
        "profile_json": json.dumps({"groups": groups}),
        "created_at": created_at,
    }
    try:
        # No savepoint: nothing follows a failed insert but the transaction's rollback.
        result = conn.execute(_Q_INSERT, values)
    except sa.exc.IntegrityError:
        # The name is taken (a new uuid4 is not), or was taken by a concurrent create
        # between the look-up above and the insert.
        raise exceptions.DeviceProfileExists(field="name", value=name) from None
    primary_key = result.inserted_primary_key
    assert primary_key is not None
    audit.record(conn, "create", "device_profile", new_uuid, None, {"name": name, "groups": groups})
    return {
        "id": int(primary_key[0]),
        "uuid": new_uuid,
        "name": name,
        "description": description,
        "groups": groups,
        "created_at": created_at,
        "updated_at": None,
    }


def get(conn: Connection, ident: str, *, by_name: bool = False) -> DeviceProfileRow:
    row = conn.execute(_Q_GET_BY["name" if by_name else "uuid"], {"p_value": ident}).first()
    if row is None:
        raise exceptions.DeviceProfileNotFound(ident=ident)
    return _to_dict(row)


def list_profiles(
    conn: Connection, *, names: list[str] | None = None, page: Page | None = None
) -> list[DeviceProfileRow]:
    stmt = sa.select(t)
    if names is not None:
        stmt = stmt.where(t.c.name.in_(names))
    stmt = paginate(conn, stmt, t, page, SORT_COLUMNS)
    return [_to_dict(row) for row in conn.execute(stmt)]


def _delete(conn: Connection, rows: Sequence[sa.Row[*tuple[Any, ...]]]) -> None:
    ids = [row.id for row in rows]
    in_use = conn.execute(_Q_IN_USE, {"p_ids": ids}).all()
    if in_use:
        names = {row.id: row.name for row in rows}
        profile_id, count = in_use[0]
        raise exceptions.DeviceProfileInUse(name=names[profile_id], count=count)
    with _in_use_meanwhile(", ".join(row.name for row in rows)):
        conn.execute(_Q_DELETE, {"p_ids": ids})
    _record_deletes(conn, rows)


@contextlib.contextmanager
def _in_use_meanwhile(names: str) -> Iterator[None]:
    """A delete that an ARQ made meanwhile refuses (its insert was not committed when the
    delete looked; the foreign key refuses the delete once it is): the same 409 as a
    profile found in use, not the database's error."""
    try:
        yield
    except sa.exc.IntegrityError as error:
        raise exceptions.DeviceProfileInUseMeanwhile(name=names) from error


def _record_deletes(conn: Connection, rows: Sequence[sa.Row[*tuple[Any, ...]]]) -> None:
    audit.record_many(
        conn, "delete", "device_profile", [audit.Change(r.uuid, {"name": r.name}) for r in rows]
    )


def delete_by_uuid(conn: Connection, uuid: str) -> None:
    """Delete the profile; DeviceProfileNotFound, DeviceProfileInUse (ARQs use it).

    Where the database returns what it deleted (PostgreSQL, SQLite, MariaDB 10.5+), one
    statement deletes the profile unless an ARQ uses it, and only a miss reads why."""
    if not conn.dialect.delete_returning:  # MySQL: read, check, delete
        rows = conn.execute(_Q_ROWS_BY_UUID, {"p_value": uuid}).all()
        if not rows:
            raise exceptions.DeviceProfileNotFound(ident=uuid)
        _delete(conn, rows)
        return
    with _in_use_meanwhile(uuid):
        deleted = conn.execute(_Q_DELETE_UNUSED_BY_UUID, {"p_value": uuid}).all()
    if not deleted:
        rows = conn.execute(_Q_ROWS_BY_UUID, {"p_value": uuid}).all()
        if not rows:
            raise exceptions.DeviceProfileNotFound(ident=uuid)
        _delete(conn, rows)  # used (DeviceProfileInUse), or its last ARQ went meanwhile
        return
    _record_deletes(conn, deleted)


def delete_by_names(conn: Connection, names: list[str]) -> None:
    """Delete all named profiles, or none: DeviceProfileNotFound names the missing ones."""
    rows = conn.execute(sa.select(t.c.id, t.c.name, t.c.uuid).where(t.c.name.in_(names))).all()
    missing = sorted(set(names) - {row.name for row in rows})
    if missing:
        raise exceptions.DeviceProfileNotFound(ident=", ".join(missing))
    _delete(conn, rows)
