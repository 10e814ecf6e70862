"""The durable job table: enqueue in the caller's transaction; workers run the jobs.

A request that must reach another system (Placement, Nova, an agent) commits
its state change and its job in one transaction (``enqueue``), so neither can
be lost without the other. Workers (exosuit/conductor/worker.py) claim jobs,
run the handler registered for their kind, retry with exponential backoff and
record the outcome.

Handlers are plain functions ``handler(ctx, payload)`` registered with
``@register("kind")``. They must be idempotent: a job may run again after a
worker dies in the middle of it. Raising ``RetryLater`` reschedules the job
after the given delay without counting as a failure; any other exception is a
failed attempt (retried with backoff until ``max_attempts``).

Besides handlers, modules register here what the worker needs without knowing
them: ``SERVICE_FACTORIES`` (outbound clients built from the configuration,
handed to handlers as ``ctx.services``) and ``PERIODIC`` (kinds the conductors
run every so often, at most one at a time across all of them). A module that
registers anything is listed in ``HANDLER_MODULES`` (or, out of tree, in
``[conductor] handler_modules``) so that every conductor imports it at start.
See doc/conductor.md.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
import zlib
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from exosuit.db import models

__all__ = [
    "FAILED",
    "HANDLERS",
    "HANDLER_MODULES",
    "PENDING",
    "PERIODIC",
    "RUNNING",
    "SERVICE_FACTORIES",
    "SUCCEEDED",
    "JobContext",
    "RetryLater",
    "count_by_state",
    "enqueue",
    "list_jobs",
    "periodic_job_id",
    "register",
    "register_periodic",
    "register_service",
    "retry_failed",
]

jobs = models.jobs

PENDING = "pending"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"


class RetryLater(Exception):
    """Run this job again after ``delay`` seconds (not a failure: e.g. the compute
    node provider does not exist yet)."""

    def __init__(self, reason: str, delay: float = 30.0) -> None:
        super().__init__(reason)
        self.delay = delay


@dataclasses.dataclass
class JobContext:
    """What handlers get: configuration, database and the outbound clients.

    Under a worker it also says which job runs (``job_id``, ``kind``, ``attempts``:
    failed attempts before this one) and lets a long handler check its lease:
    ``heartbeat()`` renews it at once and returns False when it was lost (the
    worker stalled past ``[conductor] lease_seconds`` and another worker may run
    the job now), so the handler should stop before its next side effect. The
    worker also renews the lease in the background while the handler runs.
    """

    conf: Any
    db: Any
    services: dict[str, Any] = dataclasses.field(default_factory=dict)
    job_id: int | None = None
    kind: str | None = None
    attempts: int = 0
    lease_lost: threading.Event = dataclasses.field(default_factory=threading.Event)
    renew: Callable[[], bool] | None = dataclasses.field(default=None, repr=False)

    def heartbeat(self) -> bool:
        """Renew this job's lease now; False if the lease was lost (stop working)."""
        if self.lease_lost.is_set():
            return False
        if self.renew is None:
            return True
        return self.renew()


Handler = Callable[[JobContext, dict], None]
HANDLERS: dict[str, Handler] = {}


# Modules that register handlers, services or periodic jobs: every conductor
# imports them at start (plus [conductor] handler_modules).
HANDLER_MODULES: list[str] = ["exosuit.placement.sync", "exosuit.nova.notify"]

# name -> factory(conf) -> client. Built lazily, once per conductor process, the
# first time a handler reads ctx.services[name]; must be safe to share between
# the worker threads of a process.
ServiceFactory = Callable[[Any], Any]
SERVICE_FACTORIES: dict[str, ServiceFactory] = {}

# kind -> seconds between two runs (a number, or a function of the conf; 0 or
# less: disabled). Scheduled only where a handler for the kind is registered.
Interval = float | Callable[[Any], float]
PERIODIC: dict[str, Interval] = {}


