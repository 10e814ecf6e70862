"""exosuit-api and exosuit-conductor refuse to start, with one line an operator can act
on and no traceback, when the database cannot be reached or its schema is behind."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request

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
    config.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = {url}\nstartup_wait = 0\n"
    )
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


class Forwarder:
    """A TCP forwarder to the real database server, started when the test says: until
    then nothing listens on its port (the database is "down")."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port, self.target = port, target
        self.server: socket.socket | None = None
        self.sockets: list[socket.socket] = []

    def start(self) -> None:
        import threading

        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        assert self.server is not None
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.sockets.append(client)
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self.sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for open_socket in self.sockets:
            open_socket.close()


def _start(program: str, database, tmp_path, forwarder: Forwarder):
    """``program`` on PostgreSQL reached through ``forwarder`` (down until started), its
    output (log lines) in a file; the process and that file."""
    url = database.engine.url
    through = url.set(host="127.0.0.1", port=forwarder.port)
    config = tmp_path / "exosuit.conf"
    config.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\n"
        f"connection = {through.render_as_string(hide_password=False)}\nstartup_wait = 600\n"
        f"[api]\nport = {_closed_port()}\nworkers = 1\n"
    )
    log = tmp_path / f"{program}.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [os.path.join(BIN, program), "--config-file", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return process, log


def _running(program: str, log) -> bool:
    if program == "exosuit-conductor":
        return "exosuit-conductor running" in log.read_text()
    banner = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text())
    if banner is None:
        return False  # still checking the schema
    try:
        url = f"http://127.0.0.1:{banner[1]}/healthz"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status == 200
    except OSError:
        return False


# Where the stop comes: while it waits for the database (in a sleep between tries), as
# soon as the database answers (it is then checking the schema and building its workers
# or server: that run's failure was a conductor killed by the signal there, exit -15),
# and once it runs (its own handlers: the jobs in hand finish, the server drains).
POINTS = ("waiting", "answers", "running")


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("program", ["exosuit-api", "exosuit-conductor"])
@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_sigterm_at_any_point_of_the_start_stops_cleanly(program, point, database, tmp_path):
    """A restart during a database outage (a failover, the chaos campaign's) waits for the
    database, said once, instead of exiting; and SIGTERM at any point of that start ends
    the process with status 0, as a stop of a running one does (exosuit/stopping.py)."""
    from tests.helpers.agent_processes import wait_for

    url = database.engine.url
    forwarder = Forwarder(_closed_port(), (url.host or "127.0.0.1", url.port or 5432))
    process, log = _start(program, database, tmp_path, forwarder)
    try:
        wait_for(lambda: "waiting up to 600 s" in log.read_text(), timeout=120, what="waiting")
        assert process.poll() is None, log.read_text()  # it waits, not exits
        if point != "waiting":
            forwarder.start()
            wait_for(lambda: "the database answers" in log.read_text(), 120, "reconnected")
        if point == "running":
            wait_for(lambda: _running(program, log), timeout=120, what="running")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, log.read_text()
        assert log.read_text().count("cannot reach the database") == 1  # said once
        assert "Traceback" not in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        forwarder.stop()
