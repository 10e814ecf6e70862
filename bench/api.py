"""Benchmark exosuit-api: real API workers, a real database, a lean keep-alive client.

    .venv/bin/python bench/api.py --db {sqlite,postgresql,mariadb,galera} [--workers N]
        [--threads T] [--duration S] [--concurrency 1,8] [--scenarios ...] [--json PATH]
        [--floor-commits N] [--count-ops N] [--settle] [--target {exosuit,cyborg}]

Figures and the machine they were measured on: doc/benchmarks.md.

What it does, in order:

1. creates a fresh database (a SQLite file in a temporary folder, a new database
   on the local PostgreSQL / MariaDB server, or on a private 3-node Galera cluster
   that it starts: bench/galera.py) and runs ``exosuit-manage db upgrade``;
2. starts ``exosuit-api`` (noauth) on a free loopback port;
3. seeds one host through the agent API: 10 fake FPGAs with 16 attach handles each,
   so ``GET /v2/deployables`` returns exactly 10 deployables;
4. measures the commit floor on that database (bench/costs.py ``commit_floor``: one
   row inserted and committed, durably, through the same driver, ``--floor-commits``
   times, on 1 connection and on as many as each concurrency below);
5. counts what one operation of each scenario sends to the database, in-process
   (bench/api_inprocess.py ``count_costs``: the same application called directly,
   ``--count-ops`` operations): writes, statements, commits, round trips;
6. runs every scenario sequentially (1 connection) and N-way concurrently (N
   connections, one client process each, closed loop), after a short warm-up:

   * ``deployables``: ``GET /v2/deployables``;
   * ``profile``: ``POST /v2/device_profiles`` + ``DELETE /v2/device_profiles/{uuid}``;
   * ``arq``: Nova's cycle for a server with one accelerator: ``POST
     /v2/accelerator_requests``, the ``PATCH`` bind, ``GET ?instance=`` until every ARQ
     of the instance is resolved (Bound, BindFailed or Deleting), as nova-compute polls
     (one GET when the bind needs no work on its host, as here), and ``DELETE
     ?instance=``: 4 requests (noauth without identity headers is an admin with a
     service token, so binds are allowed);
   * ``arq_nowait`` (not run by default): the same without the GET, 3 requests;
   * ``version`` (not run by default): ``GET /v2``, no database: what the server
     and the framework cost alone;

   and reads the database server's own counters (bench/costs.py ``ServerCounters``)
   when the clients start and when they are done;
7. prints ops/s, requests/s and p50/p95 latency per scenario, with the CPU used by
   the client processes, the API processes and the whole machine (in cores); then
   the costs per operation (below); optionally writes all of it as JSON;
8. stops the server and drops the database, whatever happened.

``--target cyborg`` runs the same client, scenarios, floor and counters against
OpenStack Cyborg 17 instead (bench/cyborg.py: cyborg-api under gunicorn with the same
workers and threads, cyborg-conductor, on a fresh MariaDB database and the local
RabbitMQ, the bench's host seeded into Cyborg's tables); the API CPU is then
cyborg-api's and cyborg-conductor's, and there is no in-process count.

Costs per operation (issue 25), the second table:

* ``writes``: requests that change something (not GET) per operation, as the client
  sent them: each must answer after its change is durable, so each needs one durable
  commit at least;
* ``commits``, ``stmts``, ``trips``: durable (write) commits, SQL statements (BEGIN,
  COMMIT and ROLLBACK aside) and round trips to the database server per operation,
  counted in-process (step 5; round trips on the wire by a counting proxy, so what
  the driver adds is in: psycopg2 sends BEGIN as a round trip of its own, PyMySQL
  none; "-" on SQLite, which has no server, and for Cyborg). Machine-independent;
* ``srv stmts``, ``srv commits``: what the database server counted over the HTTP run,
  per operation. MariaDB: ``Questions`` and ``Com_commit`` of ``SHOW GLOBAL STATUS``,
  the whole server's, so other clients of the same server (other work on the
  machine) are counted too: an upper bound. PostgreSQL: ``xact_commit`` of the bench's
  database only, which counts every transaction (each autocommit read too), and no
  statements (unless pg_stat_statements is loaded); only with ``--settle``, because
  PostgreSQL reports its counts up to 10 s late (each run then waits about 11 s before
  and after). None on SQLite;
* ``API CPU ms``, ``DB CPU ms``: CPU milliseconds per operation of the exosuit-api
  processes and of the local database server's processes (every client's work on
  that server: an upper bound);
* ``floor ms``: ``writes`` × the commit floor's median latency with as many
  connections; ``floor ops/s``: the operations per second the commit floor alone
  allows: sequentially 1000 / ``floor ms``, N-way the floor's commits per second with
  N connections / ``writes`` (group commit included);
* ``gap x``: how many times slower than that floor: sequentially the operation's
  median latency / ``floor ms``, N-way ``floor ops/s`` / measured ops/s. It divides by
  the least number of durable commits the operation needs (``writes``), not by the
  commits it makes, so that extra commits show in the gap too (compare ``commits``
  with ``writes``). The floor is measured on the same database in the same run, so the
  gap is comparable across machines and loads far better than ops/s; it still moves
  with the load (write the load average beside it).

The client speaks HTTP/1.1 over raw keep-alive sockets (a request is one
``sendall``; a response is parsed by Content-Length), so that on a 2-core machine
it costs a few percent of a core and the server, not the client, is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import multiprocessing
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench._common import cpu_spent, database_growth, database_size, db_server_cpu  # noqa: E402
from bench.costs import ServerCounters, commit_floor, per_op  # noqa: E402
from tests.helpers.inventory import fpga, snapshot  # noqa: E402

BIN = os.path.dirname(sys.executable)
HOSTNAME = "bench-host"
DEPLOYABLES = 10
HANDLES = 16
ARQ_PROFILE = "bench-arq"
ADMIN_URLS = {
    "postgresql": os.environ.get(
        "EXOSUIT_TEST_POSTGRESQL_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
    ),
    "mariadb": os.environ.get("EXOSUIT_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/"),
}
SCENARIOS = {
    "version": "GET /v2 (no database)",
    "deployables": "GET /v2/deployables",
    "profile": "device profile POST+DELETE",
    "arq": "ARQ create+bind+wait+delete",
    "arq_nowait": "ARQ create+bind+delete",
}


class BenchError(Exception):
    pass


# Headers every request carries (``--target cyborg``: the identity keystonemiddleware
# would set), encoded; the client processes are forked and inherit them.
_EXTRA_HEADERS = b""


# --- the client ---------------------------------------------------------------------------


class Connection:
    """One HTTP/1.1 keep-alive connection; ``request`` returns (status, body bytes)."""

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self.host = f"{host}:{port}".encode()
        self.sock: socket.socket | None = None
        self.buffer = bytearray()
        self.requests = 0
        self.writes = 0  # requests other than GET

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.buffer.clear()
        return sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def request(self, method: str, path: str, body=None) -> tuple[int, bytes]:
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\n%s" % (
            method.encode(),
            path.encode(),
            self.host,
            _EXTRA_HEADERS,
        )
        data = b""
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
        sock = self.sock or self._connect()
        sock.sendall(head + b"\r\n" + data)
        self.requests += 1
        self.writes += method != "GET"
        return self._response()

    def _recv(self) -> None:
        chunk = self.sock.recv(262144)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def _response(self) -> tuple[int, bytes]:
        buffer = self.buffer
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            self._recv()
        lines = bytes(buffer[:end]).split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                raise BenchError(f"unsupported Transfer-Encoding: {value.strip().decode()}")
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        start = end + 4
        if length is None:
            if status in (204, 304) or status < 200:
                length = 0
            else:  # the body runs to the end of the connection
                with contextlib.suppress(ConnectionError):
                    while True:
                        self._recv()
                length, close = len(buffer) - start, True
        while len(buffer) < start + length:
            self._recv()
        body = bytes(buffer[start : start + length])
        del buffer[: start + length]
        if close:
            self.close()
        return status, body


def _expect(status: int, body: bytes, expected: int, what: str) -> None:
    if status != expected:
        raise BenchError(f"{what}: HTTP {status} (expected {expected}): {body[:300]!r}")


# --- scenarios: one operation each, returning nothing, raising BenchError ------------------

# What an ARQ's state is once its bind is over, for Nova (nova-observed.md): it stops
# polling when every ARQ of the instance is in one of these.
RESOLVED = ("Bound", "BindFailed", "Deleting")
# How long a cycle waits for its bind to be resolved before the run fails.
BIND_WAIT = 30.0


def profile_cycle(client, name: str) -> None:
    """``POST /v2/device_profiles`` + ``DELETE /v2/device_profiles/{uuid}``; ``client``
    is any object with ``request(method, path, body=None) -> (status, body)``."""
    status, body = client.request(
        "POST", "/v2/device_profiles", [{"name": name, "groups": [{"resources:FPGA": "1"}]}]
    )
    _expect(status, body, 201, "POST /v2/device_profiles")
    profile_uuid = json.loads(body)["uuid"]
    status, body = client.request("DELETE", f"/v2/device_profiles/{profile_uuid}")
    _expect(status, body, 204, "DELETE /v2/device_profiles/{uuid}")


def arq_cycle(client, rp_uuid: str, wait: bool = True) -> None:
    """Nova's cycle for one server with one accelerator: ``POST
    /v2/accelerator_requests``, one ``PATCH`` binding it to ``rp_uuid`` on the bench's
    host, then (``wait``) ``GET /v2/accelerator_requests?instance=`` until every ARQ of
    the instance is resolved, as nova-compute polls (the first answer already is when
    the bind needs no work on the host), and ``DELETE ?instance=``. A bind that ends
    other than Bound fails the run."""
    status, body = client.request(
        "POST", "/v2/accelerator_requests", {"device_profile_name": ARQ_PROFILE}
    )
    _expect(status, body, 201, "POST /v2/accelerator_requests")
    (arq,) = json.loads(body)["arqs"]
    instance = str(uuid.uuid4())
    status, body = client.request(
        "PATCH",
        "/v2/accelerator_requests",
        {
            arq["uuid"]: [
                {"op": "add", "path": "/hostname", "value": HOSTNAME},
                {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
                {"op": "add", "path": "/instance_uuid", "value": instance},
            ]
        },
    )
    _expect(status, body, 202, "PATCH /v2/accelerator_requests (bind)")
    if wait:
        deadline = time.monotonic() + BIND_WAIT
        while True:
            status, body = client.request("GET", f"/v2/accelerator_requests?instance={instance}")
            _expect(status, body, 200, "GET /v2/accelerator_requests?instance=")
            arqs = json.loads(body)["arqs"]
            if not arqs:  # an error for Nova too
                raise BenchError(f"GET ?instance={instance}: no ARQ")
            states = {a["state"] for a in arqs}
            if states <= set(RESOLVED):
                break
            if time.monotonic() > deadline:
                raise BenchError(f"instance {instance}: ARQs still {sorted(states)}")
            time.sleep(0.005)
        if states != {"Bound"}:
            raise BenchError(f"instance {instance}: bind ended {sorted(states)}")
    status, body = client.request("DELETE", f"/v2/accelerator_requests?instance={instance}")
    _expect(status, body, 204, "DELETE /v2/accelerator_requests?instance=")


class Scenario:
    """The per-client state of a scenario (``op`` is one measured operation)."""

    def __init__(self, name: str, client_id: int, rp_uuids: list[str]) -> None:
        self.name = name
        self.client_id = client_id
        self.rp_uuids = rp_uuids
        self.count = 0
        self.op = getattr(self, f"_{name}")

    def _version(self, conn: Connection) -> None:
        status, body = conn.request("GET", "/v2")
        _expect(status, body, 200, "GET /v2")

    def _deployables(self, conn: Connection) -> None:
        status, body = conn.request("GET", "/v2/deployables")
        _expect(status, body, 200, "GET /v2/deployables")

    def _profile(self, conn: Connection) -> None:
        self.count += 1
        profile_cycle(conn, f"bench-{os.getpid()}-{self.client_id}-{self.count}")

    def _next_rp(self) -> str:
        # Each client walks the deployables from its own starting point, so that
        # concurrent binds spread over the devices (and share them as well).
        rp_uuid = self.rp_uuids[(self.client_id + self.count) % len(self.rp_uuids)]
        self.count += 1
        return rp_uuid

    def _arq(self, conn: Connection) -> None:
        arq_cycle(conn, self._next_rp())

    def _arq_nowait(self, conn: Connection) -> None:
        arq_cycle(conn, self._next_rp(), wait=False)


def _client(name, client_id, address, rp_uuids, warmup, duration, ready, go, results) -> None:
    """One client process: warm up, wait for the start, run the closed loop, report."""
    try:
        conn = Connection(*address)
        scenario = Scenario(name, client_id, rp_uuids)
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            scenario.op(conn)
        ready.put(client_id)
        idle = time.perf_counter()
        go.wait()
        if time.perf_counter() - idle > 2:
            # The server may have closed the idle keep-alive connection meanwhile (the
            # parent let PostgreSQL's counters settle): start on a new one.
            conn.close()
        cpu0 = os.times()
        requests0, writes0 = conn.requests, conn.writes
        latencies = []
        start = time.perf_counter()
        end = start + duration
        now = start
        while now < end:
            scenario.op(conn)
            done = time.perf_counter()
            latencies.append(done - now)
            now = done
        cpu1 = os.times()
        conn.close()
        results.put(
            {
                "client": client_id,
                "latencies": latencies,
                "requests": conn.requests - requests0,
                "writes": conn.writes - writes0,
                "elapsed": now - start,
                "cpu": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
            }
        )
    except BaseException as error:  # reported to the parent, which fails the run
        ready.put(client_id)
        results.put({"client": client_id, "error": f"{type(error).__name__}: {error}"})


# --- CPU accounting from /proc -------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _process_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK  # utime, stime


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _api_cpu(masters) -> dict[int, tuple[float, float]]:
    """(user, system) CPU seconds of each of the API's processes: ``masters`` and
    their children."""
    pids = [p for master in masters for p in (master, *_children(master))]
    return {pid: _process_cpu(pid) for pid in pids}


# Galera: the three nodes of a cluster on this machine (and any other mariadbd here).
def _machine_busy() -> float:
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / _TICK


# --- running a scenario -------------------------------------------------------------------


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    index = min(len(values) - 1, max(0, round(fraction * len(values)) - 1))
    return values[index]


def run_scenario(name: str, clients: int, args, address, rp_uuids, api_pids, counters=None) -> dict:
    """One scenario with ``clients`` clients; ``counters`` (bench/costs.py's
    ServerCounters, or None) are read when the clients start and when they are done
    (``args.settle``: once PostgreSQL has reported its idle backends' counts)."""
    ctx = multiprocessing.get_context("fork")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=_client,
            args=(name, i, address, rp_uuids, args.warmup, args.duration, ready, go, results),
            daemon=True,
        )
        for i in range(clients)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=args.warmup + 120)
        server0 = _server_counters(counters, args)
        db0 = db_server_cpu(args.db)
        api0, machine0, wall0 = _api_cpu(api_pids), _machine_busy(), time.perf_counter()
        go.set()
        reports = [results.get(timeout=args.duration + 300) for _ in procs]
        wall = time.perf_counter() - wall0
        api1, machine1 = _api_cpu(api_pids), _machine_busy()
        db1 = db_server_cpu(args.db)
        server1 = _server_counters(counters, args)
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise BenchError(f"{name} with {clients} client(s): " + "; ".join(sorted(set(errors))))
    latencies = [x for r in reports for x in r["latencies"]]
    elapsed = max(r["elapsed"] for r in reports)
    ops = len(latencies)
    api_user = sum(cpu[0] - api0.get(pid, (0.0, 0.0))[0] for pid, cpu in api1.items())
    api_sys = sum(cpu[1] - api0.get(pid, (0.0, 0.0))[1] for pid, cpu in api1.items())
    api_cpu = api_user + api_sys
    server = None
    if server0 is not None and server1 is not None:
        server = per_op(counters.delta(server0, server1), ops)
    return {
        "scenario": name,
        "description": SCENARIOS[name],
        "clients": clients,
        "ops": ops,
        "requests": sum(r["requests"] for r in reports),
        "seconds": round(elapsed, 3),
        "ops_per_s": round(ops / elapsed, 1),
        "requests_per_s": round(sum(r["requests"] for r in reports) / elapsed, 1),
        # Requests that change something (not GET) per operation, as the client sent them.
        "writes_per_op": round(sum(r["writes"] for r in reports) / ops, 2) if ops else None,
        "p50_ms": round(_percentile(latencies, 0.50) * 1000, 2),
        "p95_ms": round(_percentile(latencies, 0.95) * 1000, 2),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 2) if latencies else None,
        # CPU in cores (CPU seconds per wall second) while the scenario ran.
        "client_cpu": round(sum(r["cpu"] for r in reports) / wall, 2),
        "api_cpu": round(api_cpu / wall, 2),
        # CPU milliseconds of the API processes per operation: stable under outside load.
        "api_cpu_ms_per_op": round(api_cpu * 1000 / ops, 2) if ops else None,
        "api_cpu_system_share": round(api_sys / api_cpu, 2) if api_cpu else None,
        "db_server_cpu": round(cpu_spent(db0, db1) / wall, 2),
        # CPU milliseconds of the local database server per operation (any client's
        # work on that server while the scenario ran: an upper bound).
        "db_cpu_ms_per_op": round(cpu_spent(db0, db1) * 1000 / ops, 2) if ops else None,
        "machine_cpu": round((machine1 - machine0) / wall, 2),
        # What the database server counted per operation (bench/costs.py), or None.
        "server_per_op": server,
    }


