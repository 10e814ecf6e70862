"""Job handlers for the conductor tests (kinds ``test.*``).

Imported by tests/conductor/test_jobs.py and, through ``[conductor]
handler_modules``, by the exosuit-conductor processes those tests start. The
handlers that take a ``dir`` leave evidence of every run of job ``n`` there:
``start``/``end`` lines in ``runs.log`` (one ``write()`` each, in append mode,
so lines from several processes never mix) and a marker file ``<n>.running``
that exists only while a run is in progress. The marker is created with
O_EXCL: a second run of the same job while the first is still running writes
an ``overlap`` line, whichever process it is in.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

from exosuit.db import models
from exosuit.jobs import JobKind, RetryLater, Service

# What a conductor with ``[conductor] handler_modules = tests.conductor.handlers`` runs.
JOB_KINDS: list[JobKind] = []
SERVICES: list[Service] = []


def register(kind: str):
    def decorator(func):
        JOB_KINDS.append(JobKind(kind, func))
        return func

    return decorator


def register_service(name: str):
    def decorator(factory):
        SERVICES.append(Service(name, factory))
        return factory

    return decorator


LOG_NAME = "runs.log"

# In-process gates for test.block_first (the late-finisher test): name -> Event.
GATES: dict[str, threading.Event] = {}

# test.periodic records (start, end) wall-clock pairs here; ACTIVE counts runs in progress.
PERIODIC_RUNS: list[tuple[float, float]] = []
PERIODIC_OVERLAPS: list[float] = []
_periodic_lock = threading.Lock()
_periodic_active = [0]

# How many times the test.echo service was built.
ECHO_BUILDS: list[str] = []


def append(folder: Path, line: str) -> None:
    fd = os.open(folder / LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_log(folder: Path) -> list[list[str]]:
    path = folder / LOG_NAME
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines()]


@contextlib.contextmanager
def _recorded(ctx, payload):
    folder, n = Path(payload["dir"]), payload["n"]
    marker = folder / f"{n}.running"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        append(folder, f"overlap {n} {os.getpid()}")
    append(
        folder,
        f"start {n} {os.getpid()} {threading.current_thread().name} "
        f"{models.utcnow().isoformat()} {ctx.job_id}",
    )
    try:
        yield folder
    finally:
        append(
            folder,
            f"end {n} {os.getpid()} {threading.current_thread().name} "
            f"{models.utcnow().isoformat()}",
        )
        marker.unlink(missing_ok=True)


@register("test.record")
def record(ctx, payload):
    """Record the run; sleep ``sleep`` seconds in the middle."""
    with _recorded(ctx, payload):
        time.sleep(payload.get("sleep", 0))


@register("test.flaky")
def flaky(ctx, payload):
    """Fail the first ``failures`` attempts, then succeed."""
    with _recorded(ctx, payload):
        if ctx.attempts < payload["failures"]:
            raise RuntimeError(f"failure {ctx.attempts + 1}")


@register("test.later")
def later(ctx, payload):
    raise RetryLater(payload["reason"], payload["delay"])


@register("test.block_first")
def block_first(ctx, payload):
    """The first run blocks (on the gate named ``gate`` if any, else ``block`` seconds)
    and then succeeds; any later run succeeds at once, or fails if ``then_fail``."""
    with _recorded(ctx, payload) as folder:
        try:
            os.close(os.open(folder / "first", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            if payload.get("then_fail"):
                raise RuntimeError("the second run failed") from None
            return
        if "gate" in payload:
            GATES[payload["gate"]].wait(30)
        else:
            time.sleep(payload["block"])
        append(folder, f"owned {ctx.job_id} {ctx.heartbeat()}")


@register("test.periodic")
def periodic(ctx, payload):
    started = time.time()
    with _periodic_lock:
        _periodic_active[0] += 1
        if _periodic_active[0] > 1:
            PERIODIC_OVERLAPS.append(started)
    try:
        time.sleep(0.1)
    finally:
        with _periodic_lock:
            _periodic_active[0] -= 1
            PERIODIC_RUNS.append((started, time.time()))


class EchoService:
    """A stand-in outbound client, built from the configuration."""

    def __init__(self, host: str) -> None:
        self.host = host


@register_service("test.echo")
def _echo_factory(conf) -> EchoService:
    ECHO_BUILDS.append(conf.host)
    return EchoService(conf.host)


@register("test.service")
def use_service(ctx, payload):
    """Record which service object ``payload['service']`` resolved to."""
    service = ctx.services[payload["service"]]
    append(Path(payload["dir"]), f"service {payload['n']} {id(service)} {service.host}")
