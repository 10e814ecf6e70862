"""changes.HeldReader: the list's version on a held connection, through SQLAlchemy, on
SQLite, PostgreSQL and MariaDB: the value a pooled read gives, every change seen at the
next read, and a lost connection answered through the pool, then replaced."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import event

from exosuit.db import changes


def _bump(database) -> None:
    def _write(conn):
        changes.mark(conn, changes.DEPLOYABLES)

    database.write(_write)


def test_the_held_read_is_the_pooled_read_and_sees_each_change(database):
    reader = changes.HeldReader(database, changes.DEPLOYABLES)
    try:
        assert reader() == database.read(changes.version)
        before = reader()
        _bump(database)
        assert reader() == before + 1 == database.read(changes.version)
    finally:
        reader.close()


def test_a_read_is_one_statement_the_read_engine_sees(database):
    reader = changes.HeldReader(database, changes.DEPLOYABLES)
    seen: list[str] = []

    def _record(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    reader()  # connected
    event.listen(database._read_engine, "before_cursor_execute", _record)
    try:
        reader()
    finally:
        event.remove(database._read_engine, "before_cursor_execute", _record)
        reader.close()
    queries = [s for s in seen if s.lstrip().upper().startswith("SELECT")]
    assert len(queries) == 1 and "metric_counters" in queries[0]


def test_a_lost_connection_is_read_through_the_pool_then_replaced(database):
    reader = changes.HeldReader(database, changes.DEPLOYABLES)
    try:
        value = reader()
        if reader._conn is None:  # SQLite: every read is a pooled one
            assert database.dialect == "sqlite"
            return
        reader._conn.connection.dbapi_connection.close()  # the server's side gone
        assert reader() == value  # answered through the pool
        assert reader._conn is None
        _bump(database)
        assert reader() == value + 1  # a new held connection
        assert reader._conn is not None
        assert isinstance(reader._conn, sa.Connection)
    finally:
        reader.close()
