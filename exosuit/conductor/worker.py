"""Conductor workers: claim due jobs, run their handlers, record the outcomes.

A worker claims one job in one short write transaction: the oldest due job
(pending with ``run_after`` reached, or running with an expired lease) is
locked with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and MariaDB, so that
concurrent claimers each take a different row without waiting, or read and
updated under SQLite's single writer (``BEGIN IMMEDIATE``). The row becomes
``running``, owned by the worker's id until ``lease_expires_at``, and the
transaction commits before the handler starts: no lock is held while a job runs.

While the handler runs, the conductor's heartbeat thread renews the lease every
third of ``[conductor] lease_seconds``. A worker that dies stops renewing, and
its job is claimed again when the lease expires (that counts as a failed
attempt, so a job that kills its worker every time ends up failed).

The outcome is recorded by one compare-and-set on (id, worker, running): a
worker that stalled past its lease, whose job another worker claimed since,
changes nothing and logs that its outcome was discarded.

``Conductor`` runs the worker threads of one process, the heartbeat and the
housekeeping thread: periodic jobs (``jobs.PERIODIC``) and the deletion of old
finished jobs. See doc/conductor.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from oslo_config import cfg

from exosuit import exceptions
from exosuit.backoff import backoff_delay
from exosuit.conductor import kinds
from exosuit.conf import ConductorSettings
from exosuit.db import audit
from exosuit.db import jobs as jobs_db
from exosuit.db.api import Database
from exosuit.db.jobs import FAILED, PENDING, SUCCEEDED, ClaimedJob
from exosuit.jobs import Handler, Interval, JobContext, RetryLater

__all__ = [
    "ClaimedJob",
    "Conductor",
    "Outcome",
    "Services",
    "Outage",
    "Settings",
    "Worker",
    "purge_finished",
    "schedule_periodic",
]

LOG = logging.getLogger(__name__)


class Outage:
    """A database outage as one loop sees it: said once when it starts (WARNING) and once
    when it ends (INFO), each failure in between only at DEBUG; ``failures`` counts them
    for the backoff."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failures = 0
        self._since: float | None = None

    def failed(self, error: Exception) -> None:
        self.failures += 1
        if self._since is None:
            self._since = time.monotonic()
            LOG.warning("%s: database unavailable: %s (retrying)", self.what, error)
        else:
            LOG.debug("%s: database still unavailable: %s", self.what, error)

    def ended(self) -> None:
        if self._since is not None:
            LOG.info(
                "%s: database available again after %.0f s",
                self.what,
                time.monotonic() - self._since,
            )
        self._since = None
        self.failures = 0

    def delay(self, poll: float) -> float:
        """How long to wait before the next try: ``poll``, doubled with each failure in a
        row, at most 64 times it or a minute."""
        return backoff_delay(self.failures + 1, poll, min(60.0, 64 * poll), jitter=False)


# Longest last_error kept in the table (the full traceback goes to the log).
MAX_ERROR_LENGTH = 2000
# Seconds between two deletions of old finished jobs by one conductor.
PURGE_INTERVAL = 60.0
PURGE_BATCH = 500


