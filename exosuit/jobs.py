"""What a job kind is: the contract between an integration and the conductor.

An integration (exosuit/placement/sync.py, exosuit/nova/notify.py, or an
out-of-tree module named in ``[conductor] handler_modules``) declares, as plain
module attributes:

* ``JOB_KINDS``: a sequence of ``JobKind`` — a name, the handler that runs one
  job of that kind, and for a periodic kind its interval;
* ``SERVICES``: a sequence of ``Service`` — outbound clients built from the
  configuration, handed to handlers as ``ctx.services[name]``.

The conductor (exosuit/conductor/kinds.py) imports those modules and reads the
attributes; nothing registers itself on import. Handlers are plain functions
``handler(ctx, payload)``. They must be idempotent: a job may run again after a
worker dies in the middle of it. Raising ``RetryLater`` reschedules the job
after the given delay without counting as a failure; any other exception is a
failed attempt (retried with backoff until ``[conductor] max_attempts``).

The job table itself (enqueue in the caller's transaction, claims, leases) is
exosuit/db/jobs.py. See doc/conductor.md.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Handler", "Interval", "JobContext", "JobKind", "RetryLater", "Service"]


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


Handler = Callable[[JobContext, dict[str, Any]], None]
# Seconds between two runs of a periodic kind: a number, or a function of the conf
# (0 or less: disabled).
Interval = float | Callable[[Any], float]


@dataclasses.dataclass(frozen=True)
class JobKind:
    """One kind of job: its name (the ``kind`` column), its handler and, for a
    periodic kind, the interval between two runs (counted from the end of the
    previous one; at most one run at a time across all conductors)."""

    name: str
    handler: Handler
    interval: Interval | None = None


@dataclasses.dataclass(frozen=True)
class Service:
    """An outbound client the handlers share: ``factory(conf)`` is called once per
    conductor process, the first time a handler reads ``ctx.services[name]``; its
    result must be safe to share between the worker threads of a process."""

    name: str
    factory: Callable[[Any], Any]
