"""The durable job table and its workers, on SQLite, PostgreSQL and MariaDB.

Real databases, real threads and real ``exosuit-conductor`` processes; the
handlers are test-only kinds (tests/conductor/handlers.py) that leave a record
of every run, so "every job ran, none twice at the same time" is read from
what actually happened, even across processes and a kill -9.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from exosuit.backoff import backoff_delay
from exosuit.cmd import conductor as conductor_cmd
from exosuit.conductor import kinds
from exosuit.conductor.worker import (
    Conductor,
    Settings,
    Worker,
    purge_finished,
    schedule_periodic,
)
from exosuit.conf import make_conf
from exosuit.db import jobs, models
from exosuit.db.api import Database
from tests.conductor import handlers
from tests.conftest import new_database_url
from tests.helpers.agent_processes import wait_for

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FAST = Settings(
    poll_interval=0.05, lease_seconds=30, max_attempts=3, backoff_base=10, backoff_max=60
)


# Helpers


def conductor_conf(**overrides):
    """A configuration whose conductors also run the test kinds (tests/conductor/handlers.py)."""
    return make_conf([], **{"conductor.handler_modules": ["tests.conductor.handlers"], **overrides})


def enqueue(db, kind: str, payload: dict, **kw) -> int:
    return db.write(lambda conn: jobs.enqueue(conn, kind, payload, **kw))


def job_row(db, job_id: int):
    return db.read(
        lambda conn: (
            conn.execute(sa.select(models.jobs).where(models.jobs.c.id == job_id)).mappings().one()
        )
    )


def all_jobs(db) -> list:
    return db.read(
        lambda conn: (
            conn.execute(sa.select(models.jobs).order_by(models.jobs.c.id)).mappings().all()
        )
    )


def make_due(db, job_id: int) -> None:
    """Age a job's run_after into the past (instead of waiting out its backoff)."""
    db.write(
        lambda conn: conn.execute(
            sa.update(models.jobs)
            .where(models.jobs.c.id == job_id)
            .values(run_after=models.utcnow() - dt.timedelta(seconds=1))
        )
    )


def all_succeeded(db, count: int) -> bool:
    rows = all_jobs(db)
    return len(rows) == count and all(r["state"] == "succeeded" for r in rows)


def seconds_between(later: dt.datetime, earlier: dt.datetime) -> float:
    return (later - earlier).total_seconds()


class Runs:
    """What the handlers recorded in a folder."""

    def __init__(self, folder: Path) -> None:
        self.lines = handlers.read_log(folder)
        self.starts = Counter(line[1] for line in self.lines if line[0] == "start")
        self.ends = Counter(line[1] for line in self.lines if line[0] == "end")
        self.overlaps = [line for line in self.lines if line[0] == "overlap"]

    def by(self, field: int) -> set[str]:
        return {line[field] for line in self.lines if line[0] == "start"}


def assert_each_ran_once(runs: Runs, count: int) -> None:
    expected = Counter({str(n): 1 for n in range(count)})
    assert runs.overlaps == [], runs.overlaps
    assert runs.starts == expected, runs.starts - expected
    assert runs.ends == expected


# Enqueue


def test_a_rolled_back_transaction_leaves_no_job(database, tmp_path):
    with pytest.raises(RuntimeError), database.writer() as conn:
        conn.execute(sa.insert(models.hosts).values(hostname="h1", created_at=models.utcnow()))
        jobs.enqueue(conn, "test.record", {"dir": str(tmp_path), "n": 0}, key="sync:h1")
        raise RuntimeError("the state change failed")
    assert all_jobs(database) == []

    with database.writer() as conn:
        conn.execute(sa.insert(models.hosts).values(hostname="h1", created_at=models.utcnow()))
        job_id = jobs.enqueue(conn, "test.record", {"dir": str(tmp_path), "n": 0}, key="sync:h1")
    [row] = all_jobs(database)
    assert (row["id"], row["state"], row["key"], row["attempts"]) == (
        job_id,
        "pending",
        "sync:h1",
        0,
    )