def _server_counters(counters, args) -> dict | None:
    """A snapshot of the server's counters, or None (none, or PostgreSQL unsettled)."""
    if counters is None or counters.backend == "sqlite":
        return None
    if counters.backend == "postgresql":
        return counters.settle() if args.settle else None
    return counters.snapshot()


def add_costs(result: dict, counted: dict | None, floors: dict[int, dict]) -> None:
    """Add to ``result`` (one scenario's) its costs per operation (``counted``: the
    in-process count pass's figures for the scenario) and its gap to the commit floor
    measured with as many connections (``floors``): see the module's docstring."""
    floor = floors.get(result["clients"])
    costs: dict = {
        key: None if counted is None else counted.get(key)
        for key in ("statements", "commits", "rollbacks", "round_trips")
    }
    costs["writes"] = result["writes_per_op"]
    costs["api_cpu_ms"] = result["api_cpu_ms_per_op"]
    costs["db_cpu_ms"] = result["db_cpu_ms_per_op"]
    server = result.get("server_per_op") or {}
    costs["server_statements"] = server.get("statements")
    costs["server_commits"] = server.get("commits")
    costs["floor_ms"] = costs["floor_ops_per_s"] = costs["gap"] = None
    writes = costs["writes"]
    if floor is not None and writes:
        costs["floor_ms"] = round(writes * floor["p50_ms"], 3)
        if result["clients"] == 1:
            costs["floor_ops_per_s"] = round(1000 / costs["floor_ms"], 1)
            costs["gap"] = round(result["p50_ms"] / costs["floor_ms"], 1)
        else:
            costs["floor_ops_per_s"] = round(floor["commits_per_s"] / writes, 1)
            costs["gap"] = round(costs["floor_ops_per_s"] / result["ops_per_s"], 1)
    result["costs"] = costs


