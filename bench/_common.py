"""Shared pieces of the benchmarks: databases, an exosuit-api process, a lean async client."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid

import sqlalchemy as sa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
ADMIN_URLS = {
    "postgresql": os.environ.get(
        "EXOSUIT_BENCH_POSTGRESQL_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
    ),
    "mariadb": os.environ.get("EXOSUIT_BENCH_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def fresh_database(backend: str, workdir: str):
    """A new empty database URL on ``backend``; dropped afterwards (``galera``:
    ``galera_database``)."""
    if backend == "sqlite":
        yield f"sqlite:///{workdir}/bench.sqlite"
        return
    if backend == "galera":
        with galera_database(workdir) as url:
            yield url
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
def galera_database(workdir: str):
    """A new empty database on a MariaDB Galera cluster; yields node 1's URL, its reads
    waiting for the cluster's last commit (``wsrep_sync_wait = 1``, as
    doc/deploy-galera.md says to run behind a load balancer). The cluster is the one whose
    node ``EXOSUIT_BENCH_GALERA_URL`` names (an admin URL, e.g.
    ``mysql+pymysql://root@127.0.0.1:PORT/``), or else a private 3-node cluster started
    in ``workdir`` by bench/galera.py and stopped afterwards. The database is dropped."""
    from bench.galera import GaleraCluster, galera_missing

    name = f"exosuit_bench_{uuid.uuid4().hex[:8]}"
    sync_wait = "?init_command=" + urllib.parse.quote("SET SESSION wsrep_sync_wait = 1")
    running = os.environ.get("EXOSUIT_BENCH_GALERA_URL")
    if running:
        admin = sa.make_url(running)
        engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        try:
            yield admin.set(database=name).render_as_string(hide_password=False) + sync_wait
        finally:
            with engine.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
            engine.dispose()
        return
    missing = galera_missing()
    if missing:
        raise RuntimeError(f"no Galera cluster can start here: {missing}")
    print("starting a private 3-node Galera cluster (bench/galera.py) …", file=sys.stderr)
    cluster = GaleraCluster(workdir)
    try:
        cluster.start()
        urls = cluster.create_database(name)
        yield urls[0] + sync_wait
    finally:
        cluster.stop()


def database_size(db_url: str) -> dict:
    """What the database at ``db_url`` holds: ``rows`` of each table (exact counts) and
    ``bytes``, the tables' size with their indexes and TOAST (PostgreSQL:
    ``pg_total_relation_size``; MariaDB and Galera: ``data_length + index_length`` of
    ``information_schema.tables`` after ``ANALYZE TABLE``, InnoDB pages in use, on the
    node the URL names; None on SQLite)."""
    url = sa.make_url(db_url)
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            tables = sorted(sa.inspect(conn).get_table_names())
            count = sa.select(sa.func.count())
            rows = {t: conn.scalar(count.select_from(sa.table(t))) for t in tables}
            if url.get_backend_name() == "sqlite":
                size = None
            elif url.get_backend_name() == "postgresql":
                size = conn.exec_driver_sql(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN "
                    "pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.relkind = 'r' AND n.nspname = current_schema()"
                ).scalar()
            else:
                for table in tables:
                    conn.exec_driver_sql(f"ANALYZE TABLE {table}").all()
                size = conn.exec_driver_sql(
                    "SELECT sum(data_length + index_length) FROM information_schema.tables "
                    "WHERE table_schema = DATABASE()"
                ).scalar()
    finally:
        engine.dispose()
    return {"bytes": None if size is None else int(size), "rows": rows}


def database_growth(empty: dict, full: dict, hosts: int) -> dict:
    """What ``hosts`` added to the database between two ``database_size`` readings:
    bytes (tables and indexes) and rows of each table that grew, in all and per host."""
    grown = {
        table: count - empty["rows"].get(table, 0)
        for table, count in full["rows"].items()
        if count != empty["rows"].get(table, 0)
    }
    added = None if full["bytes"] is None else full["bytes"] - empty["bytes"]
    return {
        "bytes": full["bytes"],
        "bytes_added": added,
        "bytes_per_host": None if added is None else round(added / hosts),
        "rows_added": grown,
        "rows_per_host": {table: round(n / hosts, 2) for table, n in grown.items()},
    }


@contextlib.contextmanager
def api_server(
    db_url: str, *, workers: int, threads: int, extra: str = "", env: dict[str, str] | None = None
):
    """exosuit-api (gunicorn) on a free port, schema created; yields the base URL and the
    process (``env``: more of its environment)."""
    with tempfile.TemporaryDirectory(prefix="exosuit-bench-") as workdir:
        port = free_port()
        config = os.path.join(workdir, "exosuit.conf")
        with open(config, "w") as f:
            f.write(
                f"[DEFAULT]\nstate_path = {workdir}\n"
                f"[database]\nconnection = {db_url}\nmax_pool_size = {threads + 2}\n"
                f"[api]\nhost_ip = 127.0.0.1\nport = {port}\nworkers = {workers}\n"
                f"threads = {threads}\n{extra}"
                # The benches bind what agents report: new devices ready, as before
                # activation existed (doc/devices.md).
                "[inventory]\nnew_device_activation = ready\n"
            )
        subprocess.run(
            [os.path.join(BIN, "exosuit-manage"), "db", "upgrade", "--config-file", config],
            check=True,
            capture_output=True,
        )
        log = open(os.path.join(workdir, "api.log"), "w")
        process = subprocess.Popen(
            [os.path.join(BIN, "exosuit-api"), "--config-file", config],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        url = f"http://127.0.0.1:{port}"
        try:
            # Generous: a busy machine (CI shares two cores) starts it slowly.
            deadline = time.monotonic() + 120
            while True:
                try:
                    urllib.request.urlopen(url + "/", timeout=1).read()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        log.flush()
                        raise RuntimeError(
                            "exosuit-api did not start: " + open(log.name).read()[-2000:]
                        ) from None
                    time.sleep(0.2)
            yield url, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)  # reaped: never left running behind
            log.close()


class Connection:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams (no client library in the
    way of measuring the server)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict | None = None
    ) -> tuple[int, dict, bytes]:
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


def encode_request(
    host: str, port: int, method: str, path: str, body: bytes, headers: dict | None = None
) -> bytes:
    """One HTTP/1.1 keep-alive request, encoded once (``blast`` sends it as it is)."""
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
    head += [f"{key}: {value}" for key, value in (headers or {}).items()]
    head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def blast(
    host: str, port: int, requests: list[bytes], concurrency: int, seconds: float
) -> tuple[list[float], dict[int, int]]:
    """Send ``requests`` (encoded by ``encode_request``) round-robin for ``seconds`` over
    ``concurrency`` keep-alive connections, one request in flight on each (no
    pipelining): a single-threaded loop on non-blocking sockets, so that the client's
    own CPU per request is a few microseconds of parsing, not an HTTP library's. Each
    response is read whole (its headers and ``Content-Length`` bytes of body). Returns
    each request's latency in seconds and the count of each status."""
    import selectors

    selector = selectors.DefaultSelector()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    state = {}  # socket -> [next index, sent at, buffer]
    count = len(requests)
    for offset in range(concurrency):
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        state[sock] = [offset, time.perf_counter(), b""]
        sock.send(requests[offset % count])
        selector.register(sock, selectors.EVENT_READ)
    deadline = time.monotonic() + seconds
    try:
        while state and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=1.0):
                sock = key.fileobj
                entry = state[sock]
                data = sock.recv(65536)
                if not data:
                    raise ConnectionResetError("the server closed a connection")
                buffer = entry[2] + data
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    entry[2] = buffer
                    continue
                head = buffer[:end].lower()
                at = head.find(b"\r\ncontent-length:")
                length = int(head[at + 17 : head.find(b"\r\n", at + 2)]) if at >= 0 else 0
                if len(buffer) < end + 4 + length:
                    entry[2] = buffer
                    continue
                now = time.perf_counter()
                latencies.append(now - entry[1])
                status = int(buffer[9:12])
                statuses[status] = statuses.get(status, 0) + 1
                entry[2] = buffer[end + 4 + length :]
                entry[0] += concurrency
                entry[1] = now
                sock.send(requests[entry[0] % count])
    finally:
        selector.close()
        for sock in state:
            sock.close()
    return latencies, statuses


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def dumps(data) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