@dataclasses.dataclass(frozen=True)
class Settings:
    """The [conductor] options a worker uses, read once."""

    poll_interval: float = 2.0
    lease_seconds: float = 60.0
    max_attempts: int = 5
    backoff_base: float = 2.0
    backoff_max: float = 300.0
    succeeded_retention: float = 86400.0
    failed_retention: float = 2592000.0

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Settings:
        group = ConductorSettings.from_conf(conf)
        return cls(
            poll_interval=group.poll_interval,
            lease_seconds=group.lease_seconds,
            max_attempts=group.max_attempts,
            backoff_base=group.backoff_base,
            backoff_max=group.backoff_max,
            succeeded_retention=group.succeeded_retention,
            failed_retention=group.failed_retention,
        )


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What became of one run: ``state`` is the job's new state (``pending`` for a
    retry); ``recorded`` is False when the lease was lost and nothing was written."""

    job_id: int
    kind: str
    state: str
    recorded: bool
    attempts: int
    error: str | None = None
    retry_in: float | None = None


class Services(dict[str, Any]):
    """``ctx.services``: each registered service is built from the configuration the
    first time a handler asks for it, then shared by the process's workers.

    A factory that raises makes that job attempt fail (and retry); a name nobody
    registered is a KeyError.
    """

    def __init__(
        self, conf: cfg.ConfigOpts, factories: Mapping[str, Callable[[Any], Any]] | None = None
    ) -> None:
        super().__init__()
        self._conf = conf
        self._factories = kinds.load(conf).services if factories is None else factories
        self._lock = threading.Lock()

    def __missing__(self, name: str) -> Any:
        factory = self._factories[name]
        with self._lock:
            if not dict.__contains__(self, name):
                self[name] = factory(self._conf)
            return dict.__getitem__(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default


def _describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR_LENGTH else text[: MAX_ERROR_LENGTH - 1] + "…"


class Worker:
    """One worker: claims one job at a time, runs it in the calling thread.

    ``id`` is unique per worker object (host, pid, name and a random suffix), so
    that outcomes are compared against the exact worker that claimed the job.
    Without a ``Conductor`` nothing renews the leases in the background: a handler
    that runs longer than the lease must call ``ctx.heartbeat()``.
    """

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        db: Database,
        *,
        name: str = "worker",
        settings: Settings | None = None,
        handlers: Mapping[str, Handler] | None = None,
        services: Services | None = None,
    ) -> None:
        self.conf = conf
        self.db = db
        self.settings = settings or Settings.from_conf(conf)
        if handlers is None or services is None:
            registry = kinds.load(conf)
            handlers = registry.handlers if handlers is None else handlers
            services = Services(conf, registry.services) if services is None else services
        self.handlers = handlers
        self.services = services
        self.name = name
        self.id = f"{socket.gethostname()}:{os.getpid()}:{name}:{uuid.uuid4().hex[:8]}"
        self._current: tuple[ClaimedJob, JobContext] | None = None
        self._current_lock = threading.Lock()

    # Claiming

    def claim(self) -> ClaimedJob | None:
        """Claim the oldest due job, or return None when none is due."""
        while self.db.read(jobs_db.has_due):
            claimed = self.db.write(
                jobs_db.claim,
                self.id,
                lease_seconds=self.settings.lease_seconds,
                max_attempts=self.settings.max_attempts,
                skip_locked=self.db.supports_skip_locked,
            )
            if isinstance(claimed, ClaimedJob) or claimed is None:
                return claimed
            LOG.warning(
                "a job whose worker died failed for good after %d attempts "
                "(exosuit-conductor status shows it)",
                self.settings.max_attempts,
            )
        return None

    # Leases

    def renew(self, job: ClaimedJob) -> bool:
        """Extend the lease of ``job``; False if this worker no longer owns it."""
        return self.db.write(jobs_db.renew, job.id, self.id, self.settings.lease_seconds)

    def heartbeat(self) -> None:
        """Renew the lease of the job running now, if any (the conductor calls this)."""
        # NOTE: the lock is held across the renewal so that ``execute`` cannot record
        # the outcome in between (the renewal would then find the job finished and
        # report a lost lease that was not lost).
        with self._current_lock:
            current = self._current
            if current is None or current[1].lease_lost.is_set():
                return
            job, ctx = current
            try:
                owned = self.renew(job)
            except exceptions.DatabaseUnavailable as error:
                LOG.warning("job %s %s: could not renew its lease: %s", job.id, job.kind, error)
                return
        if not owned:
            ctx.lease_lost.set()
            LOG.warning(
                "job %s %s: lease lost by %s; another worker may run it now",
                job.id,
                job.kind,
                self.id,
            )

    # Running

    def _context(self, job: ClaimedJob) -> JobContext:
        ctx = JobContext(
            self.conf, self.db, self.services, job_id=job.id, kind=job.kind, attempts=job.attempts
        )

        def renew() -> bool:
            if not self.renew(job):
                ctx.lease_lost.set()
            return not ctx.lease_lost.is_set()

        ctx.renew = renew
        return ctx

    def execute(self, job: ClaimedJob) -> Outcome:
        """Run the handler of a claimed job and record the outcome (compare-and-set)."""
        ctx = self._context(job)
        with self._current_lock:
            self._current = (job, ctx)
        started = time.monotonic()
        handler = self.handlers.get(job.kind)
        if handler is None:
            self._release()
            outcome = self._record(
                job,
                FAILED,
                error=(
                    f"no handler for job kind {job.kind!r} in this conductor (is the module "
                    "that declares it in exosuit/conductor/kinds.py IN_TREE or [conductor] "
                    "handler_modules?)"
                ),
                attempts=job.attempts + 1,
            )
        else:
            outcome = self._run(job, ctx, handler)
        self._log(job, outcome, time.monotonic() - started)
        return outcome

    def _release(self) -> None:
        """The handler is done: stop renewing the lease (before recording the outcome)."""
        with self._current_lock:
            self._current = None

    def _run(self, job: ClaimedJob, ctx: JobContext, handler: Handler) -> Outcome:
        try:
            try:
                # The changes a job makes are the conductor's (exosuit/db/audit.py).
                with audit.acting(audit.Actor(audit.CONDUCTOR, request_id=f"job-{job.id}")):
                    handler(ctx, json.loads(job.payload))
            finally:
                self._release()
        except RetryLater as later:
            return self._record(
                job,
                PENDING,
                error=f"retry later: {later}",
                attempts=job.attempts,
                delay=later.delay,
            )
        except Exception as error:
            LOG.debug("job %s %s raised", job.id, job.kind, exc_info=True)
            attempts = job.attempts + 1
            if attempts >= self.settings.max_attempts:
                return self._record(job, FAILED, error=_describe(error), attempts=attempts)
            delay = backoff_delay(attempts, self.settings.backoff_base, self.settings.backoff_max)
            return self._record(
                job, PENDING, error=_describe(error), attempts=attempts, delay=delay
            )
        return self._record(job, SUCCEEDED, attempts=job.attempts)

    def _record(
        self,
        job: ClaimedJob,
        state: str,
        *,
        attempts: int,
        error: str | None = None,
        delay: float | None = None,
    ) -> Outcome:
        recorded = self.db.write(
            jobs_db.record, job.id, self.id, state, attempts=attempts, error=error, delay=delay
        )
        return Outcome(
            job_id=job.id,
            kind=job.kind,
            state=state,
            recorded=recorded,
            attempts=attempts,
            error=error,
            retry_in=delay,
        )

    def _log(self, job: ClaimedJob, outcome: Outcome, elapsed: float) -> None:
        name = f"job {job.id} {job.kind}" + (f" [{job.key}]" if job.key else "")
        if not outcome.recorded:
            LOG.warning(
                "%s: outcome %s discarded after %.2f s: the lease was lost and the job "
                "belongs to another worker now",
                name,
                outcome.state,
                elapsed,
            )
        elif outcome.state == SUCCEEDED:
            LOG.info("%s succeeded in %.2f s", name, elapsed)
        elif outcome.state == FAILED:
            LOG.warning(
                "%s failed for good after %d attempts: %s", name, outcome.attempts, outcome.error
            )
        elif outcome.attempts == job.attempts:  # RetryLater
            LOG.info(
                "%s will run again in %.1f s (%s)", name, outcome.retry_in or 0.0, outcome.error
            )
        else:
            LOG.warning(
                "%s failed (attempt %d of %d), retry in %.1f s: %s",
                name,
                outcome.attempts,
                self.settings.max_attempts,
                outcome.retry_in or 0.0,
                outcome.error,
            )

    def run_once(self) -> Outcome | None:
        """Claim and run one due job; None when no job is due."""
        job = self.claim()
        return None if job is None else self.execute(job)

    def run(self, stop: threading.Event) -> None:
        """Run jobs until ``stop`` is set; the job in hand is finished first."""
        outage = Outage(f"worker {self.id}")
        while not stop.is_set():
            try:
                outcome = self.run_once()
                outage.ended()
            except exceptions.DatabaseUnavailable as error:
                outage.failed(error)
                stop.wait(outage.delay(self.settings.poll_interval))
                continue
            except Exception:
                LOG.exception("worker %s: unexpected error", self.id)
                stop.wait(self.settings.poll_interval)
                continue
            if outcome is None:  # idle: poll again later; after a job, look again at once
                stop.wait(self.settings.poll_interval)


def schedule_periodic(
    db: Database,
    conf: cfg.ConfigOpts,
    periodic: Mapping[str, Interval],
    handlers: Mapping[str, Handler],
) -> None:
    """Make sure each periodic kind with a handler has its one job row, due
    ``interval`` seconds after its previous run ended.

    Every conductor calls this; the fixed id of the row (``periodic_job_id``)
    and compare-and-set updates keep it one job across all of them.
    """
    for kind, interval in periodic.items():
        if kind not in handlers:
            continue
        seconds = interval(conf) if callable(interval) else interval
        if not seconds or seconds <= 0:
            continue
        job_id = jobs_db.periodic_job_id(kind)
        row = db.read(jobs_db.periodic_row, job_id)
        if row is None:
            db.write(jobs_db.insert_periodic, job_id, kind)
        elif row.kind != kind:
            LOG.error("periodic job %s: id %s is taken by kind %s", kind, job_id, row.kind)
        elif row.state in (SUCCEEDED, FAILED):
            db.write(jobs_db.rearm_periodic, job_id, row, seconds)


def purge_finished(db: Database, settings: Settings) -> int:
    """Delete succeeded and failed jobs older than their retention (0: keep them).

    Periodic jobs (negative ids) are kept: their row is their schedule.
    """
    deleted = 0
    for state, retention in (
        (SUCCEEDED, settings.succeeded_retention),
        (FAILED, settings.failed_retention),
    ):
        if not retention:
            continue
        while True:
            ids = db.read(jobs_db.finished_ids, state, retention, PURGE_BATCH)
            if not ids:
                break
            deleted += db.write(jobs_db.delete_finished, ids, state, retention)
            if len(ids) < PURGE_BATCH:
                break
    if deleted:
        LOG.info("deleted %d finished jobs past their retention", deleted)
    return deleted


class Conductor:
    """The workers of one process, with their lease heartbeat and housekeeping.

    ``start()`` starts ``workers`` worker threads, a heartbeat thread (renews the
    leases of running jobs every third of the lease) and a housekeeping thread
    (periodic jobs every poll interval, deletion of old jobs every minute).
    ``stop()`` lets each worker finish the job in hand, then returns.
    """

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        db: Database,
        *,
        workers: int | None = None,
        settings: Settings | None = None,
        registry: kinds.Registry | None = None,
        periodic: Mapping[str, Interval] | None = None,
        name: str = "conductor",
    ) -> None:
        registry = kinds.load(conf) if registry is None else registry
        self.conf = conf
        self.db = db
        self.settings = settings or Settings.from_conf(conf)
        self.handlers = registry.handlers
        self.periodic = registry.periodic if periodic is None else periodic
        self.services = Services(conf, registry.services)
        count = ConductorSettings.from_conf(conf).workers if workers is None else workers
        self.workers = [
            Worker(
                conf,
                db,
                name=f"{name}-{i}",
                settings=self.settings,
                handlers=self.handlers,
                services=self.services,
            )
            for i in range(count)
        ]
        self.name = name
        self._stop = threading.Event()
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def finished(self) -> bool:
        """True once every worker thread has ended (after ``stop``)."""
        return self._done.is_set()

    def start(self) -> None:
        for worker in self.workers:
            thread = threading.Thread(
                target=worker.run, args=(self._stop,), name=worker.name, daemon=True
            )
            self._threads.append(thread)
        for thread in self._threads:
            thread.start()
        for target, suffix in ((self._heartbeat, "heartbeat"), (self._housekeeping, "house")):
            thread = threading.Thread(target=target, name=f"{self.name}-{suffix}", daemon=True)
            thread.start()
            self._threads.append(thread)
        LOG.info(
            "%s: %d worker(s) started (lease %s s, poll every %s s)",
            self.name,
            len(self.workers),
            self.settings.lease_seconds,
            self.settings.poll_interval,
        )

    def request_stop(self) -> None:
        """Claim no more jobs; workers finish the job in hand."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker threads; True when all have finished."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads[: len(self.workers)]:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        finished = not any(t.is_alive() for t in self._threads[: len(self.workers)])
        if finished:
            self._done.set()
            for thread in self._threads[len(self.workers) :]:
                thread.join(5)
        return finished

    def stop(self, timeout: float | None = None) -> bool:
        """Stop and wait up to ``timeout`` seconds; False if a job was still running
        (its lease then expires and another worker runs it again)."""
        self.request_stop()
        return self.join(timeout)

    def _heartbeat(self) -> None:
        interval = self.settings.lease_seconds / 3
        while not self._done.wait(interval):
            for worker in self.workers:
                try:
                    worker.heartbeat()
                except Exception:
                    LOG.exception("heartbeat of %s failed", worker.id)

    def _housekeeping(self) -> None:
        last_purge = None
        outage = Outage(f"{self.name} housekeeping")
        while not self._stop.is_set():
            wait = self.settings.poll_interval
            try:
                schedule_periodic(self.db, self.conf, self.periodic, self.handlers)
                if last_purge is None or time.monotonic() - last_purge >= PURGE_INTERVAL:
                    last_purge = time.monotonic()
                    purge_finished(self.db, self.settings)
                outage.ended()
            except exceptions.DatabaseUnavailable as error:
                outage.failed(error)
                wait = outage.delay(wait)
            except Exception:
                LOG.exception("%s housekeeping failed", self.name)
            self._stop.wait(wait)
