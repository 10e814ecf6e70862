"""The ``program_timeout`` sweep: fail the programs their host did not finish in time.

A program is desired state that the host's agent reconciles (doc/programming.md); an
agent that is down, or stuck, would otherwise leave its deployable reserved and
unbindable for ever. Periodic (every ``[conductor] program_sweep_interval``, 30 s), it
fails every running program older than its bound: an operator's
``[DEFAULT] program_timeout``; a bind's the longer of that and ``bind_timeout`` (its
bind's deadline normally fails it first: exosuit/nova/notify.py). A program failed
while the agent may have been loading the device disables the device, with the
reason (exosuit/db/programs.py ``fail``); a bind waiting for it is BindFailed and
Nova told.
"""

from __future__ import annotations

import logging
from typing import Any

from exosuit.conf import ConductorSettings, DefaultSettings
from exosuit.db import arqs as arqs_db
from exosuit.db import programs as programs_db
from exosuit.jobs import JobContext, JobKind

__all__ = ["JOB_KINDS", "interval", "sweep"]

LOG = logging.getLogger(__name__)


def interval(conf: Any) -> float:
    """How often the sweep runs: ``[conductor] program_sweep_interval`` (0: never)."""
    return float(ConductorSettings.from_conf(conf).program_sweep_interval)


def sweep(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Fail the expired programs, one transaction each (idempotent: an ended program
    is left alone)."""
    timeouts = DefaultSettings.from_conf(ctx.conf)
    expired = ctx.db.read(
        programs_db.expired,
        program_timeout=timeouts.program_timeout,
        bind_timeout=timeouts.bind_timeout,
    )
    for uuid in expired:
        if not ctx.heartbeat():
            return
        reason = (
            "timed out: its host did not finish it within [DEFAULT] program_timeout "
            f"({timeouts.program_timeout} s)"
        )
        if ctx.db.write(arqs_db.time_out_program, uuid, reason):
            LOG.warning("program %s failed: %s", uuid, reason)


JOB_KINDS = (JobKind(programs_db.SWEEP, sweep, interval=interval),)