# --- a PostgreSQL of its own, and a Placement that can be stopped and started again ------


def _pg_bindir() -> str:
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(os.path.realpath(found))
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not candidates:
        raise RuntimeError("initdb not found: install PostgreSQL's server package")
    return os.path.dirname(candidates[-1])


class PrivatePostgres:
    """A PostgreSQL cluster of its own in ``workdir`` (``initdb``), on a free loopback
    port, started and stopped with ``pg_ctl``; trust authentication for ``postgres``.

    initdb and the server refuse to run as root: when this process is root, the
    cluster's folder belongs to the ``postgres`` user and every command runs as that
    user through ``runuser -u postgres --`` (``workdir`` must then be reachable by it).
    """

    def __init__(self, workdir: str, *, port: int | None = None, user: str = "postgres") -> None:
        self.bindir = _pg_bindir()
        self.dir = os.path.join(workdir, "postgresql")
        self.datadir = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "postgresql.log")
        self.port = port or free_port()
        self.as_user = user if os.geteuid() == 0 else None
        self.url = f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str, timeout: float = 120) -> None:
        argv = [os.path.join(self.bindir, tool), *args]
        if self.as_user:
            argv = ["runuser", "-u", self.as_user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode:
            raise RuntimeError(f"{tool} {' '.join(args)} failed: {done.stdout}{done.stderr}")

    def init(self) -> None:
        os.makedirs(self.dir)
        if self.as_user:
            import pwd

            entry = pwd.getpwnam(self.as_user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self._run(
            "initdb",
            "-D",
            self.datadir,
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c max_connections=300"
        )
        self._run(
            "pg_ctl",
            "-D",
            self.datadir,
            "-l",
            self.logfile,
            "-o",
            options,
            "-w",
            "-t",
            "120",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """``mode``: ``fast`` (clients disconnected, clean shutdown) or ``immediate``
        (every server process killed at once, recovery at the next start: a crash)."""
        self._run("pg_ctl", "-D", self.datadir, "-m", mode, "-w", "-t", "120", "stop")

    def running(self) -> bool:
        return os.path.exists(os.path.join(self.datadir, "postmaster.pid"))

    def create_database(self, name: str) -> str:
        engine = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
        finally:
            engine.dispose()
        return sa.make_url(self.url).set(database=name).render_as_string(hide_password=False)


class PlacementProcess:
    """OpenStack Placement (the openstack-placement package) served by
    tests/placement/placement_server.py on a fixed loopback port, with its own SQLite
    database (``placement-manage db sync``) and ``auth_strategy = noauth2`` (token
    ``admin``); it can be stopped and started again on the same port. One request at
    a time: concurrent writers on Placement's SQLite fail with "database is locked"."""

    def __init__(self, workdir: str, *, threads: int = 1) -> None:
        self.dir = os.path.join(workdir, "placement")
        os.makedirs(self.dir, exist_ok=True)
        self.threads = threads
        # An explicit port, even the first time: cheroot sets SO_REUSEADDR only on
        # explicit ports, and a restart must bind while old connections linger.
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logfile = os.path.join(self.dir, "placement.log")
        self.process: subprocess.Popen | None = None
        self.conf = os.path.join(self.dir, "placement.conf")
        with open(self.conf, "w") as f:
            f.write(
                "[DEFAULT]\ndebug = false\n[api]\nauth_strategy = noauth2\n"
                f"[placement_database]\nconnection = sqlite:///{self.dir}/placement.sqlite\n"
            )
        manage = os.path.join(BIN, "placement-manage")
        if not os.path.exists(manage):
            manage = shutil.which("placement-manage")
        if manage is None:
            raise RuntimeError("openstack-placement is not installed: pip install -e '.[test]'")
        subprocess.run(
            [manage, "--config-file", self.conf, "db", "sync"], check=True, capture_output=True
        )
        import sqlite3

        # WAL: Placement's readers and its writer do not block each other.
        with sqlite3.connect(os.path.join(self.dir, "placement.sqlite")) as db:
            db.execute("PRAGMA journal_mode=WAL")

    def start(self, timeout: float = 60) -> None:
        runner = os.path.join(ROOT, "tests", "placement", "placement_server.py")
        with open(self.logfile, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, runner, self.dir, "--port", str(self.port)]
                + ["--threads", str(self.threads)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(self.url + "/", timeout=2).read()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        "Placement did not start: " + open(self.logfile).read()[-2000:]
                    ) from None
                time.sleep(0.1)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


# --- what a phase costs: CPU of the API, of the database server, of the machine ---------

_TICK = os.sysconf("SC_CLK_TCK")
# Galera: the three nodes of a cluster on this machine (and any other mariadbd here).
_DB_PROCESSES = {
    "mariadb": ("mariadbd", "mysqld"),
    "galera": ("mariadbd", "mysqld"),
    "postgresql": ("postgres",),
}


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of one process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (granian's and gunicorn's workers)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rpartition(")")[2].split()[1])
            except OSError:
                continue
    found, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found.extend(frontier)
    return found


def db_server_cpu(backend: str) -> dict[int, float]:
    """CPU seconds of each of the local database server's processes (any client's work:
    an upper bound of the benchmark's share); empty for SQLite (its work is the API's).
    Compare two readings with ``cpu_spent``."""
    names = _DB_PROCESSES.get(backend)
    if not names:
        return {}
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() not in names:
                    continue
        except OSError:
            continue
        found[int(entry)] = process_cpu(int(entry))
    return found


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings (pid: CPU) by the processes alive at the
    second (a process started meanwhile: all of its CPU). The CPU of a process that ended
    meanwhile (a PostgreSQL backend of another client) is lost, never subtracted: the
    figure is never negative."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy (every core, every process)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / _TICK


class CpuMeter:
    """CPU spent over a phase by the API's processes (``api_pid`` and its workers), the
    database server, this process (the client) and the whole machine, with the load
    average before and at the end: ``start()``, then ``stop(count)`` gives the figures,
    per accepted operation in milliseconds where ``count`` is given."""

    def __init__(self, api_pid: int, backend: str) -> None:
        self.api_pid = api_pid
        self.backend = backend

    def _api(self) -> dict[int, float]:
        return {pid: process_cpu(pid) for pid in descendants(self.api_pid)}

    def start(self) -> None:
        self.load_before = os.getloadavg()[0]
        self.api0, self.db0 = self._api(), db_server_cpu(self.backend)
        self.client0, self.machine0 = time.process_time(), machine_busy()
        self.wall0 = time.monotonic()

    def stop(self, count: int) -> dict:
        wall = time.monotonic() - self.wall0
        api1 = self._api()
        api = cpu_spent(self.api0, api1)
        db = cpu_spent(self.db0, db_server_cpu(self.backend))
        client = time.process_time() - self.client0
        machine = machine_busy() - self.machine0
        per = (lambda cpu: round(cpu * 1000 / count, 3)) if count else (lambda cpu: None)
        return {
            "seconds": round(wall, 1),
            "accepted": count,
            "api_cpu_ms_per_report": per(api),
            "db_cpu_ms_per_report": per(db),
            "client_cpu_ms_per_report": per(client),
            "machine_cpu_ms_per_report": per(machine),
            "api_cores": round(api / wall, 2),
            "db_cores": round(db / wall, 2),
            "client_cores": round(client / wall, 2),
            "machine_cores": round(machine / wall, 2),
            "load_before": round(self.load_before, 2),
            "load_at_end": round(os.getloadavg()[0], 2),
        }
