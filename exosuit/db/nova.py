"""The ``accelerator-request-bound`` events Nova waits for, queued as jobs.

A *bind round* is what one PATCH binds for one instance. When it resolves
(each of its ARQs Bound or BindFailed), Nova gets one event per ARQ, all in one
``POST /os-server-external-events``. The round's ``nova_notify`` job (handler
in exosuit/nova/notify.py) is queued by ``enqueue_round`` in the very
transaction of the PATCH, so that neither the binds nor their notification
can be lost without the other:

* every ARQ resolved in the PATCH (no host-side work): the job is due at once;
* some ARQs wait for work on their host (BindStarted): the job is due at
  ``[DEFAULT] bind_timeout``, when those still waiting become BindFailed. Each
  one that resolves earlier (the agent's report, an unbind, a delete) records
  its status in the job, in its own transaction (``record_resolution``); the
  last one makes the job due at once.

The job's payload holds each ARQ's status as it resolved, in the order of the
PATCH: what Nova is told is the resolution, even if the ARQs are deleted by the
time the job runs (Nova deletes the ARQs of a failed bind at once).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid as uuidlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import jobs as jobs_db
from exosuit.db import models

__all__ = ["COMPLETED", "FAILED", "NOTIFY", "enqueue_round", "record_resolution"]

# The job kind that tells Nova how a bind round ended.
NOTIFY = "nova_notify"
# An ARQ's status in its event.
COMPLETED = "completed"
FAILED = "failed"

jobs = models.jobs


def _key_prefix(instance_uuid: str) -> str:
    return f"nova-notify:{instance_uuid}:"


def enqueue_round(
    conn: Connection,
    instance_uuid: str,
    statuses: list[tuple[str, str | None]],
    *,
    bind_timeout: float,
) -> int:
    """Queue the notification of one bind round, in the bind's transaction.

    ``statuses``: (ARQ uuid, ``completed`` | ``failed`` | None while its host-side
    work runs), in the order of the PATCH. Each round has its own job (its key
    names the instance and the round), so rounds never absorb each other.
    """
    waiting = any(status is None for _, status in statuses)
    deadline = None
    if waiting:
        deadline = (models.utcnow() + dt.timedelta(seconds=bind_timeout)).isoformat()
    payload = {
        "instance_uuid": instance_uuid,
        "arqs": [{"uuid": u, "status": s} for u, s in statuses],
        "deadline": deadline,
    }
    return jobs_db.enqueue(
        conn,
        NOTIFY,
        payload,
        key=_key_prefix(instance_uuid) + uuidlib.uuid4().hex,
        delay=bind_timeout if waiting else 0.0,
        coalesce=False,
    )


def record_resolution(
    conn: Connection, instance_uuid: str | None, arq_uuid: str, status: str
) -> bool:
    """A waiting ARQ of a round resolved outside the PATCH: record its status in the
    round's pending job, in the caller's transaction; with nothing left waiting, the
    job is due at once. False when no pending job waits for it (the job is running
    at its deadline: it reads the ARQ's state itself)."""
    if instance_uuid is None:
        return False
    rows = conn.execute(
        sa.select(jobs.c.id, jobs.c.payload)
        .where(
            jobs.c.kind == NOTIFY,
            jobs.c.state == jobs_db.PENDING,
            jobs.c.key.like(_key_prefix(instance_uuid) + "%"),
            jobs.c.payload.like(f"%{arq_uuid}%"),
        )
        .with_for_update()
    ).all()
    for row in rows:
        payload = json.loads(row.payload)
        entry = next((a for a in payload["arqs"] if a["uuid"] == arq_uuid), None)
        if entry is None or entry["status"] is not None:
            continue
        entry["status"] = status
        values: dict[str, Any] = {
            "payload": json.dumps(payload, sort_keys=True),
            "updated_at": models.utcnow(),
        }
        if all(a["status"] is not None for a in payload["arqs"]):
            values["run_after"] = models.utcnow()
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == row.id, jobs.c.state == jobs_db.PENDING)
            .values(**values)
        )
        return True
    return False
