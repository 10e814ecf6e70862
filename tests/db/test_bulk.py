"""Many rows in one statement (exosuit/db/bulk.py) on SQLite, PostgreSQL and MariaDB:
the rows stored are those SQLAlchemy's own insert stores (types converted, left-out
columns defaulted), and the ids come back in the rows' order, page after page."""

from __future__ import annotations

import datetime as dt
import uuid

import sqlalchemy as sa

from exosuit.db import bulk, models

devices = models.devices


def _rows(count: int, host: str) -> list[dict]:
    now = dt.datetime(2026, 11, 26, 1, 2, 3, 456789)
    return [
        {
            "uuid": str(uuid.uuid4()),
            "type": "GPU",
            "vendor": "0x10de",
            "model": "model ünïcode 100%",  # a percent sign and non-ASCII, bound
            "hostname": host,
            "identity": f'{{"n":{i}}}',
            "status": "enabled",
            "numa_node": None if i % 2 else i,
            "created_at": now,
            "health_since": now.replace(microsecond=0) if i % 3 else None,
        }
        for i in range(count)
    ]


def _stored(database, host: str) -> list[dict]:
    query = sa.select(devices).where(devices.c.hostname == host).order_by(devices.c.identity)
    with database.reader() as conn:
        rows = [dict(r._mapping) for r in conn.execute(query)]
    for row in rows:
        for key in ("id", "uuid", "hostname"):
            row.pop(key)
    return rows


def test_rows_are_stored_as_sqlalchemys_insert_stores_them(database):
    with database.writer() as conn:
        bulk.insert_rows(conn, devices, _rows(5, "bulk"))
        conn.execute(sa.insert(devices), _rows(5, "orm"))
    stored = _stored(database, "bulk")
    assert stored == _stored(database, "orm")
    assert {r["presence"] for r in stored} == {"present"}  # left out: its default


def test_ids_come_back_in_the_rows_order_across_pages(database):
    rows = _rows(23, "paged")
    rows.reverse()
    with database.writer() as conn:
        ids = bulk.insert_rows(conn, devices, rows, ids=True, max_parameters=50)
    query = sa.select(devices.c.uuid, devices.c.id).where(devices.c.hostname == "paged")
    with database.reader() as conn:
        found = dict(conn.execute(query).all())
    assert len(found) == 23
    assert ids == [found[r["uuid"]] for r in rows]


def test_nothing_to_insert_is_no_statement(database):
    with database.writer() as conn:
        assert bulk.insert_rows(conn, devices, [], ids=True) == []


def test_a_whole_second_is_found_by_sqls_own_comparison(database):
    """A datetime on a whole second is stored as SQLAlchemy stores it (SQLite keeps text:
    '… 01:02:03.000000', not the driver's '… 01:02:03'), so ``==`` and ranges in SQL
    find the bulk-inserted rows as they find the others."""
    second = dt.datetime(2026, 11, 26, 1, 2, 3)
    with database.writer() as conn:
        bulk.insert_rows(conn, devices, _rows(3, "second-bulk"))
        conn.execute(sa.insert(devices), _rows(3, "second-orm"))
    query = (
        sa.select(devices.c.hostname, sa.func.count())
        .where(devices.c.health_since == second, devices.c.hostname.like("second-%"))
        .group_by(devices.c.hostname)
    )
    with database.reader() as conn:
        found = dict(conn.execute(query).all())
    assert found == {"second-bulk": 2, "second-orm": 2}
