"""For tests only: hold every write transaction to the rule of exosuit/db/changes.py, that
a transaction which changed what the API caches also said so (``changes.mark``).

``watch(engine)`` listens to the engine's statements (a SQLAlchemy event listener: the
tests may afford its cost; Exosuit itself hooks no execute event) and, for each
transaction of ``Database.writer`` that commits, compares two sets of counters:

- the counters its statements changed the data of, recognised from the statements
  themselves (their table, read from the compiled statement, or from the SQL text of
  raw SQL such as exosuit/db/bulk.py's): a row of ``deployables`` or ``attributes``
  inserted, updated or deleted, or a device deleted (it cascades to both): DEPLOYABLES;
  a host inserted or deleted, or its ``snapshot_hash`` or ``desired_generation`` set:
  HOST_REPORTS;
- the counters the transaction bumped (its upsert of ``metric_counters``, which
  ``changes.count`` sends as it commits, for what the write functions marked).

A counter changed but not bumped is a forgotten mark (``Watch.missed``): a cache would
answer from data older than the database. A counter bumped for a transaction that
changed none of its data (``Watch.unneeded``) costs every API process a cache miss.
Transactions rolled back, and writes outside ``Database.writer`` (migrations), are left
out: neither is counted.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from exosuit.db import changes

__all__ = ["Transaction", "Watch", "all_missed", "needs", "watch"]

COUNTERS = frozenset({changes.DEPLOYABLES, changes.HOST_REPORTS})
_KEY = "tests_change_marks"  # in Connection.info: the transaction being watched

_RAW = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|REPLACE)\s+(?:IGNORE\s+)?(?:INTO\s+|FROM\s+)?[`\"\[]?(\w+)",
    re.IGNORECASE,
)
_SET = re.compile(r"\bSET\b(.*?)(?:\bWHERE\b|$)", re.IGNORECASE | re.DOTALL)
_HOST_REPORT_COLUMNS = re.compile(r"\b(snapshot_hash|desired_generation)\b", re.IGNORECASE)


def needs(context: Any, statement: str) -> set[str]:
    """The counters whose data the statement about to run changes."""
    element = getattr(getattr(context, "compiled", None), "statement", None)
    if isinstance(element, (sa.Insert, sa.Update, sa.Delete)):
        table = str(getattr(element.table, "name", ""))
        verb = type(element).__name__.upper()
    elif element is None or isinstance(element, sa.TextClause):
        found = _RAW.match(statement)
        if found is None:
            return set()
        verb, table = found.group(1).upper(), found.group(2).lower()
        verb = "INSERT" if verb == "REPLACE" else verb
    else:
        return set()  # a SELECT, or DDL
    if table in ("deployables", "attributes") or (table, verb) == ("devices", "DELETE"):
        return {changes.DEPLOYABLES}
    if table != "hosts":
        return set()
    if verb != "UPDATE":
        return {changes.HOST_REPORTS}
    assigned = _SET.search(statement)
    if assigned is None or _HOST_REPORT_COLUMNS.search(assigned.group(1)):
        return {changes.HOST_REPORTS}
    return set()


def _bumped(context: Any, parameters: Any) -> set[str]:
    """The change counters an upsert of ``metric_counters`` bumps."""
    element = getattr(getattr(context, "compiled", None), "statement", None)
    if not isinstance(element, sa.Insert) or element.table.name != "metric_counters":
        return set()
    rows = parameters if isinstance(parameters, list) else [parameters]
    values: list[Any] = []
    for row in rows:
        values.extend(row.values() if isinstance(row, dict) else row)
    return {value for value in values if isinstance(value, str) and value in COUNTERS}


@dataclasses.dataclass
class Transaction:
    """What one committed transaction of ``Database.writer`` changed and bumped."""

    needed: set[str] = dataclasses.field(default_factory=set)
    bumped: set[str] = dataclasses.field(default_factory=set)
    statements: list[str] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        shown = "\n  ".join(" ".join(s.split())[:160] for s in self.statements)
        return f"changed {sorted(self.needed)}, bumped {sorted(self.bumped)}:\n  {shown}"


@dataclasses.dataclass
class Watch:
    """The committed transactions of one engine, as ``watch`` saw them."""

    engine: Engine
    committed: list[Transaction] = dataclasses.field(default_factory=list)
    listeners: dict[str, Callable[..., None]] = dataclasses.field(default_factory=dict)

    @property
    def missed(self) -> list[Transaction]:
        """Transactions that changed a counter's data without bumping it."""
        return [t for t in self.committed if t.needed - t.bumped]

    @property
    def unneeded(self) -> list[Transaction]:
        """Transactions that bumped a counter whose data they did not change."""
        return [t for t in self.committed if t.bumped - t.needed]

    def clear(self) -> None:
        self.committed.clear()

    def close(self) -> None:
        """Stop watching (``all_missed`` no longer reports this watch)."""
        for name, listener in self.listeners.items():
            event.remove(self.engine, name, listener)
        self.listeners.clear()
        if self in _WATCHES:
            _WATCHES.remove(self)


_WATCHES: list[Watch] = []


def watch(engine: Engine) -> Watch:
    """Start watching ``engine``'s write transactions (until ``close`` or the engine is
    gone)."""
    seen = Watch(engine)
    _WATCHES.append(seen)

    def _begin(conn: Connection) -> None:
        writer = conn.get_execution_options().get("exosuit_writer")
        conn.info[_KEY] = Transaction() if writer else None

    def _execute(
        conn: Connection,
        _cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        _executemany: bool,
    ) -> None:
        transaction = conn.info.get(_KEY)
        if transaction is None:
            return
        needed = needs(context, statement)
        if needed:
            transaction.needed |= needed
            transaction.statements.append(statement)
        transaction.bumped |= _bumped(context, parameters)

    def _commit(conn: Connection) -> None:
        transaction = conn.info.pop(_KEY, None)
        if transaction is not None and (transaction.needed or transaction.bumped):
            seen.committed.append(transaction)

    def _rollback(conn: Connection) -> None:
        try:
            conn.info.pop(_KEY, None)
        except sa.exc.SQLAlchemyError:  # an invalidated connection: _begin starts afresh
            pass

    seen.listeners = {
        "begin": _begin,
        "before_cursor_execute": _execute,
        "commit": _commit,
        "rollback": _rollback,
    }
    for name, listener in seen.listeners.items():
        event.listen(engine, name, listener)
    return seen


def all_missed(watches: Iterable[Watch] | None = None) -> list[Transaction]:
    """The transactions with a forgotten mark of every open watch (or of ``watches``) so
    far, each watch cleared."""
    found: list[Transaction] = []
    for seen in _WATCHES if watches is None else watches:
        found.extend(seen.missed)
        seen.clear()
    return found
