"""``exosuit serve`` as a real subprocess, and the real command-line clients.

``ExosuitServer`` starts ``exosuit serve --port 0`` on a data directory, reads
the address it prints, and waits until ``GET /v2`` answers. ``stop()`` sends a
signal and waits; teardown kills whatever is still running, so no test leaves a
process behind. ``OpenStackCLI`` runs ``openstack … accelerator …`` against it
without Keystone (``--os-auth-type none --os-endpoint <url>/v2``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

__all__ = [
    "CYBORGCLIENT_SHELL",
    "ExosuitServer",
    "OpenStackCLI",
    "client_env",
    "serving",
    "write_config",
]

BANNER = re.compile(r"Exosuit '(?P<host>[^']*)' serving Cyborg's v2 API at (?P<url>http://\S+)/v2")
BANNER_END = "Ctrl-C stops."
# Generous: CI shares two cores with other work (a start is about a second when quiet).
STARTUP_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0


def _script(name: str) -> str:
    """A console script of the running virtualenv (next to sys.executable), else PATH."""
    candidate = Path(sys.executable).with_name(name)
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed next to {sys.executable} nor on PATH")
    return found


def write_config(path: Path, **default: str) -> Path:
    """An INI file with the given ``[DEFAULT]`` options."""
    lines = ["[DEFAULT]"] + [f"{key} = {value}" for key, value in default.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class ExosuitServer:
    """One ``exosuit serve`` process (start once, stop once)."""

    def __init__(self, data_dir: Path, config_files: Iterable[Path] = ()) -> None:
        self.data_dir = Path(data_dir)
        self.config_files = [Path(f) for f in config_files]
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.host = ""
        self.lines: list[str] = []
        self.startup_seconds: float | None = None
        self.stop_seconds: float | None = None
        self._banner = threading.Event()
        self._banner_end = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def argv(self) -> list[str]:
        """The command line (``exosuit serve … --config-file …``)."""
        argv = [
            _script("exosuit"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--data-dir",
            str(self.data_dir),
        ]
        for path in self.config_files:
            argv += ["--config-file", str(path)]
        return argv

    def start(self) -> ExosuitServer:
        began = time.monotonic()
        self.process = subprocess.Popen(
            self.argv(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = threading.Thread(target=self._read, name="exosuit-serve-output", daemon=True)
        self._reader.start()
        try:
            self._wait_until_serving(began)
        except BaseException:
            self.kill()
            raise
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with self.process.stdout as stream:  # closed at the end of the output
            for line in stream:
                self.lines.append(line)
                match = BANNER.search(line)
                if match and not self._banner.is_set():
                    self.url, self.host = match["url"], match["host"]
                    self._banner.set()
                if BANNER_END in line:
                    self._banner_end.set()

    def _wait_until_serving(self, began: float) -> None:
        deadline = began + STARTUP_TIMEOUT
        while not self._banner.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"exosuit serve did not print its address:\n{self.output}")
        while True:
            try:
                if requests.get(f"{self.url}/v2", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"exosuit serve did not answer at {self.url}:\n{self.output}")
            time.sleep(0.05)
        # The whole banner has been read (the reader thread may lag behind the server).
        while not self._banner_end.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"exosuit serve did not end its banner:\n{self.output}")
        self.startup_seconds = time.monotonic() - began

    def stop(self, signum: int = signal.SIGINT, timeout: float = STOP_TIMEOUT) -> int:
        """Send ``signum`` and wait; the exit code (the process is killed on timeout)."""
        assert self.process is not None
        began = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"exosuit serve still running {timeout} s after signal {signum}:\n{self.output}"
            ) from None
        self.stop_seconds = time.monotonic() - began
        if self._reader is not None:
            self._reader.join(timeout=60)
        return code

    def kill(self) -> None:
        """Teardown: make sure the process is gone, whatever happened."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process.stdout is not None and self._reader is not None:
            self._reader.join(timeout=60)

    def get(self, path: str, version: str | None = None, **kwargs) -> requests.Response:
        headers = {"OpenStack-API-Version": f"accelerator {version}"} if version else {}
        return requests.get(self.url + path, headers=headers, timeout=10, **kwargs)

    def post(self, path: str, body: Any) -> requests.Response:
        return requests.post(self.url + path, json=body, timeout=10)


@contextlib.contextmanager
def serving(base: Path, **default: str) -> Iterator[ExosuitServer]:
    """A started ExosuitServer on ``base``/data, with ``[DEFAULT]`` options in
    ``base``/exosuit.conf; killed on exit, whatever happened."""
    config = write_config(Path(base) / "exosuit.conf", **default)
    server = ExosuitServer(Path(base) / "data", [config])
    try:
        yield server.start()
    finally:
        server.kill()


def client_env(**extra: str) -> dict[str, str]:
    """The environment for client commands: ours, minus any OS_* cloud settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(extra)
    return env


# python-openstackclient 10 ships its own `openstack accelerator …` commands (a port of
# python-cyborgclient's) and skips python-cyborgclient's command classes (they are in its
# shell.IGNORED_MODULES); python-cyborgclient still supplies the accelerator client
# factory. This runs the same `openstack` shell with python-cyborgclient's command
# classes in place of the in-tree ones; neither package is modified.
CYBORGCLIENT_SHELL = """\
import sys
from openstackclient import shell
shell.IGNORED_MODULES = tuple(
    m for m in shell.IGNORED_MODULES if m != "cyborgclient.osc.v2"
) + ("openstackclient.accelerator.v2",)
sys.exit(shell.main(sys.argv[1:]))
"""


class OpenStackCLI:
    """``openstack --os-auth-type none --os-endpoint <url>/v2 …`` in a subprocess."""

    def __init__(self, endpoint: str, implementation: str = "openstackclient") -> None:
        self.endpoint = endpoint
        self.implementation = implementation
        if implementation == "openstackclient":
            self.argv = [_script("openstack")]
        elif implementation == "cyborgclient":
            self.argv = [sys.executable, "-c", CYBORGCLIENT_SHELL]
        else:
            raise ValueError(implementation)

    def run(
        self,
        *args: str,
        version: str | None = None,
        check: bool = True,
        auth: tuple[str, ...] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        if auth is None:
            auth = ("--os-auth-type", "none", "--os-endpoint", self.endpoint)
        argv = [*self.argv, *auth]
        if version is not None:
            argv += ["--os-accelerator-api-version", version]
        argv += list(args)
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, env=env or client_env()
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result

    def json(self, *args: str, version: str | None = None, **kwargs) -> Any:
        """Run a listing or showing command with ``-f json`` and parse its output."""
        return json.loads(self.run(*args, "-f", "json", version=version, **kwargs).stdout)