def test_a_pending_job_absorbs_jobs_of_its_key_a_running_one_does_not(database, tmp_path):
    first = enqueue(database, "test.record", {"dir": str(tmp_path), "n": 0}, key="sync:h1")
    assert enqueue(database, "test.record", {"dir": str(tmp_path), "n": 1}, key="sync:h1") == first
    other = enqueue(database, "test.record", {"dir": str(tmp_path), "n": 2}, key="sync:h2")
    unkeyed = enqueue(database, "test.record", {"dir": str(tmp_path), "n": 3})
    assert len({first, other, unkeyed}) == 3
    assert json.loads(job_row(database, first)["payload"])["n"] == 0

    claimed = Worker(conductor_conf(), database, settings=FAST).claim()
    assert claimed.id == first
    # Running: it may have read the state before this change, so a new job is queued.
    again = enqueue(database, "test.record", {"dir": str(tmp_path), "n": 4}, key="sync:h1")
    assert again not in (first, other, unkeyed)
    assert job_row(database, again)["state"] == "pending"


# Outcomes of one run


def test_a_successful_job_is_recorded_with_its_worker(database, tmp_path):
    job_id = enqueue(database, "test.record", {"dir": str(tmp_path), "n": 0})
    worker = Worker(conductor_conf(), database, settings=FAST)
    outcome = worker.run_once()
    assert (outcome.job_id, outcome.state, outcome.recorded) == (job_id, "succeeded", True)
    row = job_row(database, job_id)
    assert (row["state"], row["attempts"], row["worker"], row["lease_expires_at"]) == (
        "succeeded",
        0,
        worker.id,
        None,
    )
    assert_each_ran_once(Runs(tmp_path), 1)
    assert worker.run_once() is None


def test_a_failed_attempt_backs_off_exponentially_until_max_attempts(database, tmp_path):
    job_id = enqueue(database, "test.flaky", {"dir": str(tmp_path), "n": 0, "failures": 99})
    worker = Worker(conductor_conf(), database, settings=FAST)  # base 10 s, 3 attempts
    for attempt, (low, high) in ((1, (5, 10)), (2, (10, 20))):
        before = models.utcnow()
        outcome = worker.run_once()
        assert (outcome.state, outcome.attempts) == ("pending", attempt)
        row = job_row(database, job_id)
        assert (row["state"], row["attempts"], row["worker"], row["lease_expires_at"]) == (
            "pending",
            attempt,
            worker.id,
            None,
        )
        assert row["last_error"] == f"RuntimeError: failure {attempt}"
        wait = seconds_between(row["run_after"], before)
        assert low - 0.5 <= wait <= high + 0.5, (attempt, wait)
        assert worker.run_once() is None  # not due yet
        make_due(database, job_id)
    outcome = worker.run_once()
    assert (outcome.state, outcome.attempts) == ("failed", 3)
    row = job_row(database, job_id)
    assert (row["state"], row["attempts"], row["last_error"]) == (
        "failed",
        3,
        "RuntimeError: failure 3",
    )
    make_due(database, job_id)
    assert worker.run_once() is None
    assert Runs(tmp_path).starts == {"0": 3}


def test_a_flaky_job_succeeds_on_retry_and_keeps_its_last_error(database, tmp_path):
    job_id = enqueue(database, "test.flaky", {"dir": str(tmp_path), "n": 0, "failures": 2})
    settings = Settings(
        poll_interval=0.05, lease_seconds=30, max_attempts=5, backoff_base=0.01, backoff_max=0.05
    )
    worker = Worker(conductor_conf(), database, settings=settings)
    states = []
    while len(states) < 3:
        outcome = worker.run_once()
        if outcome is None:
            time.sleep(0.02)
            continue
        states.append(outcome.state)
    assert states == ["pending", "pending", "succeeded"]
    row = job_row(database, job_id)
    assert (row["state"], row["attempts"], row["last_error"]) == (
        "succeeded",
        2,
        "RuntimeError: failure 2",
    )


