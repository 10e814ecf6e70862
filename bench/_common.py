"""Shared pieces of the benchmarks: databases, an exosuit-api process, a lean async client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import sqlalchemy as sa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
ADMIN_URLS = {
    "postgresql": os.environ.get("EXOSUIT_BENCH_POSTGRESQL_URL",
                                 "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"),
    "mariadb": os.environ.get("EXOSUIT_BENCH_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def fresh_database(backend: str, workdir: str):
    """A new empty database URL on ``backend``; dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{workdir}/bench.sqlite"
        return
    admin = sa.make_url(ADMIN_URLS[backend])
    name = f"exosuit_bench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            force = " WITH (FORCE)" if backend == "postgresql" else ""
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
        engine.dispose()


@contextlib.contextmanager
def api_server(db_url: str, *, workers: int, threads: int, extra: str = ""):
    """exosuit-api (gunicorn) on a free port, schema created; yields the base URL."""
    with tempfile.TemporaryDirectory(prefix="exosuit-bench-") as workdir:
        port = free_port()
        config = os.path.join(workdir, "exosuit.conf")
        with open(config, "w") as f:
            f.write(f"[DEFAULT]\nstate_path = {workdir}\n"
                    f"[database]\nconnection = {db_url}\nmax_pool_size = {threads + 2}\n"
                    f"[api]\nhost_ip = 127.0.0.1\nport = {port}\nworkers = {workers}\n"
                    f"threads = {threads}\n{extra}")
        subprocess.run([os.path.join(BIN, "exosuit-manage"), "db", "upgrade",
                        "--config-file", config], check=True, capture_output=True)
        log = open(os.path.join(workdir, "api.log"), "w")
        process = subprocess.Popen([os.path.join(BIN, "exosuit-api"), "--config-file", config],
                                   stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(url + "/", timeout=1).read()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        log.flush()
                        raise RuntimeError("exosuit-api did not start: "
                                           + open(log.name).read()[-2000:]) from None
                    time.sleep(0.2)
            yield url, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
            log.close()


class Connection:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams (no client library in the
    way of measuring the server)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body: bytes | None = None,
                      headers: dict | None = None) -> tuple[int, dict, bytes]:
        for attempt in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
            for key, value in (headers or {}).items():
                head.append(f"{key}: {value}")
            if body is not None:
                head.append("Content-Type: application/json")
                head.append(f"Content-Length: {len(body)}")
            data = ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")
            try:
                self.writer.write(data)
                await self.writer.drain()
                status_line = await self.reader.readline()
                if not status_line:
                    raise ConnectionResetError("closed")
                status = int(status_line.split()[1])
                response_headers = {}
                while True:
                    line = await self.reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    key, _, value = line.decode().partition(":")
                    response_headers[key.strip().lower()] = value.strip()
                length = int(response_headers.get("content-length", "0"))
                payload = await self.reader.readexactly(length) if length else b""
                if response_headers.get("connection", "").lower() == "close":
                    await self.close()
                return status, response_headers, payload
            except (ConnectionError, asyncio.IncompleteReadError):
                await self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def dumps(data) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
