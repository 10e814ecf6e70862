"""The audit trail: every change, who made it, in the change's own transaction.

A write function of exosuit/db that changes a device, deployable, device profile, ARQ,
claim, driver, image or a host's inventory adds one line::

    audit.record(conn, "disable", "device", uuid, {"status": "enabled"}, {"status": ...},
                 host=hostname)

on the connection of its transaction: the record commits with the change or rolls back
with it, so a committed change always has its record and a rolled-back one has none
(doc/audit.md lists the actions).

**Who acts** is not a parameter of every write function: it is the ``Actor`` of the
context (a ``ContextVar``), set around a request by the API (exosuit/api/deploy.py: the
caller's user and project, ``host:<name>`` for an agent's request, and the request id)
and around a job by the conductor (``conductor``, the request id ``job-<id>``); anything
else that writes (exosuit-manage, a test) is ``system`` unless it says otherwise with
``acting``. NOTE: explicit parameters were weighed against this: they would change the
signature of some forty write functions and every caller (handlers, job kinds, tests)
for a value that only the outermost layer knows and no function in between uses; a
context variable is set in two places, is per thread (each request and job runs in its
own), and ``record(…, actor=…)`` still overrides it. exosuit/db imports nothing above it.

**Notifications.** When the database was opened with notifications on
(``Database(notifications=True)``: ``[oslo_messaging_notifications] driver`` is set),
each record is marked ``notify_pending`` and the transaction queues one coalesced
``audit_publish`` job as it commits (``flush``, called by ``Database.writer``). The
conductor's job publishes the pending records in id order and clears their mark
(exosuit/conductor/audit.py): never lost (the mark commits with the change), possibly
twice (a worker that dies between publishing and clearing the mark), and never in the
request's way (nothing but two rows is written while it runs).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import jobs, models
from exosuit.db.pagination import Page, paginate

__all__ = [
    "CONDUCTOR",
    "FILTERS",
    "NOTIFY_OPTION",
    "PUBLISH",
    "SORT_COLUMNS",
    "SWEEP",
    "SYSTEM",
    "Actor",
    "AuditEventRow",
    "Change",
    "acting",
    "current",
    "enqueue_publish",
    "event_type",
    "flush",
    "forget",
    "get_event",
    "has_pending",
    "mark_published",
    "page_events",
    "pending",
    "purge",
    "record",
    "record_many",
]

events = models.audit_events

# Job kinds (exosuit/conductor/audit.py): publish the pending notifications; the periodic
# sweep that purges old records and re-queues a publish that a race left waiting.
PUBLISH = "audit_publish"
SWEEP = "audit_sweep"
_PUBLISH_KEY = "audit-publish"

# The execution option ``Database.writer`` sets on its connections when notifications
# are on (exosuit/db/api.py).
NOTIFY_OPTION = "exosuit_notify"
_RECORDED = "exosuit_audit_recorded"  # in Connection.info: this transaction has one to publish

# Longest before or after kept (characters of JSON): a record says what changed in brief.
MAX_BRIEF = 8000


@dataclasses.dataclass(frozen=True)
class Actor:
    """Who makes a change: ``name`` is ``user:<id>``, ``service:<id>`` (a service, Nova,
    calling with its service token for that user), ``host:<name>`` (the host's agent),
    ``conductor`` or ``system``; with the caller's user and project and the request's id
    when there is one."""

    name: str
    user_id: str | None = None
    project_id: str | None = None
    request_id: str | None = None


SYSTEM = Actor("system")
CONDUCTOR = "conductor"

_ACTOR: contextvars.ContextVar[Actor] = contextvars.ContextVar("exosuit_actor", default=SYSTEM)


def current() -> Actor:
    """The actor of this thread's request or job (``SYSTEM`` outside both)."""
    return _ACTOR.get()


@contextlib.contextmanager
def acting(actor: Actor) -> Iterator[Actor]:
    """Make ``actor`` the one whose changes are recorded within the block."""
    token = _ACTOR.set(actor)
    try:
        yield actor
    finally:
        _ACTOR.reset(token)


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.replace(microsecond=0).isoformat() + "Z"
    if isinstance(value, set | frozenset | tuple):
        return sorted(value, key=str)
    return str(value)


def _brief(data: Mapping[str, Any] | None) -> str | None:
    if data is None:
        return None
    text = json.dumps(data, sort_keys=True, default=_default)
    if len(text) > MAX_BRIEF:
        text = json.dumps({"truncated": True, "fields": sorted(data)})
    return text


class Change(NamedTuple):
    """One object's change, for ``record_many``."""

    object_uuid: str | None
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    host: str | None = None


_INSERT = sa.insert(events)


def record(
    conn: Connection,
    action: str,
    object_type: str,
    object_uuid: str | None,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    *,
    host: str | None = None,
    actor: Actor | None = None,
) -> None:
    """Record one change in the caller's transaction: ``action`` (``create``,
    ``bind.end`` …) on the ``object_type`` object ``object_uuid`` (a driver's or a
    host's name for those), what it was ``before`` and is ``after`` in brief (None:
    created, or deleted), the ``host`` it is on; by ``actor`` (default: ``current()``)."""
    record_many(conn, action, object_type, [Change(object_uuid, before, after, host)], actor=actor)


def record_many(
    conn: Connection,
    action: str,
    object_type: str,
    changes: Iterable[Change],
    *,
    actor: Actor | None = None,
) -> None:
    """``record`` for several objects changed alike, in one statement."""
    who = actor or _ACTOR.get()
    notify = bool(conn.get_execution_options().get(NOTIFY_OPTION))
    now = models.utcnow()
    rows = [
        {
            "created_at": now,
            "request_id": who.request_id,
            "actor": who.name,
            "user_id": who.user_id,
            "project_id": who.project_id,
            "action": action,
            "object_type": object_type,
            "object_uuid": change.object_uuid,
            "host": change.host,
            "before_data": _brief(change.before),
            "after_data": _brief(change.after),
            "notify_pending": notify,
        }
        for change in changes
    ]
    if not rows:
        return
    conn.execute(_INSERT, rows)
    if notify:
        conn.info[_RECORDED] = True


# -- publishing (the transaction's end; the conductor) ------------------------------------


def forget(conn: Connection) -> None:
    """Start a transaction with nothing to publish (a rolled-back one may have left a mark)."""
    conn.info.pop(_RECORDED, None)


def flush(conn: Connection) -> None:
    """At the end of a transaction, before its commit: queue the publish job if it
    recorded a change to notify (one job, coalesced with a pending one)."""
    if conn.info.pop(_RECORDED, False):
        enqueue_publish(conn)


def enqueue_publish(conn: Connection) -> None:
    """Queue the job that publishes the pending notifications (absorbed by a pending one).

    NOTE: a pending job absorbs it even when a worker claims that job before this
    transaction commits (on PostgreSQL and MariaDB, where the claim does not wait for it):
    that run may miss this record. The periodic sweep queues the job again while a
    record is pending, so such a record goes out at the next sweep.
    """
    jobs.enqueue(conn, PUBLISH, {}, key=_PUBLISH_KEY)


_PENDING = sa.select(events).where(events.c.notify_pending.is_(True)).order_by(events.c.id)


def has_pending(conn: Connection) -> bool:
    return conn.execute(_PENDING.with_only_columns(events.c.id).limit(1)).first() is not None


def pending(conn: Connection, *, limit: int = 100) -> list[AuditEventRow]:
    """Up to ``limit`` records whose notification is still to be published, oldest first."""
    return [_as_dict(row) for row in conn.execute(_PENDING.limit(limit)).mappings()]


def mark_published(conn: Connection, ids: list[int]) -> int:
    """Their notifications went out: clear their marks."""
    if not ids:
        return 0
    return int(
        conn.execute(
            sa.update(events).where(events.c.id.in_(ids)).values(notify_pending=False)
        ).rowcount
    )


def event_type(event: Mapping[str, Any]) -> str:
    """The notification's event type: ``exosuit.<object type>.<action>``."""
    return f"exosuit.{event['object_type']}.{event['action']}"


# -- retention -----------------------------------------------------------------------------


def purge(conn: Connection, retention: float, *, limit: int = 1000) -> int:
    """Delete up to ``limit`` records older than ``retention`` seconds (those whose
    notification is still pending are kept until it is published); how many."""
    cutoff = models.utcnow() - dt.timedelta(seconds=retention)
    old = sa.and_(events.c.created_at < cutoff, events.c.notify_pending.is_(False))
    ids = list(
        conn.execute(sa.select(events.c.id).where(old).order_by(events.c.id).limit(limit)).scalars()
    )
    if not ids:
        return 0
    return int(conn.execute(sa.delete(events).where(events.c.id.in_(ids), old)).rowcount)


# -- the API's view (microversion 2.9: GET /v2/audit_events) --------------------------------

# Exact-match filters: the query parameter is the column.
FILTERS = (
    "object_type",
    "object_uuid",
    "host",
    "actor",
    "user_id",
    "project_id",
    "action",
    "request_id",
)
SORT_COLUMNS: dict[str, sa.ColumnElement[Any]] = {
    "id": events.c.id,
    "created_at": events.c.created_at,
}


def _decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class AuditEventRow(TypedDict):
    """A record as the API and its notification show it: a row of ``audit_events``
    (models.AuditEvent says what each column holds), before and after decoded."""

    id: int
    created_at: dt.datetime
    request_id: str | None
    actor: str
    user_id: str | None
    project_id: str | None
    action: str
    object_type: str
    object_uuid: str | None
    host: str | None
    before: Any  # the object in brief, as canonical JSON held it (None: created)
    after: Any  # (None: deleted)
    notify_pending: bool


def _as_dict(row: sa.RowMapping) -> AuditEventRow:
    event = {k: v for k, v in row.items() if k not in ("before_data", "after_data")}
    event["before"] = _decode(row["before_data"])
    event["after"] = _decode(row["after_data"])
    return cast(AuditEventRow, event)  # the table's columns, the data decoded


def page_events(
    conn: Connection,
    *,
    filters: Mapping[str, str],
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    page: Page | None = None,
) -> list[AuditEventRow]:
    """A page of records matching ``filters`` (exact, on ``FILTERS``), made at or after
    ``since`` and before ``until``; ``page.marker`` is the id of the last one seen. One
    more than ``page.limit`` comes when more remain."""
    query = sa.select(events)
    for name, value in filters.items():
        query = query.where(events.c[name] == value)
    if since is not None:
        query = query.where(events.c.created_at >= since)
    if until is not None:
        query = query.where(events.c.created_at < until)
    query = paginate(conn, query, events, page, SORT_COLUMNS, marker_column=events.c.id)
    return [_as_dict(row) for row in conn.execute(query).mappings()]


def get_event(conn: Connection, event_id: int) -> AuditEventRow:
    """One record; AuditEventNotFound if there is none (or it was purged)."""
    row = conn.execute(sa.select(events).where(events.c.id == event_id)).mappings().first()
    if row is None:
        raise exceptions.AuditEventNotFound(ident=event_id)
    return _as_dict(row)
