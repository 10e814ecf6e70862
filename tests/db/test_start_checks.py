"""exosuit-api and exosuit-conductor refuse to start, with one line an operator can act
on and no traceback, when the database cannot be reached or its schema is behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once it is closed


def _run(program: str, config) -> subprocess.CompletedProcess:
    return subprocess.run(
        [os.path.join(BIN, program), "--config-file", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("program", ["exosuit-api", "exosuit-conductor"])
def test_an_unreachable_database_is_named_without_its_password(program, tmp_path):
    config = tmp_path / "exosuit.conf"
    url = f"postgresql+psycopg2://exosuit:s3cret@127.0.0.1:{_closed_port()}/exosuit"
    config.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = {url}\n")
    done = _run(program, config)
    assert done.returncode == 1, done.stderr
    assert f"{program}: cannot reach the database postgresql+psycopg2://exosuit:***@" in (
        done.stderr
    )
    assert "s3cret" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("program", ["exosuit-api", "exosuit-conductor"])
def test_a_schema_behind_asks_for_the_upgrade(program, tmp_path):
    config = tmp_path / "exosuit.conf"
    url = f"sqlite:///{tmp_path}/empty.sqlite"
    config.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = {url}\n")
    done = _run(program, config)
    assert done.returncode == 1, done.stderr
    assert f"{program}: the database schema is at nothing" in done.stderr
    assert "exosuit-manage db upgrade" in done.stderr and "Traceback" not in done.stderr