def test_retry_later_reschedules_without_counting_an_attempt(database):
    job_id = enqueue(
        database, "test.later", {"reason": "no compute node provider yet", "delay": 40}
    )
    worker = Worker(conductor_conf(), database, settings=FAST)
    before = models.utcnow()
    outcome = worker.run_once()
    after = models.utcnow()
    assert (outcome.state, outcome.attempts, outcome.recorded) == ("pending", 0, True)
    row = job_row(database, job_id)
    assert (row["state"], row["attempts"]) == ("pending", 0)
    assert row["last_error"] == "retry later: no compute node provider yet"
    # 40 s after the run, however long the run took (half a second of slack: MariaDB
    # keeps whole seconds by default).
    assert seconds_between(row["run_after"], before) >= 39.5
    assert seconds_between(row["run_after"], after) <= 40.5
    assert worker.run_once() is None


def test_a_job_of_unknown_kind_fails_with_a_clear_error(database):
    job_id = enqueue(database, "test.nobody", {})
    outcome = Worker(conductor_conf(), database, settings=FAST).run_once()
    assert outcome.state == "failed"
    row = job_row(database, job_id)
    assert row["state"] == "failed"
    assert row["last_error"].startswith("no handler for job kind 'test.nobody' in this conductor")


def test_backoff_doubles_from_the_base_up_to_the_maximum_with_jitter():
    rng = random.Random(4)
    assert backoff_delay(0, 2, 300, rng=rng) == 0
    for failures, full in ((1, 2), (2, 4), (3, 8), (8, 256), (9, 300), (500, 300)):
        delays = [backoff_delay(failures, 2, 300, rng=rng) for _ in range(200)]
        assert all(full / 2 <= d <= full for d in delays), (failures, min(delays), max(delays))
        assert max(delays) - min(delays) > full / 4  # jittered, not constant


def test_services_are_built_once_from_the_configuration(sqlite_database, tmp_path):
    handlers.ECHO_BUILDS.clear()
    conf = conductor_conf(host="echo-host")
    for n in range(2):
        enqueue(
            sqlite_database, "test.service", {"dir": str(tmp_path), "n": n, "service": "test.echo"}
        )
    unknown = enqueue(
        sqlite_database, "test.service", {"dir": str(tmp_path), "n": 2, "service": "test.absent"}
    )
    worker = Worker(conf, sqlite_database, settings=FAST)
    outcomes = [worker.run_once() for _ in range(3)]
    assert [o.state for o in outcomes] == ["succeeded", "succeeded", "pending"]
    assert handlers.ECHO_BUILDS == ["echo-host"]
    lines = handlers.read_log(tmp_path)
    assert [line[3] for line in lines] == ["echo-host", "echo-host"]
    assert lines[0][2] == lines[1][2]  # the same object
    assert job_row(sqlite_database, unknown)["last_error"] == "KeyError: 'test.absent'"


# Concurrency


@pytest.mark.parametrize("database", ["postgresql", "mariadb"], indirect=True)
def test_a_claim_skips_a_job_locked_by_another_claimer_without_waiting(database):
    first = enqueue(database, "test.record", {})
    second = enqueue(database, "test.record", {})
    worker = Worker(conductor_conf(), database, settings=FAST)
    with database.writer() as conn:  # another claimer, in the middle of its transaction
        conn.execute(sa.select(models.jobs.c.id).where(models.jobs.c.id == first).with_for_update())
        # Run in a thread: a claim that waited for the lock would wait until this
        # transaction ends, so it would still be running when the generous join ends.
        claimed: list = []
        claimer = threading.Thread(target=lambda: claimed.append(worker.claim()), daemon=True)
        claimer.start()
        claimer.join(timeout=60)
        assert not claimer.is_alive(), "the claim waited for the locked job"
        assert claimed[0].id == second
    assert worker.claim().id == first


@pytest.mark.parametrize("database", ["postgresql", "mariadb"], indirect=True)
def test_a_pending_job_that_absorbs_a_new_one_is_not_claimed_before_that_commits(database):
    """A change whose sync a pending job of its key absorbs: until the change commits, no
    worker claims that job (it would read the state from before the change, and no sync
    would follow); once committed, it is claimed."""
    first = enqueue(database, "test.record", {}, key="sync:host")
    worker = Worker(conductor_conf(), database, settings=FAST)
    with database.writer() as conn:  # the change, in the middle of its transaction
        assert jobs.enqueue(conn, "test.record", {}, key="sync:host") == first
        claimed: list = []
        claimer = threading.Thread(target=lambda: claimed.append(worker.claim()), daemon=True)
        claimer.start()
        claimer.join(timeout=60)
        assert not claimer.is_alive(), "the claim waited for the held job"
        assert claimed == [None]
    assert worker.claim().id == first


