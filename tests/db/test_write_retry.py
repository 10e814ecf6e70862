"""Database.write retries a transaction the database aborted as a deadlock victim
(after exosuit.backoff's delay), on PostgreSQL and MariaDB; the caller never sees it.

SQLite has no deadlock to lose: its writers take the write lock at BEGIN IMMEDIATE,
one after the other."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from exosuit.db import models
from exosuit.db.api import Database

hosts = models.hosts
# Long enough for any machine: PostgreSQL looks for deadlocks after deadlock_timeout (1 s).
GENEROUS = 60.0


def _add_host(conn, name: str) -> None:
    conn.execute(sa.insert(hosts).values(hostname=name, created_at=models.utcnow()))


def _mark(conn, name: str, value: str) -> None:
    conn.execute(sa.update(hosts).where(hosts.c.hostname == name).values(snapshot_hash=value))


def _marks(conn) -> dict[str, str | None]:
    return dict(conn.execute(sa.select(hosts.c.hostname, hosts.c.snapshot_hash)).all())


def test_a_deadlock_victim_is_retried_and_both_writes_commit(database):
    if database.dialect == "sqlite":
        pytest.skip("SQLite writers never deadlock: BEGIN IMMEDIATE serializes them")
    db = Database(database.url.render_as_string(hide_password=False), max_retries=3)
    try:
        db.write(_add_host, "a")
        db.write(_add_host, "b")
        # Each writer locks one row, waits until the other holds its row, then asks for
        # the other's row: a deadlock on the first attempt, whatever the timing.
        both_hold_one = threading.Barrier(2, timeout=GENEROUS)
        attempts: list[str] = []
        errors: list[BaseException] = []

        def cross(conn, first: str, second: str, me: str) -> None:
            attempts.append(me)
            _mark(conn, first, me)
            if attempts.count(me) == 1:
                both_hold_one.wait()
            _mark(conn, second, me)

        def writer(first: str, second: str, me: str) -> None:
            try:
                db.write(cross, first, second, me)
            except BaseException as error:  # reported by the assertion below
                errors.append(error)

        threads = [
            threading.Thread(target=writer, args=("a", "b", "one")),
            threading.Thread(target=writer, args=("b", "a", "two")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(GENEROUS)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        # One of the two was the victim: it ran again, after the other committed, and
        # its marks are the ones left on both rows.
        assert sorted(attempts) in (["one", "one", "two"], ["one", "two", "two"])
        victim = "one" if attempts.count("one") == 2 else "two"
        assert attempts[-1] == victim
        assert db.read(_marks) == {"a": victim, "b": victim}
    finally:
        db.dispose()
