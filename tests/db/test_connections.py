"""Pooled connections: lost ones are replaced, failed writes leave nothing, readers see commits.

The pool pings a connection only after it sat idle, and does not roll back one that
returns after a commit (exosuit/db/api.py). These tests kill the server side of the
pooled connections (KILL on MariaDB, pg_terminate_backend on PostgreSQL) and check
that reads and writes go on, with and without the idle ping.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from exosuit import exceptions
from exosuit.db import models
from exosuit.db.api import Database

hosts = models.hosts


def _kill_connections(server, database_name: str) -> int:
    """End every server session on ``database_name``; return how many."""
    with server.engine.connect() as conn:
        if server.backend == "mariadb":
            ids = [
                r[0]
                for r in conn.exec_driver_sql(
                    "SELECT id FROM information_schema.processlist WHERE db = %s", (database_name,)
                )
            ]
            for ident in ids:
                conn.exec_driver_sql(f"KILL {int(ident)}")
        else:
            ids = [
                r[0]
                for r in conn.exec_driver_sql(
                    "SELECT pid FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    (database_name,),
                )
            ]
            for ident in ids:
                conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(ident)})")
    return len(ids)


def _count(conn) -> int:
    return conn.execute(sa.select(sa.func.count()).select_from(hosts)).scalar()


def _add_host(conn, name: str) -> None:
    conn.execute(sa.insert(hosts).values(hostname=name, created_at=models.utcnow()))


@pytest.mark.parametrize("ping_after_idle", [10.0, 0.0], ids=["busy", "idle"])
def test_reads_and_writes_survive_killed_connections(database, db_servers, ping_after_idle):
    if database.dialect == "sqlite":
        pytest.skip("SQLite has no server connections to lose")
    server = db_servers["postgresql" if database.dialect == "postgresql" else "mariadb"]
    url = database.url.render_as_string(hide_password=False)
    db = Database(url, max_retries=3, ping_after_idle=ping_after_idle)
    try:
        db.write(_add_host, "h1")
        assert db.read(_count) == 1
        assert _kill_connections(server, database.url.database) >= 1
        # Busy: the dead connection fails its first statement and the call is retried
        # on a new one. Idle: the ping at checkout finds it dead first.
        assert db.read(_count) == 1
        db.write(_add_host, "h2")
        assert db.read(_count) == 2
    finally:
        db.dispose()


def _session_id(conn) -> int:
    query = (
        "SELECT pg_backend_pid()" if conn.dialect.name == "postgresql" else "SELECT CONNECTION_ID()"
    )
    return int(conn.exec_driver_sql(query).scalar())


def _kill_session(server, ident: int) -> None:
    with server.engine.connect() as conn:
        if server.backend == "mariadb":
            conn.exec_driver_sql(f"KILL {ident}")
        else:
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({ident})")


@pytest.mark.parametrize("lost", ["before-commit", "at-commit"])
def test_a_transaction_whose_commit_may_have_committed_is_not_run_again(database, db_servers, lost):
    """A connection lost before the COMMIT was sent: the server rolled the transaction back,
    and it is run again (one host made). Lost as the COMMIT is sent: the server may have
    committed it, so it is not run again (a create would be made twice): 503's
    DatabaseUnavailable, saying why, and the transaction ran once."""
    if database.dialect == "sqlite":
        pytest.skip("SQLite has no server connection to lose")
    server = db_servers["postgresql" if database.dialect == "postgresql" else "mariadb"]
    db = Database(database.url.render_as_string(hide_password=False), max_retries=3)
    runs: list[int] = []

    def create(conn) -> None:
        runs.append(_session_id(conn))
        _add_host(conn, "once")
        if lost == "before-commit" and len(runs) == 1:
            _kill_session(server, runs[-1])
            _count(conn)  # the next statement finds the connection gone

    @sa.event.listens_for(db.engine, "commit")
    def _kill_at_commit(conn) -> None:
        if lost == "at-commit":
            _kill_session(server, runs[-1])

    try:
        if lost == "before-commit":
            db.write(create)
            assert len(runs) == 2 and db.read(_count) == 1
        else:
            with pytest.raises(exceptions.DatabaseUnavailable, match="during COMMIT"):
                db.write(create)
            assert len(runs) == 1
            assert db.read(_count) == 0  # killed before it could commit: nothing made
    finally:
        db.dispose()


def test_a_failed_write_leaves_nothing_and_the_connection_clean(database):
    db = database

    def _add_then_fail(conn):
        _add_host(conn, "h1")
        raise RuntimeError("the handler failed after its insert")

    with pytest.raises(RuntimeError):
        db.write(_add_then_fail)
    assert db.read(_count) == 0
    # The connection went back to the pool rolled back: the next transaction on it
    # commits its own work and nothing else.
    db.write(_add_host, "h2")
    assert db.read(lambda conn: [r.hostname for r in conn.execute(sa.select(hosts))]) == ["h2"]


def test_readers_see_what_writers_committed(database):
    db = database
    for n in range(3):
        db.write(_add_host, f"h{n}")
        assert db.read(_count) == n + 1