def test_worker_threads_run_every_job_exactly_once(database, tmp_path):
    count = 40
    with database.writer() as conn:
        for n in range(count):
            jobs.enqueue(conn, "test.record", {"dir": str(tmp_path), "n": n, "sleep": 0.02})
    conductor = Conductor(conductor_conf(), database, workers=4, settings=FAST, periodic={})
    conductor.start()
    try:
        wait_for(lambda: all_succeeded(database, count), 30, "all jobs succeeded")
    finally:
        assert conductor.stop(timeout=10)
    runs = Runs(tmp_path)
    assert_each_ran_once(runs, count)
    assert len(runs.by(3)) >= 2, "one thread did all the work"
    assert {r["attempts"] for r in all_jobs(database)} == {0}


class ConductorProcess:
    """``exosuit-conductor --config-file …`` as a real process; stderr collected."""

    def __init__(self, config: Path, *extra: str) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        self.proc = subprocess.Popen(
            [str(BIN / "exosuit-conductor"), "--config-file", str(config), *extra],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._terminated = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with self.proc.stderr as stream:  # closed at the end of the output
            for line in stream:
                self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_started(self, timeout: float = 30) -> None:
        wait_for(
            lambda: "worker(s) started" in self.output() or self.proc.poll() is not None,
            timeout,
            "exosuit-conductor started",
        )
        assert self.proc.poll() is None, self.output()

    def terminate(self) -> None:
        """SIGTERM, once (a second one would make it exit at once)."""
        if not self._terminated:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 15) -> int:
        self.terminate()
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)


@pytest.fixture
def processes():
    started: list[ConductorProcess] = []
    yield started
    for process in started:
        process.kill()


def write_config(path: Path, db, **conductor) -> Path:
    url = db.url.render_as_string(hide_password=False)
    # No periodic Placement reconcile, program, claim, health or audit sweep, and no usage
    # history ([dashboard]) here: these tests count every job row.
    options = {
        "handler_modules": "tests.conductor.handlers",
        "reconcile_interval": 0,
        "program_sweep_interval": 0,
        "claim_sweep_interval": 0,
        "health_sweep_interval": 0,
        "audit_sweep_interval": 0,
        **conductor,
    }
    path.write_text(
        "\n".join(
            [
                "[DEFAULT]",
                f"state_path = {path.parent}",
                "[database]",
                f"connection = {url}",
                "[conductor]",
                *(f"{k} = {v}" for k, v in options.items()),
                "[dashboard]",
                "history_resolution = 0",
            ]
        )
        + "\n"
    )
    return path


# NOTE: processes on the networked databases only (issue 4): the embedded SQLite
# default runs its one worker inside `exosuit serve`.
@pytest.mark.parametrize("database", ["postgresql", "mariadb"], indirect=True)
def test_two_conductor_processes_share_the_work_without_doing_any_job_twice(
    database, tmp_path, processes
):
    config = write_config(
        tmp_path / "exosuit.conf", database, poll_interval=0.05, lease_seconds=30, workers=2
    )
    for _ in range(2):
        processes.append(ConductorProcess(config))
    for process in processes:
        process.wait_started()
    count = 40
    with database.writer() as conn:
        for n in range(count):
            jobs.enqueue(conn, "test.record", {"dir": str(tmp_path), "n": n, "sleep": 0.1})
    wait_for(lambda: all_succeeded(database, count), 45, "all jobs succeeded")
    runs = Runs(tmp_path)
    assert_each_ran_once(runs, count)
    pids = {str(p.proc.pid) for p in processes}
    assert runs.by(2) == pids, "both processes should have done some of the work"
    assert {r["worker"].split(":")[1] for r in all_jobs(database)} == pids
    for process in processes:
        process.terminate()  # both at once: they stop in parallel
    for process in processes:
        assert process.stop() == 0, process.output()
        assert "exosuit-conductor stopped" in process.output()
        succeeded = [line for line in process.lines if " succeeded in " in line]
        assert succeeded and all(" INFO " in line for line in succeeded)


