"""[conductor]: the job workers, their leases and retries, and the periodic jobs'
intervals (doc/conductor.md)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from exosuit.conf._values import texts

__all__ = ["ConductorSettings", "GROUP", "OPTIONS", "options"]

GROUP = "conductor"

OPTIONS: list[cfg.Opt] = [
    cfg.IntOpt(
        "workers",
        default=2,
        min=1,
        help="Worker threads of one exosuit-conductor process (`--workers` sets it). "
        "`exosuit serve` runs one.",
    ),
    cfg.FloatOpt(
        "poll_interval",
        default=2.0,
        min=0.05,
        help="Seconds an idle worker waits before looking for due jobs again.",
    ),
    cfg.IntOpt(
        "lease_seconds",
        default=60,
        min=1,
        help="A claimed job belongs to its worker for this long, renewed every third "
        "of it while the job runs; a worker that dies loses its jobs to others when "
        "the lease expires.",
    ),
    cfg.IntOpt(
        "max_attempts",
        default=5,
        min=1,
        help="Failed attempts after which a job is failed for good.",
    ),
    cfg.FloatOpt(
        "backoff_base",
        default=2.0,
        min=0,
        help="Seconds before the first retry of a failed job; doubled at each "
        "further failure (with jitter).",
    ),
    cfg.FloatOpt(
        "backoff_max", default=300.0, min=0, help="Longest wait before retrying a failed job."
    ),
    cfg.IntOpt(
        "reconcile_interval",
        default=300,
        min=0,
        help="Seconds between two Placement drift repairs (the periodic "
        "placement_reconcile job, run by one conductor at a time); 0 disables it.",
    ),
    cfg.IntOpt(
        "program_sweep_interval",
        default=30,
        min=0,
        help="Seconds between two looks for programs past [DEFAULT] program_timeout (the "
        "periodic program_timeout job, which fails them); 0 disables it (a program its "
        "host never finishes then keeps its deployable reserved).",
    ),
    cfg.IntOpt(
        "claim_sweep_interval",
        default=30,
        min=0,
        help="Seconds between two looks for standalone claims past their expires_at (the "
        "periodic claim_expiry job, which releases them, and purges released claims older "
        "than [claims] retention); 0 disables it (an expired claim then holds its devices "
        "until it is released).",
    ),
    cfg.IntOpt(
        "health_sweep_interval",
        default=30,
        min=0,
        help="Seconds between two looks for devices held back as unhealthy that have been "
        "healthy for [health] recover_after (the periodic health_recovery job, which offers "
        "them again); 0 disables it (only an operator's clear then offers them again).",
    ),
    cfg.IntOpt(
        "audit_sweep_interval",
        default=3600,
        min=0,
        help="Seconds between two audit sweeps (the periodic audit_sweep job: deletes the "
        "audit records older than [audit] retention and publishes any notification still "
        "pending); 0 disables it.",
    ),
    cfg.IntOpt(
        "succeeded_retention",
        default=86400,
        min=0,
        help="Seconds a succeeded job is kept (for `exosuit-conductor status`) "
        "before it is deleted; 0 keeps succeeded jobs.",
    ),
    cfg.IntOpt(
        "failed_retention",
        default=2592000,
        min=0,
        help="Seconds a job failed for good is kept before it is deleted; 0 keeps "
        "failed jobs until an operator retries or deletes them.",
    ),
    cfg.ListOpt(
        "handler_modules",
        default=[],
        help="Extra Python modules a conductor imports at start-up: out-of-tree job "
        "handlers, services or periodic jobs.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class ConductorSettings:
    """The ``[conductor]`` options."""

    workers: int
    poll_interval: float
    lease_seconds: int
    max_attempts: int
    backoff_base: float
    backoff_max: float
    reconcile_interval: int
    program_sweep_interval: int
    claim_sweep_interval: int
    health_sweep_interval: int
    audit_sweep_interval: int
    succeeded_retention: int
    failed_retention: int
    handler_modules: tuple[str, ...]

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> ConductorSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.conductor
        return cls(
            workers=int(group.workers),
            poll_interval=float(group.poll_interval),
            lease_seconds=int(group.lease_seconds),
            max_attempts=int(group.max_attempts),
            backoff_base=float(group.backoff_base),
            backoff_max=float(group.backoff_max),
            reconcile_interval=int(group.reconcile_interval),
            program_sweep_interval=int(group.program_sweep_interval),
            claim_sweep_interval=int(group.claim_sweep_interval),
            health_sweep_interval=int(group.health_sweep_interval),
            audit_sweep_interval=int(group.audit_sweep_interval),
            succeeded_retention=int(group.succeeded_retention),
            failed_retention=int(group.failed_retention),
            handler_modules=texts(group.handler_modules),
        )
