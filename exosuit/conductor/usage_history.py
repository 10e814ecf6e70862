"""The ``usage_history`` job: record the console's history, downsample it, keep it bounded.

Periodic (every half of ``[dashboard] history_resolution``, 300 s; 0 disables it), it
records the bucket of now once (each device's usage as its host last reported it, the
attach handles held and free by device model), averages the recent buckets older than
``[dashboard] history_recent`` into coarse ones, and deletes what is older than
``[dashboard] history_retention`` (exosuit/db/usage_history.py; doc/dashboard.md,
"Charts"). The agents' reports write nothing for it.
"""

from __future__ import annotations

import logging
from typing import Any

from exosuit.conf import ApiSettings, DashboardSettings
from exosuit.db import usage_history as db
from exosuit.jobs import JobContext, JobKind

__all__ = ["JOB_KINDS", "interval", "record", "retention"]

LOG = logging.getLogger(__name__)


def retention(conf: Any) -> db.Retention:
    """The history's shape, from ``[dashboard]``."""
    settings = DashboardSettings.from_conf(conf)
    return db.Retention(
        resolution=settings.history_resolution,
        recent=settings.history_recent,
        coarse_resolution=settings.history_coarse_resolution,
        retention=settings.history_retention,
    )


def interval(conf: Any) -> float:
    """How often the job runs: half of ``[dashboard] history_resolution`` (0: never), so
    that no bucket is missed although a run's interval counts from the previous end."""
    return DashboardSettings.from_conf(conf).history_resolution / 2


def record(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Record the bucket of now if no run did, then roll up and prune (idempotent)."""
    shape = retention(ctx.conf)
    if not shape.enabled:
        return
    stale_after = ApiSettings.from_conf(ctx.conf).stale_report_after
    written = ctx.db.write(db.sample, shape, stale_after=stale_after)
    rolled = 0
    while ctx.heartbeat():
        done = ctx.db.write(db.roll_up, shape)
        rolled += done
        if not done:
            break
    # Gone devices' rows are looked for once per bucket (a scan of the table).
    pruned = ctx.db.write(db.prune, shape, gone_devices=bool(written))
    if written or rolled or pruned:
        LOG.debug(
            "usage history: %d row(s) recorded, %d rolled up, %d pruned", written, rolled, pruned
        )


JOB_KINDS = (JobKind(db.JOB, record, interval=interval),)