def test_sigterm_finishes_the_job_in_hand_and_a_second_one_exits_at_once(
    sqlite_database, db_servers, tmp_path_factory, processes
):
    graceful_db = sqlite_database
    hasty_db = Database(new_database_url("sqlite", db_servers, tmp_path_factory))
    folders = {name: tmp_path_factory.mktemp(name) for name in ("graceful", "hasty")}
    try:
        started = {}
        for name, db in (("graceful", graceful_db), ("hasty", hasty_db)):
            folder = folders[name]
            enqueue(db, "test.record", {"dir": str(folder), "n": 0, "sleep": 2})
            config = write_config(
                folder / "exosuit.conf", db, poll_interval=0.05, lease_seconds=30, workers=1
            )
            started[name] = ConductorProcess(config)
            processes.append(started[name])
        for name in started:
            wait_for(lambda name=name: Runs(folders[name]).starts, 30, f"{name}: job started")

        graceful, hasty = started["graceful"], started["hasty"]
        graceful.terminate()
        later = enqueue(graceful_db, "test.record", {"dir": str(folders["graceful"]), "n": 1})
        hasty.terminate()
        # (Two signals in a row would be taken as one: wait until the first was seen.)
        wait_for(lambda: "finishing the jobs in hand" in hasty.output(), 10, "first signal")
        hasty.proc.send_signal(signal.SIGTERM)
        assert hasty.proc.wait(10) == 1, hasty.output()
        assert graceful.stop() == 0, graceful.output()

        # Graceful: the job in hand finished and was recorded; nothing new was claimed.
        assert [r["state"] for r in all_jobs(graceful_db)] == ["succeeded", "pending"]
        assert job_row(graceful_db, later)["worker"] is None
        assert Runs(folders["graceful"]).ends == {"0": 1}
        # Hasty: gone mid-job; the job waits for its lease to expire.
        [row] = all_jobs(hasty_db)
        assert row["state"] == "running" and row["lease_expires_at"] > models.utcnow()
        assert Runs(folders["hasty"]).ends == {}
        assert "exiting now" in hasty.output()
    finally:
        hasty_db.dispose()


def test_a_job_of_a_killed_worker_is_run_again_after_its_lease_expires(
    database, tmp_path, processes
):
    config = write_config(
        tmp_path / "exosuit.conf", database, poll_interval=0.05, lease_seconds=2, workers=1
    )
    job_id = enqueue(database, "test.block_first", {"dir": str(tmp_path), "n": 0, "block": 60})
    process = ConductorProcess(config)
    processes.append(process)
    wait_for(lambda: Runs(tmp_path).starts, 30, "the job started in the process")
    held = job_row(database, job_id)
    assert held["state"] == "running" and f":{process.proc.pid}:" in held["worker"]
    os.kill(process.proc.pid, signal.SIGKILL)
    process.kill()
    (tmp_path / "0.running").unlink()  # the killed run is over; its marker stayed
    dead = job_row(database, job_id)  # the lease as the dead worker last renewed it
    assert (dead["state"], dead["worker"]) == ("running", held["worker"])

    conductor = Conductor(
        conductor_conf(),
        database,
        workers=1,
        periodic={},
        settings=Settings(poll_interval=0.05, lease_seconds=2),
    )
    conductor.start()
    try:
        wait_for(
            lambda: job_row(database, job_id)["state"] == "succeeded",
            20,
            "the job succeeded in another worker",
        )
    finally:
        assert conductor.stop(timeout=10)
    row = job_row(database, job_id)
    assert row["worker"] == conductor.workers[0].id
    assert row["attempts"] == 1  # the killed run counts as a failed attempt
    assert row["last_error"] == (
        f"lease expired: worker {held['worker']} did not finish (killed or stalled)"
    )
    runs = Runs(tmp_path)
    assert runs.starts == {"0": 2} and runs.ends == {"0": 1} and runs.overlaps == []
    second_start = dt.datetime.fromisoformat(
        [line for line in runs.lines if line[0] == "start"][1][4]
    )
    assert second_start >= dead["lease_expires_at"]  # not claimed again before that


