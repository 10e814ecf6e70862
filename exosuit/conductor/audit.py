"""The audit trail's jobs: publish its notifications, purge its old records.

``audit_publish`` (queued by the transaction that recorded a change, when notifications
are on: exosuit/db/audit.py) sends every pending record to the message bus, oldest
first, and clears each one's mark once the bus took it; a bus that is down fails the
attempt, which is retried with backoff, and the records stay pending. A worker that
dies between sending and clearing sends those again: a notification may come twice,
never not at all (consumers recognise a repeat by its payload's ``id``).

``audit_sweep`` (periodic, every ``[conductor] audit_sweep_interval``) deletes the
records older than ``[audit] retention`` (0 keeps them) but those still to be published,
and queues ``audit_publish`` again while any record is pending (one whose job ran before
its transaction committed: exosuit/db/audit.py ``enqueue_publish``). doc/audit.md.
"""

from __future__ import annotations

import logging
from typing import Any

from exosuit import notifications
from exosuit.conf import AuditSettings, ConductorSettings
from exosuit.db import audit as audit_db
from exosuit.jobs import JobContext, JobKind, Service

__all__ = ["BATCH", "JOB_KINDS", "SERVICES", "interval", "publish", "sweep"]

LOG = logging.getLogger(__name__)

# Records read (and marks cleared) at a time.
BATCH = 100
# Records deleted per transaction by the sweep.
PURGE_BATCH = 1000


def interval(conf: Any) -> float:
    """How often the sweep runs: ``[conductor] audit_sweep_interval`` (0: never)."""
    return float(ConductorSettings.from_conf(conf).audit_sweep_interval)


def publish(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Publish the pending records, oldest first, until none is left."""
    publisher: notifications.Publisher = ctx.services[notifications.SERVICE]
    while ctx.heartbeat():
        batch = ctx.db.read(audit_db.pending, limit=BATCH)
        sent: list[int] = []
        try:
            for event in batch:
                publisher.publish(audit_db.event_type(event), notifications.payload_of(event))
                sent.append(event["id"])
        finally:
            if sent:
                ctx.db.write(audit_db.mark_published, sent)
        if sent:
            LOG.debug("%d audit notification(s) published", len(sent))
        if len(batch) < BATCH:
            return


def sweep(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Purge the records past ``[audit] retention``; queue a publish while any is pending."""
    retention = float(AuditSettings.from_conf(ctx.conf).retention)
    purged = 0
    while retention > 0 and ctx.heartbeat():
        deleted = ctx.db.write(audit_db.purge, retention, limit=PURGE_BATCH)
        purged += deleted
        if deleted < PURGE_BATCH:
            break
    if purged:
        LOG.info("%d audit record(s) older than [audit] retention purged", purged)
    if ctx.db.read(audit_db.has_pending):
        ctx.db.write(audit_db.enqueue_publish)


JOB_KINDS = (
    JobKind(audit_db.PUBLISH, publish),
    JobKind(audit_db.SWEEP, sweep, interval=interval),
)
SERVICES = (Service(notifications.SERVICE, notifications.Publisher),)
