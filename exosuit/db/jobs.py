"""The durable job table: enqueue in the caller's transaction, claim, lease, record.

A request that must reach another system (Placement, Nova, an agent) commits
its state change and its job in one transaction (``enqueue``), so neither can
be lost without the other. Conductor workers (exosuit/conductor/worker.py)
claim due jobs here, renew their leases, and record the outcome with a
compare-and-set on (id, worker, running). What a job kind is: exosuit/jobs.py.

Claims lock the oldest due row with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and
MariaDB (concurrent claimers each take a different row without waiting), or
read and update it under SQLite's single writer (``BEGIN IMMEDIATE``). The row
is then taken by a conditional update (``WHERE id = … AND state = <as read>``).
On a Galera cluster the lock is the node's own: claimers on two nodes may read
and update the same row, and certification settles it: the second to commit
fails with a deadlock (1213), ``Database.write`` runs it again, and it reads the
job as running (doc/deploy-galera.md).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import zlib
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import models
from exosuit.db.pagination import Page, paginate
from exosuit.db.statements import insert_if_absent

__all__ = [
    "FAILED",
    "LOST",
    "PENDING",
    "RUNNING",
    "STATES",
    "SUCCEEDED",
    "SORT_COLUMNS",
    "ClaimedJob",
    "JobRow",
    "PeriodicRow",
    "claim",
    "count_by_state",
    "delete_finished",
    "enqueue",
    "finished_ids",
    "get_job",
    "has_due",
    "insert_periodic",
    "list_jobs",
    "page_jobs",
    "periodic_job_id",
    "periodic_row",
    "rearm_periodic",
    "record",
    "renew",
    "retry_failed",
    "retry_job",
    "set_payload",
    "set_pending_payload",
]

jobs = models.jobs

PENDING = "pending"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
STATES = (PENDING, RUNNING, SUCCEEDED, FAILED)


def _seconds(value: float) -> dt.timedelta:
    return dt.timedelta(seconds=value)


# -- enqueue -------------------------------------------------------------------------------

_INSERT_JOB = sa.insert(jobs)  # built once: every reported change enqueues a job
_PENDING_OF_KEY = (
    sa.select(jobs.c.id)
    .where(jobs.c.key == sa.bindparam("p_key"), jobs.c.state == PENDING)
    .limit(1)
)


_HOLD_PENDING = (
    sa.update(jobs)
    .where(jobs.c.id == sa.bindparam("p_id"), jobs.c.state == PENDING)
    .values(updated_at=sa.bindparam("p_now"))
)


def enqueue(
    conn: Connection,
    kind: str,
    payload: dict[str, Any],
    *,
    key: str | None = None,
    delay: float = 0.0,
    coalesce: bool = True,
) -> int:
    """Add a job in the caller's transaction; return its id.

    With a ``key``, a job of that key still pending absorbs this one (its
    payload is the same kind of request: "sync host X"), so a burst of changes
    costs one run; its id is returned. A job already running does not absorb
    it: it may have read the state before this change (nor one claimed before
    this transaction commits: the pending job's row is written to hold it). ``coalesce=False`` is
    for a key that is new by construction: no pending job can have it, so
    nothing is looked up.
    """
    now = models.utcnow()
    if key is not None and coalesce:
        pending = conn.execute(_PENDING_OF_KEY, {"p_key": key}).first()
        # NOTE: the pending job absorbs this one only if it is still pending as this
        # transaction commits: a worker that claimed it meanwhile has read the state
        # from before this change. Written, not just read, so that the claim and this
        # transaction are ordered: one waits for the other's row lock, or, on Galera,
        # certification aborts one of them (retried). Otherwise a new job.
        if (
            pending is not None
            and conn.execute(_HOLD_PENDING, {"p_id": pending.id, "p_now": now}).rowcount == 1
        ):
            return int(pending.id)
    result = conn.execute(
        _INSERT_JOB,
        {
            "kind": kind,
            "key": key,
            "payload": json.dumps(payload, sort_keys=True),
            "state": PENDING,
            "attempts": 0,
            "run_after": now + _seconds(delay),
            "created_at": now,
        },
    )
    primary_key = result.inserted_primary_key
    assert primary_key is not None
    return int(primary_key[0])


def set_pending_payload(conn: Connection, key: str, payload: dict[str, Any]) -> bool:
    """Replace the payload of the pending job of ``key``; False if there is none."""
    return (
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.key == key, jobs.c.state == PENDING)
            .values(payload=json.dumps(payload, sort_keys=True))
        ).rowcount
        > 0
    )


def set_payload(conn: Connection, job_id: int, payload: dict[str, Any], *, state: str) -> bool:
    """Replace the payload of job ``job_id`` if it is in ``state``."""
    return (
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == job_id, jobs.c.state == state)
            .values(payload=json.dumps(payload, sort_keys=True), updated_at=models.utcnow())
        ).rowcount
        == 1
    )


# -- operators (exosuit-conductor status / retry, the API) -----------------------------------


def count_by_state(conn: Connection) -> dict[str, int]:
    """Number of jobs in each state (states with no job are 0)."""
    counts = dict.fromkeys(STATES, 0)
    for state, count in conn.execute(
        sa.select(jobs.c.state, sa.func.count()).group_by(jobs.c.state)
    ):
        counts[state] = count
    return counts


class JobRow(TypedDict):
    """A job as ``exosuit-conductor status`` and the API show it: a row of ``jobs``
    (models.Job says what each column holds), its payload decoded."""

    id: int
    kind: str
    key: str | None
    payload: dict[str, Any]
    state: str
    attempts: int
    run_after: dt.datetime
    lease_expires_at: dt.datetime | None
    worker: str | None
    last_error: str | None
    created_at: dt.datetime
    updated_at: dt.datetime | None


def list_jobs(
    conn: Connection, states: list[str], *, kind: str | None = None, limit: int = 50
) -> list[JobRow]:
    """Jobs in ``states``, oldest first, as plain dicts (payload decoded)."""
    query = sa.select(jobs).where(jobs.c.state.in_(states))
    if kind is not None:
        query = query.where(jobs.c.kind == kind)
    rows = conn.execute(query.order_by(jobs.c.run_after, jobs.c.id).limit(limit)).mappings()
    return [_as_dict(row) for row in rows]


def retry_failed(conn: Connection, job_id: int) -> bool:
    """Make a failed job pending again, due now, with its attempts reset; False if
    there is no failed job with that id."""
    now = models.utcnow()
    return (
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == job_id, jobs.c.state == FAILED)
            .values(
                state=PENDING,
                attempts=0,
                run_after=now,
                worker=None,
                lease_expires_at=None,
                updated_at=now,
            )
        ).rowcount
        == 1
    )


# -- the API's views (microversion 2.5: GET /v2/jobs, POST /v2/jobs/{id}/retry) -------------

SORT_COLUMNS: dict[str, sa.ColumnElement[Any]] = {
    "id": jobs.c.id,
    "run_after": jobs.c.run_after,
    "created_at": jobs.c.created_at,
    # Keyset paging needs a sort value that is never NULL: a job never updated
    # was last updated when it was created.
    "updated_at": sa.func.coalesce(jobs.c.updated_at, jobs.c.created_at),
}


def _as_dict(row: sa.RowMapping) -> JobRow:
    # The table's columns, the payload decoded: JobRow's keys.
    return cast(JobRow, {**row, "payload": json.loads(row["payload"] or "{}")})


def page_jobs(
    conn: Connection, *, states: list[str] | None, kind: str | None, page: Page | None
) -> list[JobRow]:
    """A page of jobs in ``states`` (None: any) of ``kind`` (None: any), as plain dicts
    (payload decoded); ``page.marker`` is the id of the last one seen. One more than
    ``page.limit`` comes when more remain."""
    query = sa.select(jobs)
    if states is not None:
        query = query.where(jobs.c.state.in_(states))
    if kind is not None:
        query = query.where(jobs.c.kind == kind)
    query = paginate(conn, query, jobs, page, SORT_COLUMNS, marker_column=jobs.c.id)
    return [_as_dict(row) for row in conn.execute(query).mappings()]


def get_job(conn: Connection, job_id: int) -> JobRow:
    """The job as a plain dict (payload decoded); JobNotFound if there is none."""
    row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).mappings().first()
    if row is None:
        raise exceptions.JobNotFound(ident=job_id)
    return _as_dict(row)


def retry_job(conn: Connection, job_id: int) -> JobRow:
    """``retry_failed``, then the job (pending now); JobNotFound if there is none,
    JobNotFailed if it is in another state."""
    if not retry_failed(conn, job_id):
        raise exceptions.JobNotFailed(ident=job_id, state=get_job(conn, job_id)["state"])
    return get_job(conn, job_id)


# -- claims, leases and outcomes (the conductor's workers) -----------------------------------


@dataclasses.dataclass(frozen=True)
class ClaimedJob:
    """A job a worker owns until ``lease_expires_at`` (renewed while it runs)."""

    id: int
    kind: str
    key: str | None
    payload: str
    attempts: int
    worker: str
    lease_expires_at: dt.datetime


# A claim that failed an expired job for good instead of handing it out.
LOST = "lost"


def _due(now: dt.datetime) -> sa.ColumnElement[bool]:
    other = jobs.alias("other")
    key_busy = sa.exists().where(
        other.c.key == jobs.c.key,
        other.c.id != jobs.c.id,
        other.c.state == RUNNING,
        other.c.lease_expires_at > now,
    )
    return sa.and_(
        sa.or_(
            sa.and_(jobs.c.state == PENDING, jobs.c.run_after <= now),
            sa.and_(jobs.c.state == RUNNING, jobs.c.lease_expires_at <= now),
        ),
        # NOTE: best effort: a job does not start while another job of its key
        # runs (a newer "sync host X" waits for the older one). Two jobs of one
        # key enqueued at the same instant may still run together.
        sa.or_(jobs.c.key.is_(None), ~key_busy),
    )


def has_due(conn: Connection) -> bool:
    """Whether a job is due: a cheap read, so that an idle worker takes no write lock."""
    return (
        conn.execute(sa.select(jobs.c.id).where(_due(models.utcnow())).limit(1)).first() is not None
    )


def claim(
    conn: Connection, worker: str, *, lease_seconds: float, max_attempts: int, skip_locked: bool
) -> ClaimedJob | str | None:
    """Claim the oldest due job for ``worker``: the job, None when none is due, or
    ``LOST`` when the due job was a running one whose lease expired on its last
    allowed attempt (it is failed for good instead; ``last_error`` says why)."""
    now = models.utcnow()
    query = (
        sa.select(
            jobs.c.id,
            jobs.c.kind,
            jobs.c.key,
            jobs.c.payload,
            jobs.c.state,
            jobs.c.attempts,
            jobs.c.worker,
        )
        .where(_due(now))
        .order_by(jobs.c.run_after, jobs.c.id)
        .limit(1)
    )
    if skip_locked:
        query = query.with_for_update(skip_locked=True)
    row = conn.execute(query).first()
    if row is None:
        return None
    values: dict[str, Any] = {"updated_at": now}
    guard = [jobs.c.id == row.id, jobs.c.state == row.state]
    attempts = int(row.attempts)
    if row.state == RUNNING:
        # The worker that held it died or stalled: that attempt failed.
        attempts += 1
        values["attempts"] = attempts
        values["last_error"] = (
            f"lease expired: worker {row.worker} did not finish (killed or stalled)"
        )
        guard += [jobs.c.worker == row.worker, jobs.c.lease_expires_at <= now]
        if attempts >= max_attempts:
            values.update(state=FAILED, lease_expires_at=None)
            conn.execute(sa.update(jobs).where(*guard).values(**values))
            return LOST
    lease = now + _seconds(lease_seconds)
    values.update(state=RUNNING, worker=worker, lease_expires_at=lease)
    result = conn.execute(sa.update(jobs).where(*guard).values(**values))
    # Cannot happen under the row lock / single writer; on Galera a write of another node
    # applied meanwhile aborts this transaction (a deadlock, retried) instead.
    if result.rowcount != 1:
        raise AssertionError(f"job {row.id} changed under its lock")
    return ClaimedJob(
        id=row.id,
        kind=row.kind,
        key=row.key,
        payload=row.payload,
        attempts=attempts,
        worker=worker,
        lease_expires_at=lease,
    )


def renew(conn: Connection, job_id: int, worker: str, lease_seconds: float) -> bool:
    """Extend the lease of a job ``worker`` runs; False if it no longer owns it."""
    return (
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == job_id, jobs.c.worker == worker, jobs.c.state == RUNNING)
            .values(lease_expires_at=models.utcnow() + _seconds(lease_seconds))
        ).rowcount
        == 1
    )


def record(
    conn: Connection,
    job_id: int,
    worker: str,
    state: str,
    *,
    attempts: int,
    error: str | None = None,
    delay: float | None = None,
) -> bool:
    """Record the outcome of a run (``pending`` again after ``delay`` for a retry): a
    compare-and-set on (id, worker, running), so a worker whose lease was lost and
    whose job another worker claimed since changes nothing (False)."""
    now = models.utcnow()
    values: dict[str, Any] = {
        "state": state,
        "attempts": attempts,
        "lease_expires_at": None,
        "updated_at": now,
    }
    if error is not None:
        values["last_error"] = error
    if state == PENDING:
        values["run_after"] = now + _seconds(delay or 0.0)
    return (
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == job_id, jobs.c.worker == worker, jobs.c.state == RUNNING)
            .values(**values)
        ).rowcount
        == 1
    )


# -- periodic jobs -----------------------------------------------------------------------


def periodic_job_id(kind: str) -> int:
    """The fixed (negative) id of the one job row of a periodic kind.

    NOTE: a fixed primary key makes "at most one row per periodic kind" a
    uniqueness the database enforces on every backend, even when several
    conductors start together; autoincrement ids are positive, so no clash.
    """
    return -(zlib.crc32(kind.encode()) & 0x7FFFFFFF) - 1


@dataclasses.dataclass(frozen=True)
class PeriodicRow:
    kind: str
    state: str
    updated_at: dt.datetime | None


def periodic_row(conn: Connection, job_id: int) -> PeriodicRow | None:
    row = conn.execute(
        sa.select(jobs.c.kind, jobs.c.state, jobs.c.updated_at).where(jobs.c.id == job_id)
    ).first()
    return None if row is None else PeriodicRow(row.kind, row.state, row.updated_at)


def insert_periodic(conn: Connection, job_id: int, kind: str) -> None:
    """The row of a periodic kind, due now, unless it exists (another conductor
    inserted it first)."""
    now = models.utcnow()
    columns = ("id", "kind", "key", "payload", "state", "attempts", "run_after", "created_at")
    conn.execute(
        insert_if_absent(conn.dialect.name, jobs, columns, "id"),
        {
            "id": job_id,
            "kind": kind,
            "key": f"periodic:{kind}",
            "payload": "{}",
            "state": PENDING,
            "attempts": 0,
            "run_after": now,
            "created_at": now,
        },
    )


def rearm_periodic(conn: Connection, job_id: int, row: PeriodicRow, seconds: float) -> None:
    """Make a finished periodic job pending again, due ``seconds`` after it ended
    (compare-and-set: another conductor may have re-armed it already)."""
    finished = row.updated_at or models.utcnow()
    conn.execute(
        sa.update(jobs)
        .where(jobs.c.id == job_id, jobs.c.state == row.state, jobs.c.updated_at == row.updated_at)
        .values(
            state=PENDING,
            attempts=0,
            worker=None,
            lease_expires_at=None,
            run_after=finished + _seconds(seconds),
            updated_at=models.utcnow(),
        )
    )


# -- retention -----------------------------------------------------------------------------


def _finished_before(state: str, cutoff: dt.datetime) -> sa.ColumnElement[bool]:
    # Periodic jobs (negative ids) are kept: their row is their schedule.
    return sa.and_(jobs.c.state == state, jobs.c.updated_at < cutoff, jobs.c.id > 0)


def finished_ids(conn: Connection, state: str, retention: float, limit: int) -> list[int]:
    """Up to ``limit`` ids of jobs in ``state`` older than ``retention`` seconds."""
    cutoff = models.utcnow() - _seconds(retention)
    return list(
        conn.execute(
            sa.select(jobs.c.id).where(_finished_before(state, cutoff)).limit(limit)
        ).scalars()
    )


def delete_finished(conn: Connection, ids: list[int], state: str, retention: float) -> int:
    """Delete those of ``ids`` still in ``state`` and older than ``retention``."""
    cutoff = models.utcnow() - _seconds(retention)
    return int(
        conn.execute(
            sa.delete(jobs).where(jobs.c.id.in_(ids), _finished_before(state, cutoff))
        ).rowcount
    )