def test_a_worker_that_lost_its_lease_cannot_overwrite_the_new_outcome(database, tmp_path):
    gate = f"gate-{tmp_path.name}"
    handlers.GATES[gate] = threading.Event()
    job_id = enqueue(
        database,
        "test.block_first",
        {"dir": str(tmp_path), "n": 0, "gate": gate, "then_fail": True},
    )
    conf = conductor_conf()
    stalled = Worker(
        conf,
        database,
        name="stalled",
        settings=Settings(poll_interval=0.05, lease_seconds=1.5, max_attempts=5),
    )
    job = stalled.claim()
    assert job.id == job_id
    other = Worker(conf, database, name="other", settings=FAST)
    assert other.run_once() is None  # the lease still holds
    late: list = []
    thread = threading.Thread(target=lambda: late.append(stalled.execute(job)))
    thread.start()
    try:
        wait_for(lambda: Runs(tmp_path).starts, 10, "the first run started")
        wait_for(lambda: models.utcnow() > job.lease_expires_at, 5, "lease expired")
        outcome = other.run_once()  # the second run fails: back to pending
        assert (outcome.job_id, outcome.state, outcome.recorded) == (job_id, "pending", True)
        assert outcome.attempts == 2  # the expired lease, then this failure
        newer = job_row(database, job_id)
    finally:
        handlers.GATES[gate].set()
        thread.join(10)
    # The stalled worker's success came late: discarded, nothing changed.
    assert (late[0].state, late[0].recorded) == ("succeeded", False)
    assert job_row(database, job_id) == newer
    assert (newer["state"], newer["worker"], newer["last_error"]) == (
        "pending",
        other.id,
        "RuntimeError: the second run failed",
    )
    assert ["owned", str(job_id), "False"] in Runs(tmp_path).lines  # ctx.heartbeat() said so
    del handlers.GATES[gate]


def test_the_heartbeat_keeps_a_long_job_from_being_claimed_again(database, tmp_path):
    short_lease = Settings(poll_interval=0.05, lease_seconds=1.5)
    job_id = enqueue(database, "test.record", {"dir": str(tmp_path), "n": 0, "sleep": 2.5})
    conf = conductor_conf()
    first = Conductor(conf, database, workers=1, settings=short_lease, periodic={}, name="a")
    second = Conductor(conf, database, workers=2, settings=short_lease, periodic={}, name="b")
    first.start()
    try:
        wait_for(lambda: Runs(tmp_path).starts, 10, "the job started")
        second.start()
        wait_for(lambda: job_row(database, job_id)["state"] == "succeeded", 10, "succeeded")
    finally:
        assert first.stop(timeout=10) and second.stop(timeout=10)
    row = job_row(database, job_id)
    assert (row["attempts"], row["worker"], row["last_error"]) == (0, first.workers[0].id, None)
    assert_each_ran_once(Runs(tmp_path), 1)


# Periodic jobs and housekeeping


def test_a_periodic_job_runs_one_at_a_time_across_conductors(database):
    handlers.PERIODIC_RUNS.clear()
    handlers.PERIODIC_OVERLAPS.clear()
    interval = 0.3
    settings = Settings(poll_interval=0.05, lease_seconds=10)
    conductors = [
        Conductor(
            conductor_conf(),
            database,
            workers=2,
            settings=settings,
            periodic={"test.periodic": interval},
            name=f"c{i}",
        )
        for i in range(2)
    ]
    for conductor in conductors:
        conductor.start()
    try:
        wait_for(lambda: len(handlers.PERIODIC_RUNS) >= 3, 20, "three periodic runs")
    finally:
        assert all(c.stop(timeout=10) for c in conductors)
    runs = sorted(handlers.PERIODIC_RUNS)
    assert handlers.PERIODIC_OVERLAPS == []
    # Never sooner than the interval after the previous run ended, whoever ran it.
    for (_, end), (start, _) in zip(runs, runs[1:], strict=False):
        assert start - end >= interval - 0.02, (start - end, runs)
    [row] = all_jobs(database)
    assert (row["id"], row["kind"], row["key"]) == (
        jobs.periodic_job_id("test.periodic"),
        "test.periodic",
        "periodic:test.periodic",
    )