# --- database, server and seed ------------------------------------------------------------


class BenchDatabase:
    """A fresh database on the chosen backend, dropped by ``drop``."""

    def __init__(self, backend: str, workdir: str, mysql_driver: str = "pymysql") -> None:
        self.backend = backend
        self.name = f"exosuit_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.engine = None
        self.cluster: contextlib.ExitStack | None = None
        if backend == "sqlite":
            self.url = f"sqlite:///{workdir}/exosuit.sqlite"
            return
        if backend == "galera":
            from bench._common import galera_database

            self.cluster = contextlib.ExitStack()
            self.url = self.cluster.enter_context(galera_database(workdir))
            return
        import sqlalchemy as sa

        admin = sa.make_url(ADMIN_URLS[backend])
        self.engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with self.engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {self.name}")
        url = admin.set(database=self.name)
        if backend == "mariadb":
            url = url.set(drivername=f"mysql+{mysql_driver}")
        self.url = url.render_as_string(hide_password=False)

    def drop(self) -> None:
        if self.cluster is not None:
            self.cluster.close()  # the database dropped, a private cluster stopped
        if self.engine is None:
            return
        force = " WITH (FORCE)" if self.backend == "postgresql" else ""
        with self.engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {self.name}{force}")
        self.engine.dispose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(path: str, args, url: str, port: int, workdir: str) -> None:
    lines = [
        "[DEFAULT]",
        f"state_path = {workdir}",
        f"host = {HOSTNAME}",
        "[api]",
        "auth_strategy = noauth",
        "host_ip = 127.0.0.1",
        f"port = {port}",
    ]
    if args.workers is not None:
        lines.append(f"workers = {args.workers}")
    if args.threads is not None:
        lines.append(f"threads = {args.threads}")
    lines += ["[database]", f"connection = {url}"]
    # The bench binds what its agents report: new devices ready, as before activation.
    lines += ["[inventory]", "new_device_activation = ready"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class Server:
    """``exosuit-api`` as a child process (its own process group), stopped by ``stop``."""

    def __init__(self, config: str, port: int, log_path: str, command: str | None) -> None:
        self.port = port
        self.log_path = log_path
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        if command:
            argv = shlex.split(command.format(config=config, port=port, bin=BIN))
        else:
            argv = [os.path.join(BIN, "exosuit-api"), "--config-file", config]
        self.proc = subprocess.Popen(
            argv,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "EXOSUIT_CONFIG_FILE": config},
        )

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(
                    f"exosuit-api exited with {self.proc.returncode}:\n" + self.log_tail()
                )
            try:
                conn = Connection("127.0.0.1", self.port)
                status, _ = conn.request("GET", "/healthz")
                conn.close()
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise BenchError("exosuit-api did not answer /healthz in time:\n" + self.log_tail())

    def workers(self) -> int:
        return len(_children(self.proc.pid))

    def log_tail(self, lines: int = 30) -> str:
        self.log.flush()
        with open(self.log_path) as f:
            return "".join(f.readlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # gunicorn stops its workers
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # Workers that outlived their master (there should be none) share its group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def seed(address) -> list[str]:
    """One host with DEPLOYABLES fake FPGAs; returns the deployables' RP UUIDs."""
    conn = Connection(*address)
    devices = [fpga(f"0000:{0x10 + i:02x}:00.0", handles=HANDLES) for i in range(DEPLOYABLES)]
    status, body = conn.request(
        "PUT", f"/agent/v1/hosts/{HOSTNAME}/inventory", snapshot(HOSTNAME, devices)
    )
    _expect(status, body, 200, "PUT inventory")
    status, body = conn.request("GET", "/v2/deployables")
    _expect(status, body, 200, "GET /v2/deployables")
    deployables = json.loads(body)["deployables"]
    if len(deployables) != DEPLOYABLES:
        raise BenchError(
            f"GET /v2/deployables returned {len(deployables)} items, not {DEPLOYABLES}"
        )
    status, body = conn.request(
        "POST",
        "/v2/device_profiles",
        [
            {
                "name": ARQ_PROFILE,
                "groups": [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}],
            }
        ],
    )
    _expect(status, body, 201, "POST /v2/device_profiles")
    conn.close()
    return [d["rp_uuid"] for d in deployables]


