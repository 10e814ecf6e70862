"""Real processes for the agent's end-to-end tests: exosuit-api, exosuit-agent, a relay.

``ApiProcess`` runs ``exosuit-api`` (gunicorn) on a port it keeps across restarts.
``AgentProcess`` runs ``exosuit-agent run --config-file …`` and can signal, stop or
kill it. ``Relay`` is an HTTP relay between the two: its record of agent reports is the
test's access log, and it can hold a report in flight so that the agent can be killed
in the middle of one. Every ``stop()`` waits for the process, then kills it if it has
not ended, so nothing outlives a test.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["BIN", "AgentProcess", "ApiProcess", "Relay", "call", "free_port", "wait_for"]

BIN = os.path.dirname(sys.executable)
STOP_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drain(stream, into: list) -> None:
    """Read a process's output pipe until it ends, into ``into``; then close it (a
    reader thread's target)."""
    with stream:
        into.extend(stream)


def wait_for(predicate, timeout: float = 60.0, what: str = "", interval: float = 0.05):
    """Poll ``predicate`` until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {what or predicate}")
        time.sleep(interval)


def call(url: str, method: str, path: str, body=None, version: str | None = "2.4"):
    """One API call as an admin under noauth; returns (status, decoded body or None)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if version:
        request.add_header("OpenStack-API-Version", f"accelerator {version}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, (json.loads(raw) if raw else None)


def _stop(process: subprocess.Popen | None, sig: int = signal.SIGTERM) -> int | None:
    if process is None or process.poll() is not None:
        return None if process is None else process.returncode
    process.send_signal(sig)
    try:
        return process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"{process.args[0]} did not stop within {STOP_TIMEOUT} s") from None


class ApiProcess:
    """exosuit-api with one worker on a fixed loopback port, on the database ``db_url``."""

    def __init__(self, db_url: str, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "api.log"
        self.config = workdir / "api.conf"
        self.config.write_text(
            f"[DEFAULT]\nstate_path = {workdir}\n"
            f"[database]\nconnection = {db_url}\n"
            f"[api]\nhost_ip = 127.0.0.1\nport = {self.port}\nworkers = 1\nthreads = 4\n"
            # New devices ready, as before activation existed: the tests bind them.
            "[inventory]\nnew_device_activation = ready\n"
        )
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> None:
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                [os.path.join(BIN, "exosuit-api"), "--config-file", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(self.url + "/", timeout=1).read()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        "exosuit-api did not start:\n" + self.log_path.read_text()[-3000:]
                    ) from None
                time.sleep(0.1)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        _stop(self.process)


class AgentProcess:
    """``exosuit-agent run`` for host ``hostname`` on the sysfs tree ``sysfs_root``."""

    def __init__(
        self,
        workdir: Path,
        hostname: str,
        api_url: str,
        sysfs_root: Path,
        drivers: str = "nvidia_gpu",
        **agent_options,
    ) -> None:
        self.hostname = hostname
        self.workdir = workdir
        self.state_dir = workdir / "agent-state"
        self.log_path = workdir / "agent.log"
        self.config = workdir / "agent.conf"
        options = {
            "report_interval": 1,
            "report_jitter": 0,
            "removal_grace": 2,
            "max_backoff": 1,
            "uevents": False,
            **agent_options,
        }
        lines = [
            "[DEFAULT]",
            f"host = {hostname}",
            f"state_path = {workdir}",
            "[agent]",
            f"api_url = {api_url}",
            f"enabled_drivers = {drivers}",
            f"state_dir = {self.state_dir}",
            f"sysfs_root = {sysfs_root}",
            *(
                f"{key} = {str(value).lower() if isinstance(value, bool) else value}"
                for key, value in options.items()
            ),
        ]
        self.config.write_text("\n".join(lines) + "\n")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                [os.path.join(BIN, "exosuit-agent"), "run", "--config-file", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, then wait; the exit code."""
        return _stop(self.process)

    def kill(self) -> None:
        """SIGKILL: no handler, no cleanup, whatever it was doing."""
        _stop(self.process, signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    @property
    def cache_path(self) -> Path:
        return self.state_dir / "agent-cache.json"


class Relay:
    """An HTTP relay from the agent to the API.

    ``reports`` lists each agent report: ``(kind, status, changed)`` with kind ``full``
    (a whole snapshot) or ``hash`` (only its hash), status None when the API could not
    be reached (the relay then closes the agent's connection without an answer, as a
    dead server would), and ``changed`` from the API's answer.

    ``hold("request")`` stops the next full report before it reaches the API, and drops
    it when released; ``hold("response")`` lets the API apply it and holds the answer.
    ``holding`` is set once a report is held.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.reports: list[tuple[str, int | None, bool | None]] = []
        self.holding = threading.Event()
        self._hold_at: str | None = None
        self._released = threading.Event()
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def hold(self, at: str) -> None:
        assert at in ("request", "response")
        self.holding.clear()
        self._released.clear()
        self._hold_at = at

    def release(self) -> None:
        self._hold_at = None
        self._released.set()

    def _should_hold(self, at: str, kind: str) -> bool:
        with self._lock:
            if self._hold_at != at or kind != "full" or self.holding.is_set():
                return False
            self.holding.set()
            return True

    def _wait_released(self) -> None:
        self._released.wait(timeout=60)


def _handler(relay: Relay):
    hop_by_hop = {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "host",
        "server",
        "date",
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            report = self.command == "PUT" and self.path.startswith("/agent/")
            kind = "full" if report and "devices" in json.loads(body) else "hash"
            if report and relay._should_hold("request", kind):
                relay._wait_released()
                self.close_connection = True  # dropped: it never reached the API
                return
            try:
                upstream = http.client.HTTPConnection("127.0.0.1", relay.upstream_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in hop_by_hop}
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                upstream.close()
            except OSError:
                if report:
                    relay.reports.append((kind, None, None))
                self.close_connection = True
                return
            if report:
                changed = json.loads(data).get("changed") if response.status == 200 else None
                relay.reports.append((kind, response.status, changed))
                if relay._should_hold("response", kind):
                    relay._wait_released()
            try:
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in hop_by_hop:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True  # the agent is gone

        do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _relay

    return Handler
