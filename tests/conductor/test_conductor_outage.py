"""A database outage seen by the conductor's loops: said once when it starts and once when
it ends, not at every poll; the loops back off meanwhile and resume on their own."""

from __future__ import annotations

import logging
import threading

import pytest
import sqlalchemy as sa

from exosuit import exceptions
from exosuit.conductor.worker import Outage, Worker
from exosuit.db import models
from tests.conductor.test_jobs import FAST, conductor_conf, enqueue
from tests.helpers.agent_processes import wait_for


class Flaky:
    """A real database whose reads and writes fail as in an outage while ``down`` is set
    (what the database layer raises once its retries are spent)."""

    def __init__(self, db) -> None:
        self.db = db
        self.down = threading.Event()
        self.calls_while_down = 0

    def _check(self) -> None:
        if self.down.is_set():
            self.calls_while_down += 1
            raise exceptions.DatabaseUnavailable(reason="connection refused")

    def read(self, *args, **kwargs):
        self._check()
        return self.db.read(*args, **kwargs)

    def write(self, *args, **kwargs):
        self._check()
        return self.db.write(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.db, name)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_worker_says_an_outage_once_backs_off_and_resumes(database, caplog, tmp_path):
    flaky = Flaky(database)
    flaky.down.set()
    worker = Worker(conductor_conf(), flaky, settings=FAST)
    stop = threading.Event()
    runner = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    caplog.set_level(logging.DEBUG, logger="exosuit.conductor.worker")
    runner.start()
    try:
        wait_for(lambda: flaky.calls_while_down >= 4, timeout=120, what="four failed polls")
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "database unavailable: " in warnings[0].getMessage()

        flaky.down.clear()
        job = enqueue(database, "test.record", {"dir": str(tmp_path), "n": 0})
        wait_for(
            lambda: any("available again" in r.getMessage() for r in caplog.records),
            timeout=120,
            what="the end of the outage said",
        )
        wait_for(
            lambda: (
                database.read(
                    lambda conn: conn.execute(
                        sa.select(models.jobs.c.state).where(models.jobs.c.id == job)
                    ).scalar()
                )
                == "succeeded"
            ),
            timeout=120,
            what="the job run once the database is back",
        )
    finally:
        stop.set()
        runner.join(timeout=60)
    assert [r.levelno for r in caplog.records].count(logging.WARNING) == 1


def test_the_backoff_grows_and_is_bounded():
    outage = Outage("test")
    delays = []
    for _ in range(12):
        outage.failed(RuntimeError("down"))
        delays.append(outage.delay(0.5))
    assert delays[0] == 1.0 and delays == sorted(delays)
    assert delays[-1] == 32.0  # 64 polls of 0.5 s at most (under the minute)
    outage.ended()
    assert outage.failures == 0 and outage.delay(0.5) == 0.5