def check_clean(address) -> None:
    """After the run: no ARQ left, no attach handle held (every cycle undid itself)."""
    conn = Connection(*address)
    status, body = conn.request("GET", "/v2/accelerator_requests")
    _expect(status, body, 200, "GET /v2/accelerator_requests")
    left = json.loads(body)["arqs"]
    conn.close()
    if left:
        raise BenchError(f"{len(left)} ARQ(s) left behind after the run")


# --- output -------------------------------------------------------------------------------


def format_table(results: list[dict]) -> str:
    header = (
        "scenario",
        "clients",
        "ops",
        "ops/s",
        "req/s",
        "p50 ms",
        "p95 ms",
        "client CPU",
        "API CPU",
        "DB CPU",
        "machine CPU",
        "API CPU ms/op",
    )
    rows = [header]
    for r in results:
        rows.append(
            (
                r["description"],
                str(r["clients"]),
                str(r["ops"]),
                f"{r['ops_per_s']:.1f}",
                f"{r['requests_per_s']:.1f}",
                f"{r['p50_ms']:.2f}",
                f"{r['p95_ms']:.2f}",
                f"{r['client_cpu']:.2f}",
                f"{r['api_cpu']:.2f}",
                f"{r['db_server_cpu']:.2f}",
                f"{r['machine_cpu']:.2f}",
                f"{r['api_cpu_ms_per_op']:.2f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _figure(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_costs(results: list[dict]) -> str:
    """Costs per operation (issue 25): what ``add_costs`` added to each result."""
    header = (
        "scenario",
        "clients",
        "p50 ms",
        "ops/s",
        "writes",
        "commits",
        "stmts",
        "trips",
        "srv stmts",
        "srv commits",
        "API CPU ms",
        "DB CPU ms",
        "floor ms",
        "floor ops/s",
        "gap x",
    )
    rows = [header]
    for r in results:
        c = r["costs"]
        rows.append(
            (
                r["description"],
                str(r["clients"]),
                f"{r['p50_ms']:.2f}",
                f"{r['ops_per_s']:.1f}",
                _figure(c["writes"], 0),
                _figure(c["commits"]),
                _figure(c["statements"]),
                _figure(c["round_trips"]),
                _figure(c["server_statements"]),
                _figure(c["server_commits"]),
                _figure(c["api_cpu_ms"]),
                _figure(c["db_cpu_ms"]),
                _figure(c["floor_ms"]),
                _figure(c["floor_ops_per_s"], 1),
                _figure(c["gap"], 1),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_floors(floors: dict[int, dict]) -> str:
    return "; ".join(
        f"x{n}: p50 {f['p50_ms']:.3f} ms, p95 {f['p95_ms']:.3f} ms, "
        f"{f['commits_per_s']:.0f} commits/s"
        for n, f in sorted(floors.items())
    )


def _default_threads() -> int:
    from exosuit.conf import make_conf

    return make_conf([]).api.threads


def _git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="bench/api.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--db",
        choices=("sqlite", "postgresql", "mariadb", "galera"),
        default="sqlite",
        help="Database backend (default sqlite). galera: a private 3-node MariaDB Galera "
        "cluster started for the run (bench/galera.py), or the running one whose node "
        "EXOSUIT_BENCH_GALERA_URL names (an admin URL); exosuit-api on node 1, reads "
        "waiting for the cluster's last commit (wsrep_sync_wait = 1).",
    )
    parser.add_argument(
        "--mysql-driver",
        choices=("pymysql", "mysqldb"),
        default="pymysql",
        help="MariaDB driver: PyMySQL (pure Python, the default) or mysqlclient "
        "(C; pip install -e '.[mysqlclient]').",
    )
    parser.add_argument(
        "--workers", type=int, help="API worker processes ([api] workers; default one per CPU)."
    )
    parser.add_argument(
        "--threads", type=int, help="Threads per API worker ([api] threads; default Exosuit's)."
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=10.0,
        help="Measured seconds per scenario and concurrency (default 10).",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=1.0,
        help="Unmeasured seconds each client runs first (default 1).",
    )
    parser.add_argument(
        "--concurrency",
        default="1,8",
        help="Comma-separated client counts; 1 is sequential (default 1,8).",
    )
    parser.add_argument(
        "--scenarios",
        default="deployables,profile,arq",
        help=f"Comma-separated subset of {', '.join(SCENARIOS)} (default "
        "deployables,profile,arq; 'version' measures the server and "
        "framework alone).",
    )
    parser.add_argument(
        "--target",
        choices=("exosuit", "cyborg"),
        default="exosuit",
        help="The API measured: exosuit-api (default) or Cyborg 17 from .venv-cyborg "
        "(bench/cyborg.py: cyborg-api under gunicorn and cyborg-conductor, on MariaDB and "
        "the local RabbitMQ; no in-process count pass).",
    )
    parser.add_argument(
        "--floor-commits",
        type=int,
        default=300,
        help="Transactions timed for the commit floor at each concurrency (default 300; "
        "0: no floor).",
    )
    parser.add_argument(
        "--count-ops",
        type=int,
        default=20,
        help="Operations of each scenario counted in-process for statements, commits "
        "and round trips per operation (default 20; 0: no count pass).",
    )
    parser.add_argument(
        "--settle",
        action="store_true",
        help="PostgreSQL: read the server's counters around each run once its backends "
        "have reported them (about 11 s before and after each run); without it, "
        "PostgreSQL's server-side columns are left empty.",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="Also write the results as JSON to PATH ('-' for stdout)."
    )
    parser.add_argument("--keep-log", metavar="PATH", help="Copy the server log to PATH.")
    parser.add_argument(
        "--server-command",
        metavar="CMD",
        help="Run CMD instead of exosuit-api, to compare servers or settings; {config}, "
        "{port} and {bin} are replaced, and EXOSUIT_CONFIG_FILE names the configuration "
        "(e.g. '{bin}/gunicorn -k sync -w 8 -b 127.0.0.1:{port} exosuit.wsgi:application').",
    )
    args = parser.parse_args(argv)
    if args.target == "cyborg" and args.db != "mariadb":
        parser.error("--target cyborg runs on --db mariadb only")
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    return args


def measure(args, db_url: str, address, rp_uuids: list[str], api_pids, count: bool = True):
    """The commit floor, the in-process count pass (``count``) and every scenario at
    every concurrency against the API at ``address`` (its processes: ``api_pids`` and
    their children); returns (results, floors, counted, the server counters' scope)."""
    floors: dict[int, dict] = {}
    if args.floor_commits > 0:
        for clients in args.concurrency:
            floors[clients] = commit_floor(
                db_url, n=max(args.floor_commits, clients), concurrency=clients
            )
        print(f"  commit floor: {format_floors(floors)}", file=sys.stderr, flush=True)
    counted: dict[str, dict] = {}
    if count and args.count_ops > 0:
        from bench.api_inprocess import count_costs

        counted = count_costs(db_url, args.scenarios, ops=args.count_ops, rp_uuids=rp_uuids)
    counters = ServerCounters(db_url) if args.db != "sqlite" else None
    scope = "no server: nothing counted server-side"
    results: list[dict] = []
    try:
        for name in args.scenarios:
            for clients in args.concurrency:
                result = run_scenario(name, clients, args, address, rp_uuids, api_pids, counters)
                add_costs(result, counted.get(name), floors)
                results.append(result)
                print(
                    f"  {SCENARIOS[name]} x{clients}: {result['ops_per_s']} ops/s, "
                    f"p50 {result['p50_ms']} ms",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if counters is not None:
            scope = counters.scope
            counters.close()
    check_clean(address)
    return results, floors, counted, scope


def _run_cyborg(args, load_before):
    """``--target cyborg``: bench/cyborg.py's Cyborg 17, measured as Exosuit is."""
    from bench.cyborg import cyborg_target

    global _EXTRA_HEADERS
    workdir = tempfile.mkdtemp(prefix="exosuit-bench-cyborg-")
    threads = args.threads or _default_threads()
    workers = args.workers or os.cpu_count() or 1
    try:
        with cyborg_target(
            workdir,
            ADMIN_URLS["mariadb"],
            workers=workers,
            threads=threads,
            hostname=HOSTNAME,
            deployables=DEPLOYABLES,
            handles=HANDLES,
            profile=ARQ_PROFILE,
            free_port=_free_port,
        ) as target:
            _EXTRA_HEADERS = b"".join(
                b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in target.headers.items()
            )
            print(
                f"Cyborg 17 (cyborg-api under gunicorn, cyborg-conductor) on mariadb: "
                f"{workers} worker(s), {threads} thread(s) each; {args.duration:g} s per "
                f"run; load average {load_before[0]:.2f} at start",
                file=sys.stderr,
                flush=True,
            )
            api_pids = (target.api.pid, target.conductor.pid)
            measured = measure(args, target.url, target.address, target.rp_uuids, api_pids, False)
            if args.keep_log:
                for service in ("api", "conductor"):
                    shutil.copy(
                        os.path.join(workdir, f"cyborg-{service}.log"),
                        f"{args.keep_log}.{service}",
                    )
    except RuntimeError as error:  # Cyborg missing, or it did not start
        raise BenchError(f"Cyborg: {error}") from error
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return (*measured, workers, threads, None)


def _run_exosuit(args, load_before):
    workdir = tempfile.mkdtemp(prefix="exosuit-bench-api-")
    database = server = None
    try:
        database = BenchDatabase(args.db, workdir, args.mysql_driver)
        port = _free_port()
        config = os.path.join(workdir, "exosuit.conf")
        write_config(config, args, database.url, port, workdir)
        upgrade = subprocess.run(
            [os.path.join(BIN, "exosuit-manage"), "db", "upgrade", "--config-file", config],
            capture_output=True,
            text=True,
        )
        if upgrade.returncode:
            raise BenchError("exosuit-manage db upgrade failed:\n" + upgrade.stderr[-3000:])
        server = Server(config, port, os.path.join(workdir, "exosuit-api.log"), args.server_command)
        server.wait_ready()
        address = ("127.0.0.1", port)
        empty = database_size(database.url)
        rp_uuids = seed(address)
        workers = server.workers()
        threads = args.threads or _default_threads()
        print(
            f"exosuit-api on {args.db}: {workers} worker(s), "
            f"{threads} thread(s) each; {args.duration:g} s per run; "
            f"load average {load_before[0]:.2f} at start",
            file=sys.stderr,
            flush=True,
        )
        measured = measure(args, database.url, address, rp_uuids, (server.proc.pid,))
        # What the runs left in the database (audit records, Nova's notification jobs,
        # which no conductor runs here): rows and bytes added since the schema was made.
        grown = database_growth(empty, database_size(database.url), 1)
        left = {"bytes_added": grown["bytes_added"], "rows_added": grown["rows_added"]}
    finally:
        if server is not None:
            server.stop()
            if args.keep_log:
                shutil.copy(server.log_path, args.keep_log)
        if database is not None:
            database.drop()
        shutil.rmtree(workdir, ignore_errors=True)
    return (*measured, workers, threads, left)


def main(argv=None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()
    run = _run_cyborg if args.target == "cyborg" else _run_exosuit
    results, floors, counted, server_scope, workers, threads, left = run(args, load_before)
    name = "Cyborg 17" if args.target == "cyborg" else "Exosuit"
    load_after = os.getloadavg()
    print(
        f"\n{name} API benchmark: {args.db}, {workers} API worker(s) x "
        f"{threads} thread(s), {args.duration:g} s per run, "
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} before / "
        f"{load_after[0]:.2f} after"
    )
    print(format_table(results))
    print(
        "CPU columns are cores busy while the scenario ran: client processes, the API's "
        "processes (exosuit-api; Cyborg: cyborg-api and cyborg-conductor), the local "
        "database server, the whole machine (the rest is other work)."
    )
    print(
        f"\nCosts per operation (issue 25); commit floor on this database: {format_floors(floors)}"
    )
    print(format_costs(results))
    print(
        "writes: requests other than GET per operation. commits, stmts (SQL statements) "
        "and trips (round trips to the database server) per operation: counted in-process "
        "(bench/api_inprocess.py count_costs; Exosuit only). "
        f"srv: what the server counted ({server_scope}). floor ms: writes x the commit "
        "floor's p50; floor ops/s: the floor's rate; gap x: how far from it (the module's "
        "docstring)."
    )
    if args.json:
        report = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "commit": _git_commit(),
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
            "target": args.target,
            "db": args.db,
            "mysql_driver": args.mysql_driver if args.db == "mariadb" else None,
            "api_workers": workers,
            "api_threads": threads,
            "duration": args.duration,
            "warmup": args.warmup,
            "results": results,
            "database_added": left,
            "commit_floor": {str(n): f for n, f in floors.items()},
            "counted_in_process": counted,
            "server_counters": server_scope,
        }
        text = json.dumps(report, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        print(f"bench/api.py: {error}", file=sys.stderr)
        sys.exit(1)
