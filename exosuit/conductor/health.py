"""The ``health_recovery`` sweep: offer again the devices held back as unhealthy that have
recovered.

A device its agent reported unhealthy is held back from every offer
(exosuit/db/health.py). Its agent's next reports say when it is healthy again (a change
of health is a changed report), but a healthy host's unchanged reports write nothing, so
time passing is this job's to see: periodic (every ``[conductor]
health_sweep_interval``, 30 s; 0 disables it), it offers again, in one transaction, every
device held back by its agent whose health has been ok or warning for ``[health]
recover_after`` seconds, and queues their hosts' Placement syncs.
"""

from __future__ import annotations

import logging
from typing import Any

from exosuit.conf import ConductorSettings, HealthGroupSettings
from exosuit.db import health as health_db
from exosuit.jobs import JobContext, JobKind

__all__ = ["JOB_KINDS", "interval", "sweep"]

LOG = logging.getLogger(__name__)


def interval(conf: Any) -> float:
    """How often the sweep runs: ``[conductor] health_sweep_interval`` (0: never)."""
    return float(ConductorSettings.from_conf(conf).health_sweep_interval)


def sweep(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Offer the recovered devices again (idempotent)."""
    recover_after = float(HealthGroupSettings.from_conf(ctx.conf).recover_after)
    recovered = ctx.db.write(health_db.recover, recover_after)
    for uuid in recovered:
        LOG.info("device %s healthy for [health] recover_after: offered again", uuid)


JOB_KINDS = (JobKind(health_db.RECOVERY, sweep, interval=interval),)
