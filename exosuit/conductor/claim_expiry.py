"""The ``claim_expiry`` sweep: release the standalone claims past their ``expires_at``.

A claim may carry an expiry (``expires_in``, renewed with ``POST …/renew``) so that a
caller that crashed does not hold its devices for ever (doc/standalone.md). Periodic
(every ``[conductor] claim_sweep_interval``, 30 s; 0 disables it), it releases every
live claim past its expiry, one transaction each (a claim renewed or released
meanwhile is left alone: exosuit/db/claims.py ``release_expired``), and deletes the
claims released more than ``[claims] retention`` seconds ago.
"""

from __future__ import annotations

import logging
from typing import Any

from exosuit.conf import ClaimsSettings, ConductorSettings
from exosuit.db import claims as claims_db
from exosuit.jobs import JobContext, JobKind

__all__ = ["JOB_KINDS", "interval", "sweep"]

LOG = logging.getLogger(__name__)


def interval(conf: Any) -> float:
    """How often the sweep runs: ``[conductor] claim_sweep_interval`` (0: never)."""
    return float(ConductorSettings.from_conf(conf).claim_sweep_interval)


def sweep(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Release the expired claims, then purge old released ones (idempotent)."""
    for uuid in ctx.db.read(claims_db.expired):
        if not ctx.heartbeat():
            return
        if ctx.db.write(claims_db.release_expired, uuid):
            LOG.info("claim %s expired: released", uuid)
    retention = float(ClaimsSettings.from_conf(ctx.conf).retention)
    purged = ctx.db.write(claims_db.purge_released, retention)
    if purged:
        LOG.info("%d released claim(s) purged", purged)


JOB_KINDS = (JobKind(claims_db.EXPIRY, sweep, interval=interval),)
