"""How a cache knows that what it keeps is still what the database holds.

Every transaction that changes the deployable list (a row of ``deployables`` or
``attributes`` written, or a device deleted, which cascades to both) adds 1, as it
commits, to the counter ``DEPLOYABLES``. The counter lives in ``metric_counters``
(exosuit/db/metrics.py: shared by every process, and only ever growing); its value
is the sum of ``SLOTS`` rows, one of them bumped per transaction, so that
concurrent writers (a boot storm of inventory reports) do not queue on one row
lock. The bump is the transaction's last statement, in its commit: a reader sees
the change and the bump together or neither.

A second counter, ``HOST_REPORTS``, counts the transactions that changed what an
unchanged agent report is answered from: a host's row inserted or deleted, or its
``snapshot_hash`` or ``desired_generation`` set (the API's cache of host reports,
exosuit/api/report_cache.py). A host's report time, usage and observed generation do
not count: every unchanged report may write those.

A reader of the list reads the counter first and the list after it: a change
committed between the two reads leaves the version it keeps older than the list,
never newer, so the next look at the counter finds it changed. Equal versions mean
no change was committed in between. The counter's rows are never deleted (they are
Prometheus counters too, and only grow).

A write function of exosuit/db/ says what it changed: next to each statement that
writes what a counter counts, ``mark(conn, DEPLOYABLES)`` or ``mark(conn,
HOST_REPORTS)``. The mark is kept with the transaction's connection, and
``Database.writer`` (exosuit/db/api.py) counts it as the transaction commits (a
transaction rolled back forgets its marks); every write of Exosuit goes through it. (A
write on a connection taken otherwise, such as a migration's, is not counted: the API's
cache forgets an entry after a while anyway.)

Why a mark and not a return value: a write function already returns its own answer
(an ``ApplyResult``, the rows it wrote, the new generations), and what it changed
would have to be carried up by every caller to the transaction that commits it
(``desired_state.bump`` alone has a dozen callers, most of them write functions of
their own): each caller is one more place to drop it. A mark goes from the statement
straight to the transaction, whoever called; it sits beside the statement it describes,
where a reader and a reviewer look. A forgotten mark is caught by a test, not a user:
tests/helpers/change_marks.py watches every committed transaction of the gabbi stories
and of tests/db/test_change_marks.py and fails one that wrote what a counter counts
without bumping it.

NOTE: nothing here watches the SQL a connection sends (this module once matched it
against regular expressions at the dialect's execute hooks): a hook costs every
statement of the engine, and recognising a write from its text is guesswork that a
reader cannot follow.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
from collections.abc import Callable
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import metrics, models

__all__ = [
    "DEPLOYABLES",
    "HOST_REPORTS",
    "SLOTS",
    "Counter",
    "CounterReader",
    "HeldReader",
    "SharedRead",
    "count",
    "forget",
    "mark",
    "version",
]

LOG = logging.getLogger(__name__)

Counter = Literal["exosuit_deployable_changes", "exosuit_host_report_changes"]
# Committed transactions that changed deployables or their attributes (by slot).
DEPLOYABLES: Final = "exosuit_deployable_changes"
# Committed transactions that changed a host's snapshot hash or desired generation.
HOST_REPORTS: Final = "exosuit_host_report_changes"
SLOTS = 16

_CHANGED = "exosuit_changed"  # in Connection.info: the counters a transaction moves

_counters = models.metric_counters
_Q_VERSION = {
    name: sa.select(sa.func.coalesce(sa.func.sum(_counters.c.value), 0)).where(
        _counters.c.name == name
    )
    for name in (DEPLOYABLES, HOST_REPORTS)
}


def version(conn: Connection, counter: str = DEPLOYABLES) -> int:
    """The version ``counter`` keeps (the deployable list's by default): it grows with
    every committed change it counts."""
    return int(conn.execute(_Q_VERSION[counter]).scalar_one())


class CounterReader:
    """``version(conn, counter)`` as a function of no argument, for a reader that asks
    often and one at a time (exosuit/api/report_cache.py's ``Version``): on PostgreSQL
    and MariaDB, one constant statement on a connection of its own, kept open in
    autocommit mode (each read is its own statement, so it sees every transaction
    committed before it started, as a pooled read does), through the driver's cursor:
    about a fifth of the CPU of the same read through SQLAlchemy's pool and execution
    (20 against 110 µs here). Any error drops the connection and answers this read
    through ``db.read`` (retried and mapped as every read); the next one reconnects.
    SQLite reads through ``db.read`` always. ``direct_reads`` counts the reads sent on
    the connection of its own (SQLAlchemy's events do not see them)."""

    def __init__(self, db: Any, counter: str) -> None:
        if counter not in _Q_VERSION:
            raise ValueError(f"unknown counter {counter!r}")
        self.db = db
        self.counter = counter
        # The counter's name is one of this module's constants, never a caller's text.
        self._sql = (
            "SELECT coalesce(sum(value), 0) FROM metric_counters "  # noqa: S608
            f"WHERE name = '{counter}'"
        )
        self._own = db.dialect != "sqlite"
        self._lock = threading.Lock()
        self._fairy: Any = None
        self._cursor: Any = None
        self.direct_reads = 0

    def __call__(self) -> int:
        if self._own:
            with self._lock:
                try:
                    if self._cursor is None:
                        self._connect()
                    self.direct_reads += 1
                    self._cursor.execute(self._sql)
                    return int(self._cursor.fetchone()[0])
                except Exception as error:  # noqa: BLE001 - the driver's, whichever it is
                    LOG.debug("counter read failed (%s); reading through the pool", error)
                    self._drop()
        return int(self.db.read(version, self.counter))

    def _connect(self) -> None:
        engine = self.db.engine
        fairy = engine.raw_connection()
        fairy.detach()  # ours until dropped: the pool opens another in its place
        try:
            engine.dialect.set_isolation_level(fairy.dbapi_connection, "AUTOCOMMIT")
            self._cursor = fairy.dbapi_connection.cursor()
        except Exception:
            fairy.close()
            raise
        self._fairy = fairy

    def _drop(self) -> None:
        fairy, self._fairy, self._cursor = self._fairy, None, None
        if fairy is not None:
            try:
                fairy.close()  # detached: closes the connection itself
            except Exception:  # noqa: BLE001, S110 - it may be gone already
                pass

    def close(self) -> None:
        with self._lock:
            self._drop()


class HeldReader:
    """``version(conn, counter)`` as a function of no argument, through SQLAlchemy (its
    statement events see each read, as they see any other) but on one connection of the
    database's readers held open, detached from their pool: each read is one statement in
    autocommit mode (it sees every transaction committed before it started, as a pooled
    read does) without a pool check-out and check-in around it, which cost about as much
    as the read itself. Any error drops the connection and answers this read through
    ``db.read`` (retried and mapped as every read); the next one reconnects. SQLite
    reads through ``db.read`` always."""

    def __init__(self, db: Any, counter: str) -> None:
        if counter not in _Q_VERSION:
            raise ValueError(f"unknown counter {counter!r}")
        self.db = db
        self.counter = counter
        self._query = _Q_VERSION[counter]
        # Database's reader engine: autocommit connections of their own (exosuit/db/api.py).
        self._engine = None if db.dialect == "sqlite" else db._read_engine
        self._lock = threading.Lock()
        self._conn: Connection | None = None

    def __call__(self) -> int:
        if self._engine is not None:
            with self._lock:
                try:
                    if self._conn is None:
                        conn = self._engine.connect()
                        conn.detach()  # ours until dropped: the pool opens another instead
                        self._conn = conn
                    return int(self._conn.execute(self._query).scalar_one())
                except Exception as error:  # noqa: BLE001 - the driver's, whichever it is
                    LOG.debug("counter read failed (%s); reading through the pool", error)
                    self._drop()
        return int(self.db.read(version, self.counter))

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()  # detached: closes the connection itself
            except Exception:  # noqa: BLE001, S110 - it may be gone already
                pass

    def close(self) -> None:
        with self._lock:
            self._drop()


class SharedRead:
    """``read()`` (a counter's version) shared by the threads that ask at once: a caller
    gets the value of a read that started after it asked, its own or one another caller
    started meanwhile; so, as with a read of its own, no change committed before it
    asked is missing from the value it gets. One read runs at a time: those who asked
    while it ran wait for it to end, and the first of them reads again, for them all.
    A read that fails is nobody's answer (each caller then tries its own)."""

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._tickets = itertools.count()  # next() is atomic: no lock needed to ask
        self._last: tuple[int, int] | None = None  # (the read's ticket, its value)
        self.reads = 0  # reads made (for tests)

    def __call__(self) -> int:
        asked = next(self._tickets)
        with self._lock:
            last = self._last
            if last is not None and last[0] > asked:  # it started after we asked
                return last[1]
            started = next(self._tickets)
            self.reads += 1
            value = self._read()
            self._last = (started, value)
            return value


def version_query(counter: str) -> sa.ScalarSelect[Any]:
    """``counter``'s version as a scalar subquery, to read with other data in one
    statement (one snapshot: the version and the data agree)."""
    return _Q_VERSION[counter].scalar_subquery()


def mark(conn: Connection, counter: Counter) -> None:
    """The transaction on ``conn`` changed what ``counter`` counts: ``Database.writer``
    bumps it as the transaction commits (once, however many marks). Call it beside the
    statement that made the change, whether or not that statement found a row."""
    changed = conn.info.get(_CHANGED)
    if changed is None:
        conn.info[_CHANGED] = {counter}
    else:
        changed.add(counter)


def forget(conn: Connection) -> None:
    """Start a transaction with nothing marked (a rolled-back one may have left a mark)."""
    conn.info.pop(_CHANGED, None)


def count(conn: Connection) -> None:
    """At the end of a transaction, before its commit: bump the version of each counter
    whose data it changed (one statement for both). One of SLOTS rows, chosen at random,
    so that concurrent writers rarely wait for one another's commit."""
    changed = conn.info.pop(_CHANGED, None)
    if changed:
        slot = str(random.randrange(SLOTS))  # noqa: S311 - spreads writers, no secret
        metrics.increment(conn, {(name, (("slot", slot),)): 1 for name in changed})
