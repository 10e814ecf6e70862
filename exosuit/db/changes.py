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

Changes are noticed on every connection of the engine ``track`` is given (any
INSERT, UPDATE or DELETE of those tables, through SQLAlchemy or as raw SQL) and
counted by ``Database.writer`` (exosuit/db/api.py) as its transaction commits: every
write of Exosuit goes through it. (A write on a connection taken otherwise, such as a
migration's, is not counted: the API's cache forgets an entry after a while anyway.)

NOTE: the statements are watched through the dialect's execute hooks, not the
connection's events: a connection event listener costs every statement of the
engine about 7 µs of SQLAlchemy's dispatch (a tenth of a millisecond per ARQ cycle).
"""

from __future__ import annotations

import logging
import random
import re
import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from exosuit.db import metrics, models

__all__ = [
    "DEPLOYABLES",
    "HOST_REPORTS",
    "SLOTS",
    "CounterReader",
    "count",
    "forget",
    "track",
    "version",
]

LOG = logging.getLogger(__name__)

# Committed transactions that changed deployables or their attributes (by slot).
DEPLOYABLES = "exosuit_deployable_changes"
# Committed transactions that changed a host's snapshot hash or desired generation.
HOST_REPORTS = "exosuit_host_report_changes"
SLOTS = 16

# table -> the statements on it that change the list
_WATCHED = {
    "deployables": {"INSERT", "UPDATE", "DELETE"},
    "attributes": {"INSERT", "UPDATE", "DELETE"},
    "devices": {"DELETE"},  # cascades to its deployables and their attributes
}
_RAW_DML = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)
_RAW_TABLES = re.compile(r"\b(deployables|attributes|devices)\b", re.IGNORECASE)
_RAW_HOSTS = re.compile(r"\bhosts\b", re.IGNORECASE)
# What an UPDATE of hosts sets, from its SQL: the columns an unchanged report is answered
# from (the SET clause runs to WHERE, or to the end of an UPDATE of every host).
_HOST_SET = re.compile(r"\bSET\b(.*?)(?:\bWHERE\b|$)", re.IGNORECASE | re.DOTALL)
_HOST_REPORT_COLUMNS = re.compile(r"\b(snapshot_hash|desired_generation)\b", re.IGNORECASE)
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


def version_query(counter: str) -> sa.ScalarSelect[Any]:
    """``counter``'s version as a scalar subquery, to read with other data in one
    statement (one snapshot: the version and the data agree)."""
    return _Q_VERSION[counter].scalar_subquery()


def _changes_list(context: Any, statement: str) -> bool:
    """Whether the statement about to run changes the deployable list."""
    compiled = getattr(context, "compiled", None)
    element = getattr(compiled, "statement", None)
    if isinstance(element, (sa.Insert, sa.Update, sa.Delete)):
        kinds = _WATCHED.get(getattr(element.table, "name", ""), ())
        return bool(
            (context.isinsert and "INSERT" in kinds)
            or (context.isupdate and "UPDATE" in kinds)
            or (context.isdelete and "DELETE" in kinds)
        )
    if compiled is not None and not isinstance(element, sa.TextClause):
        return False  # a SELECT (or DDL) of SQLAlchemy Core: the common case, decided first
    # Raw SQL or text(): any write that names a watched table counts.
    return bool(_RAW_DML.match(statement) and _RAW_TABLES.search(statement))


def _changes_host_reports(context: Any, statement: str) -> bool:
    """Whether the statement about to run changes a host's snapshot hash or desired
    generation (or adds or deletes a host)."""
    compiled = getattr(context, "compiled", None)
    element = getattr(compiled, "statement", None)
    if isinstance(element, (sa.Insert, sa.Update, sa.Delete)):
        if getattr(element.table, "name", "") != "hosts":
            return False
        if not context.isupdate:
            return True
    elif compiled is not None and not isinstance(element, sa.TextClause):
        return False  # a SELECT (or DDL) of SQLAlchemy Core
    elif not (_RAW_DML.match(statement) and _RAW_HOSTS.search(statement)):
        return False
    else:  # raw SQL on hosts: any but an UPDATE that sets neither column counts
        if not statement.lstrip()[:6].upper() == "UPDATE":
            return True
    found = _HOST_SET.search(statement)
    return found is None or bool(_HOST_REPORT_COLUMNS.search(found.group(1)))


def track(engine: Engine) -> None:
    """Notice the statements on ``engine`` that change the list (see ``count``)."""

    def _execute(_cursor: Any, statement: str, _parameters: Any, context: Any) -> bool:
        if _changes_list(context, statement):
            context.root_connection.info.setdefault(_CHANGED, set()).add(DEPLOYABLES)
        if _changes_host_reports(context, statement):
            context.root_connection.info.setdefault(_CHANGED, set()).add(HOST_REPORTS)
        return False  # the statement still runs as usual

    def _execute_no_params(_cursor: Any, statement: str, context: Any) -> bool:
        return _execute(_cursor, statement, None, context)

    event.listen(engine, "do_execute", _execute)
    event.listen(engine, "do_executemany", _execute)
    event.listen(engine, "do_execute_no_params", _execute_no_params)


def forget(conn: Connection) -> None:
    """Start a transaction with nothing noticed (a rolled-back one may have left a mark)."""
    conn.info.pop(_CHANGED, None)


def count(conn: Connection) -> None:
    """At the end of a transaction, before its commit: bump the version of each counter
    whose data it changed (one statement for both). One of SLOTS rows, chosen at random,
    so that concurrent writers rarely wait for one another's commit."""
    changed = conn.info.pop(_CHANGED, None)
    if changed:
        slot = str(random.randrange(SLOTS))  # noqa: S311 - spreads writers, no secret
        metrics.increment(conn, {(name, (("slot", slot),)): 1 for name in changed})