def test_periodic_kinds_without_a_handler_are_not_scheduled(database):
    conf = conductor_conf()
    periodic = kinds.load(conf).periodic
    schedule_periodic(database, conf, periodic, handlers={})
    assert all_jobs(database) == []
    conf.set_override("reconcile_interval", 0, group="conductor")
    schedule_periodic(database, conf, periodic, handlers={"placement_reconcile": print})
    assert all_jobs(database) == []
    conf.clear_override("reconcile_interval", group="conductor")
    for _ in range(2):  # a second call (or conductor) adds nothing
        schedule_periodic(database, conf, periodic, handlers={"placement_reconcile": print})
    [row] = all_jobs(database)
    assert (row["id"], row["kind"], row["state"]) == (
        jobs.periodic_job_id("placement_reconcile"),
        "placement_reconcile",
        "pending",
    )


def test_old_finished_jobs_are_deleted_after_their_retention(database):
    ids = {
        name: enqueue(database, "test.record", {})
        for name in ("old_succeeded", "new_succeeded", "old_failed", "very_old_failed", "pending")
    }
    periodic = jobs.periodic_job_id("test.periodic")
    database.write(
        lambda conn: conn.execute(
            sa.insert(models.jobs).values(
                id=periodic,
                kind="test.periodic",
                payload="{}",
                state="pending",
                attempts=0,
                run_after=models.utcnow(),
                created_at=models.utcnow(),
            )
        )
    )
    ids["periodic"] = periodic
    now = models.utcnow()
    ages = {
        "old_succeeded": ("succeeded", 7200),
        "new_succeeded": ("succeeded", 60),
        "old_failed": ("failed", 7200),
        "very_old_failed": ("failed", 90000),
        "periodic": ("succeeded", 90000),
        "pending": ("pending", 90000),
    }
    for name, (state, age) in ages.items():
        database.write(
            lambda conn, name=name, state=state, age=age: conn.execute(
                sa.update(models.jobs)
                .where(models.jobs.c.id == ids[name])
                .values(state=state, updated_at=now - dt.timedelta(seconds=age))
            )
        )

    def remaining():
        left = {row["id"] for row in all_jobs(database)}
        return {name for name, job_id in ids.items() if job_id in left}

    keep_failed = Settings(succeeded_retention=3600, failed_retention=0)
    assert purge_finished(database, keep_failed) == 1
    assert remaining() == set(ids) - {"old_succeeded"}
    settings = Settings(succeeded_retention=3600, failed_retention=86400)
    assert purge_finished(database, settings) == 1
    assert remaining() == {"new_succeeded", "old_failed", "periodic", "pending"}


# Command line


def test_status_lists_unfinished_and_failed_jobs_and_retry_requeues(database, tmp_path, capsys):
    config = str(write_config(tmp_path / "exosuit.conf", database))
    failed = enqueue(database, "test.nobody", {})
    Worker(conductor_conf(), database, settings=FAST).run_once()
    waiting = enqueue(
        database, "test.later", {"reason": "x", "delay": 1}, key="later:1", delay=3600
    )
    assert conductor_cmd.main(["status", "--config-file", config]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "jobs: 1 pending, 0 running, 1 failed, 0 succeeded"
    table = [line.split()[:5] for line in out[3:]]
    assert [row[:4] for row in table] == [
        [str(failed), "test.nobody", "failed", "1"],
        [str(waiting), "test.later", "pending", "0"],
    ]
    assert "no handler for job kind 'test.nobody'" in out[3]

    assert (
        conductor_cmd.main(
            ["--config-file", config, "status", "--state", "failed", "--format", "json"]
        )
        == 0
    )
    listed = json.loads(capsys.readouterr().out)
    assert [job["id"] for job in listed["jobs"]] == [failed]

    assert conductor_cmd.main(["retry", str(failed), "--config-file", config]) == 0
    row = job_row(database, failed)
    assert (row["state"], row["attempts"]) == ("pending", 0)
    assert conductor_cmd.main(["retry", str(failed), "--config-file", config]) == 1
    assert f"no failed job {failed}" in capsys.readouterr().err