def register(kind: str) -> Callable[[Handler], Handler]:
    def decorator(func: Handler) -> Handler:
        HANDLERS[kind] = func
        return func

    return decorator


def register_service(name: str) -> Callable[[ServiceFactory], ServiceFactory]:
    """Register ``factory(conf)``: the worker puts its result in ``ctx.services[name]``."""

    def decorator(factory: ServiceFactory) -> ServiceFactory:
        SERVICE_FACTORIES[name] = factory
        return factory

    return decorator


def register_periodic(kind: str, interval: Interval) -> None:
    """Run jobs of ``kind`` every ``interval`` seconds (counted from the end of the
    previous run), at most one at a time across all conductors."""
    PERIODIC[kind] = interval


def periodic_job_id(kind: str) -> int:
    """The fixed (negative) id of the one job row of a periodic kind.

    NOTE: a fixed primary key makes "at most one row per periodic kind" a
    uniqueness the database enforces on every backend, even when several
    conductors start together; autoincrement ids are positive, so no clash.
    """
    return -(zlib.crc32(kind.encode()) & 0x7FFFFFFF) - 1


# Placement drift repair: scheduled once a handler for it is registered.
register_periodic("placement_reconcile", lambda conf: conf.conductor.reconcile_interval)


def enqueue(conn, kind: str, payload: dict, *, key: str | None = None,
            delay: float = 0.0, coalesce: bool = True) -> int:
    """Add a job in the caller's transaction; return its id.

    With a ``key``, a job of that key still pending absorbs this one (its
    payload is the same kind of request: "sync host X"), so a burst of changes
    costs one run; its id is returned. A job already running does not absorb
    it: it may have read the state before this change. ``coalesce=False`` is
    for a key that is new by construction: no pending job can have it, so
    nothing is looked up.
    """
    now = models.utcnow()
    if key is not None and coalesce:
        pending = conn.execute(
            sa.select(jobs.c.id).where(jobs.c.key == key, jobs.c.state == PENDING).limit(1)
        ).first()
        if pending is not None:
            return pending.id
    result = conn.execute(_INSERT_JOB, {
        "kind": kind, "key": key, "payload": json.dumps(payload, sort_keys=True),
        "state": PENDING, "attempts": 0, "run_after": now + dt.timedelta(seconds=delay),
        "created_at": now,
    })
    return result.inserted_primary_key[0]


_INSERT_JOB = sa.insert(jobs)  # built once: every reported change enqueues a job


# Operators (exosuit-conductor status / retry)


def count_by_state(conn) -> dict[str, int]:
    """Number of jobs in each state (states with no job are 0)."""
    counts = dict.fromkeys((PENDING, RUNNING, SUCCEEDED, FAILED), 0)
    for state, count in conn.execute(
            sa.select(jobs.c.state, sa.func.count()).group_by(jobs.c.state)):
        counts[state] = count
    return counts


def list_jobs(conn, states: list[str], *, kind: str | None = None,
              limit: int = 50) -> list[dict]:
    """Jobs in ``states``, oldest first, as plain dicts (payload decoded)."""
    query = sa.select(jobs).where(jobs.c.state.in_(states))
    if kind is not None:
        query = query.where(jobs.c.kind == kind)
    rows = conn.execute(query.order_by(jobs.c.run_after, jobs.c.id).limit(limit)).mappings()
    return [{**row, "payload": json.loads(row["payload"] or "{}")} for row in rows]


def retry_failed(conn, job_id: int) -> bool:
    """Make a failed job pending again, due now, with its attempts reset; False if
    there is no failed job with that id."""
    now = models.utcnow()
    return conn.execute(
        sa.update(jobs).where(jobs.c.id == job_id, jobs.c.state == FAILED)
        .values(state=PENDING, attempts=0, run_after=now, worker=None,
                lease_expires_at=None, updated_at=now)
    ).rowcount == 1
