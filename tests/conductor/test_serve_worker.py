"""``exosuit serve`` runs one conductor worker in-process: a job committed to its
SQLite database is run there, and SIGTERM still stops the server cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

from exosuit.db import jobs
from exosuit.db.api import Database
from tests.conductor.handlers import read_log
from tests.conductor.test_jobs import BIN, REPO, job_row, wait_for
from tests.helpers.agent_processes import drain


@pytest.mark.slow  # starts exosuit serve
def test_exosuit_serve_runs_jobs_in_process(tmp_path):
    config = tmp_path / "exosuit.conf"
    config.write_text(
        "[conductor]\nhandler_modules = tests.conductor.handlers\n"
        "poll_interval = 0.1\n[serve]\nreport_interval = 3600\n"
        "[agent]\nenabled_drivers = simulated\nuevents = false\n"
    )
    data = tmp_path / "data"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    process = subprocess.Popen(
        [
            str(BIN / "exosuit"),
            "serve",
            "--port",
            "0",
            "--data-dir",
            str(data),
            "--config-file",
            str(config),
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=drain, args=(process.stdout, lines), daemon=True)
    reader.start()
    db = None
    try:
        wait_for(
            lambda: (
                any("serving Cyborg's v2 API" in line for line in lines)
                or process.poll() is not None
            ),
            30,
            "exosuit serve listening",
        )
        assert process.poll() is None, "".join(lines)
        db = Database(f"sqlite:///{data}/exosuit.sqlite")
        job_id = db.write(
            lambda conn: jobs.enqueue(conn, "test.record", {"dir": str(tmp_path), "n": 0})
        )
        wait_for(lambda: job_row(db, job_id)["state"] == "succeeded", 20, "the job ran")
        [start, end] = read_log(tmp_path)
        assert start[:3] == ["start", "0", str(process.pid)]  # in the server's process
        assert end[:2] == ["end", "0"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
        reader.join(5)
        output = "".join(lines)
        assert "Exosuit stopped." in output
        assert f"job {job_id} test.record succeeded in " in output
    finally:
        if db is not None:
            db.dispose()
        if process.poll() is None:
            process.kill()
            process.wait(10)
