"""A real ``exosuit serve`` per test module, and the real ``exosuit`` console script.

``server`` starts ``exosuit serve`` once per module (host ``cli-host``, pages of at
most ``PAGE`` items so that lists span pages); ``cli`` runs ``.venv/bin/exosuit``
against it in a subprocess, with no OS_* variables and no EXOSUIT_URL of the caller.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import termios
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers.serve_fixture import ExosuitServer, _script

HOST = "cli-host"
PAGE = 3  # [api] max_limit: every list longer than this comes in several pages
TIMEOUT = 60


def write_conf(path: Path, text: str = "") -> Path:
    path.write_text(f"[DEFAULT]\nhost = {HOST}\n[api]\nmax_limit = {PAGE}\n{text}")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("exosuit-cli")
    started = ExosuitServer(base / "data", [write_conf(base / "exosuit.conf")])
    try:
        yield started.start()
    finally:
        started.kill()


def cli_env(**extra: str) -> dict[str, str]:
    """Our environment without the caller's cloud or endpoint settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OS_") and k not in ("EXOSUIT_URL", "NO_COLOR")
    }
    env.update(extra)
    return env


class CLI:
    """``exosuit --os-endpoint URL …`` as a user runs it: a process, its exit status,
    its stdout and stderr."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.script = _script("exosuit")

    def run(
        self, *args: str, check: bool = True, endpoint: bool = True, env=None, timeout=TIMEOUT
    ) -> subprocess.CompletedProcess:
        argv = [self.script, *(["--os-endpoint", self.url] if endpoint else []), *args]
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env or cli_env()
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result

    def json(self, *args: str, **kwargs) -> Any:
        return json.loads(self.run(*args, "-f", "json", **kwargs).stdout)


@pytest.fixture(scope="module")
def cli(server) -> CLI:
    return CLI(server.url)


class API:
    """The API itself, for the data the command line's output is checked against."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _headers(self, version: str) -> dict[str, str]:
        return {"OpenStack-API-Version": f"accelerator {version}"}

    def get(self, path: str, version: str = "2.4", **params) -> Any:
        r = requests.get(self.url + path, headers=self._headers(version), params=params, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    def list(self, path: str, key: str, version: str = "2.4", **params) -> list[dict]:
        """Every item, following ``next``."""
        body = self.get(path, version, **params)
        items = body[key]
        while "next" in body:
            r = requests.get(body["next"], headers=self._headers(version), timeout=10)
            body = r.json()
            items += body[key]
        return items

    def post(self, path: str, body: Any, version: str = "2.4") -> Any:
        r = requests.post(self.url + path, json=body, headers=self._headers(version), timeout=10)
        assert r.status_code in (200, 201), r.text
        return r.json()

    def max_version(self) -> str:
        return self.get("/v2")["max_version"]


@pytest.fixture(scope="module")
def api(server) -> API:
    return API(server.url)


def pick(items: list[dict], columns: tuple[str, ...]) -> list[dict]:
    """What ``-f json`` shows of API items: exactly ``columns``, in order."""
    return [{c: item.get(c) for c in columns} for item in items]


def run_on_terminal(argv: list[str], columns: int, env: dict[str, str]) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal ``columns`` wide as stdin, stdout and stderr;
    its exit status and everything it wrote."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**env, "TERM": "xterm", "PAGER": "cat"}
    env.pop("COLUMNS", None)
    process = subprocess.Popen(
        argv, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True
    )
    os.close(follower)
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the other end is closed: the process is done
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=60), output.decode().replace("\r\n", "\n")
