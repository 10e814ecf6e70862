"""The API's CPU per operation in-process: the WSGI application called in a loop.

    .venv/bin/python bench/api_inprocess.py --db {sqlite,postgresql,mariadb}
        [--ops N] [--warmup N] [--rounds R] [--scenarios ...] [--profile PATH]

No HTTP server and no client: each operation builds the WSGI environ a server would
(keep-alive HTTP/1.1, noauth, no identity headers) and calls the application
``exosuit.api.deploy.loadapp`` returns, on a fresh database seeded as bench/api.py
seeds it (one host, 10 fake FPGAs with 16 attach handles each). The figure is
process CPU time (``time.process_time``) per operation, the median of ``--rounds``
rounds of ``--ops`` operations each after ``--warmup`` unmeasured ones: what the
application costs, without the server's share (bench/api.py measures both).

``--count`` also counts, per operation, the statements, write commits and round trips
each scenario sends (``count_costs``, which bench/api.py runs too).

``--profile PATH`` also runs each scenario once more under cProfile and writes its
statistics to ``PATH.<scenario>.pstats`` (read them with ``python -m pstats``).
Figures and how they were used: doc/benchmarks.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.api import (  # noqa: E402
    ARQ_PROFILE,
    DEPLOYABLES,
    HANDLES,
    HOSTNAME,
    BenchDatabase,
    BenchError,
    arq_cycle,
    profile_cycle,
)
from tests.helpers.inventory import fpga, snapshot  # noqa: E402

SCENARIOS = (
    "version",
    "deployables",
    "profile",
    "arq",
    "arq_nowait",
    "report",
    "report_usage",
    "new_host",
)


class InProcessClient:
    """Calls a WSGI application as a server would; ``request`` returns (status, body)."""

    def __init__(self, app) -> None:
        self.app = app
        self.requests = 0
        self.writes = 0  # requests that change something (not GET or HEAD)

    def request(self, method: str, path: str, body=None, headers=None) -> tuple[int, bytes]:
        path, _, query = path.partition("?")
        if isinstance(body, bytes):
            data = body
        else:
            data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        environ = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8080",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1:8080",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(data),
            "wsgi.errors": sys.stderr,
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        for name, value in (headers or {}).items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        if body is not None:
            environ["CONTENT_TYPE"] = "application/json"
            environ["CONTENT_LENGTH"] = str(len(data))
        status: list[str] = []
        self.requests += 1
        self.writes += method not in ("GET", "HEAD")

        def start_response(line, headers, exc_info=None):
            status.append(line)

        chunks = self.app(environ, start_response)
        try:
            payload = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        return int(status[0].split(" ", 1)[0]), payload


def _expect(status: int, body: bytes, expected: int, what: str) -> None:
    if status != expected:
        raise BenchError(f"{what}: HTTP {status} (expected {expected}): {body[:300]!r}")


class Scenarios:
    """The operations of bench/api.py, in-process (one client)."""

    def __init__(self, client: InProcessClient, rp_uuids: list[str]) -> None:
        self.client = client
        self.rp_uuids = rp_uuids
        self.count = 0
        self.held: dict[str, str] = {}
        self.new_hosts: list[tuple[str, bytes]] = []

    def prepare_new_hosts(self, count: int) -> None:
        from exosuit.agent.snapshot import build_snapshot
        from exosuit.drivers import DriverContext
        from exosuit.drivers.simulated import SimulatedDriver

        shape = {"nvidia_gpu": 6, "fake_fpga": 2}
        for i in range(count):
            name = f"new-{os.getpid()}-{i:06d}"
            driver = SimulatedDriver(DriverContext(hostname=name, settings={"devices": shape}))
            body = build_snapshot(name, [driver])
            self.new_hosts.append((name, json.dumps(body, separators=(",", ":")).encode()))

    def _unchanged(self, usage: bool) -> None:
        """An agent's unchanged report (its hash only, ``usage``: with 8 devices' live
        figures), naming the desired state it holds, as exosuit-agent sends it."""
        if not self.held:
            status, body = self.client.request("GET", f"/agent/v1/hosts/{HOSTNAME}/desired_state")
            _expect(status, body, 200, "GET desired_state")
            self.held["generation"] = str(json.loads(body)["generation"])
            report = {"schema_version": 1, "hash": _seed_hash, "hostname": HOSTNAME}
            figures = {"utilization_percent": 42, "memory_used_bytes": 2**33}
            self.held["plain"] = json.dumps(report, separators=(",", ":"))
            report["usage"] = {f"pci-0000:{0x10 + i:02x}:00.0": figures for i in range(8)}
            self.held["usage"] = json.dumps(report, separators=(",", ":"))
        status, body = self.client.request(
            "PUT",
            f"/agent/v1/hosts/{HOSTNAME}/inventory",
            self.held["usage" if usage else "plain"].encode(),
            {"Exosuit-Desired-Generation": self.held["generation"]},
        )
        _expect(status, body, 200, "PUT inventory (unchanged)")

    def report(self) -> None:
        self._unchanged(usage=False)

    def new_host(self) -> None:
        """A new host's first snapshot: 8 simulated devices (6 GPUs, 2 FPGAs), as
        bench/bootstorm.py's agents send it (encoded before the clock starts)."""
        name, body = self.new_hosts.pop()
        _expect(*self.client.request("PUT", f"/agent/v1/hosts/{name}/inventory", body), 200, name)

    def report_usage(self) -> None:
        self._unchanged(usage=True)

    def version(self) -> None:
        _expect(*self.client.request("GET", "/v2"), 200, "GET /v2")

    def deployables(self) -> None:
        _expect(*self.client.request("GET", "/v2/deployables"), 200, "GET /v2/deployables")

    def profile(self) -> None:
        self.count += 1
        profile_cycle(self.client, f"bench-{os.getpid()}-{self.count}")

    def _next_rp(self) -> str:
        rp_uuid = self.rp_uuids[self.count % len(self.rp_uuids)]
        self.count += 1
        return rp_uuid

    def arq(self) -> None:
        arq_cycle(self.client, self._next_rp())

    def arq_nowait(self) -> None:
        arq_cycle(self.client, self._next_rp(), wait=False)


_seed_hash = ""


def seed(client: InProcessClient) -> list[str]:
    global _seed_hash
    devices = [fpga(f"0000:{0x10 + i:02x}:00.0", handles=HANDLES) for i in range(DEPLOYABLES)]
    body = snapshot(HOSTNAME, devices)
    _seed_hash = body["hash"]
    status, body = client.request("PUT", f"/agent/v1/hosts/{HOSTNAME}/inventory", body)
    _expect(status, body, 200, "PUT inventory")
    status, body = client.request("GET", "/v2/deployables")
    _expect(status, body, 200, "GET /v2/deployables")
    deployables = json.loads(body)["deployables"]
    groups = [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]
    status, body = client.request(
        "POST", "/v2/device_profiles", [{"name": ARQ_PROFILE, "groups": groups}]
    )
    _expect(status, body, 201, "POST /v2/device_profiles")
    return [d["rp_uuid"] for d in deployables]


def count_costs(
    db_url: str,
    names: list[str],
    *,
    ops: int = 20,
    warmup: int = 3,
    rp_uuids: list[str] | None = None,
) -> dict[str, dict]:
    """What one operation of each scenario in ``names`` sends to the database at
    ``db_url``, counted in-process (the application exosuit-api serves, called
    directly, one client, after ``warmup`` unmeasured operations). Per operation:
    ``requests``; ``writes`` (requests other than GET); ``statements`` (every SQL
    statement but BEGIN/COMMIT/ROLLBACK, the cache's counter reads included);
    ``commits`` and ``rollbacks`` of write transactions; ``transactions`` (write
    transactions begun); ``round_trips`` to the server, counted on the wire by
    bench/costs.py's RoundTripProxy (None on SQLite: no server). The database must
    be seeded as ``seed`` does, ``rp_uuids`` its deployables' providers (or empty:
    seeded here)."""
    import sqlalchemy as sa

    from bench.costs import RoundTripProxy, StatementCounter, per_op
    from exosuit.api.deploy import loadapp
    from exosuit.conf import make_conf
    from exosuit.db.api import Database

    proxy = None
    if sa.make_url(db_url).get_backend_name() != "sqlite":
        proxy = RoundTripProxy.for_url(db_url)
    db = Database(proxy.url(db_url) if proxy else db_url)
    workdir = tempfile.mkdtemp(prefix="exosuit-bench-count-")
    results: dict[str, dict] = {}
    try:
        conf = make_conf([], state_path=workdir, host=HOSTNAME)
        conf.set_override("new_device_activation", "ready", group="inventory")
        app = loadapp(conf, db)
        client = InProcessClient(app)
        scenarios = Scenarios(client, rp_uuids or seed(client))
        # The reads of the report cache's counter go on a connection of their own.
        reader = getattr(app.application.host_reports.version, "read", None)
        readers = (reader,) if hasattr(reader, "direct_reads") else ()
        with StatementCounter(db, readers) as counter:
            for name in names:
                op = getattr(scenarios, name)
                for _ in range(warmup):
                    op()
                before, trips = counter.counts(), proxy and proxy.count
                requests, writes = client.requests, client.writes
                for _ in range(ops):
                    op()
                after = counter.counts()
                counts: dict[str, int | None] = {
                    key: after[key] - before[key] for key in counter.KEYS
                }
                counts["requests"] = client.requests - requests
                counts["writes"] = client.writes - writes
                counts["round_trips"] = proxy.count - trips if proxy else None
                results[name] = {"ops": ops, **per_op(counts, ops)}
    finally:
        db.dispose()
        if proxy is not None:
            proxy.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def measure(op, ops: int, warmup: int, rounds: int) -> list[float]:
    """CPU milliseconds per operation, one figure per round."""
    for _ in range(warmup):
        op()
    figures = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(ops):
            op()
        figures.append((time.process_time() - start) * 1000 / ops)
    return figures


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="bench/api_inprocess.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--db", choices=("sqlite", "postgresql", "mariadb"), default="sqlite")
    parser.add_argument("--mysql-driver", choices=("pymysql", "mysqldb"), default="pymysql")
    parser.add_argument("--ops", type=int, default=300, help="Operations per round (300).")
    parser.add_argument("--warmup", type=int, default=50, help="Unmeasured operations (50).")
    parser.add_argument("--rounds", type=int, default=3, help="Measured rounds (3).")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--profile", metavar="PATH", help="Write cProfile statistics too.")
    parser.add_argument(
        "--count",
        action="store_true",
        help="Also count statements, write commits and round trips per operation "
        "(count_costs; ``--ops`` operations per scenario).",
    )
    args = parser.parse_args(argv)
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from exosuit.api.deploy import loadapp
    from exosuit.conf import make_conf
    from exosuit.db import migration
    from exosuit.db.api import Database

    workdir = tempfile.mkdtemp(prefix="exosuit-bench-inprocess-")
    database = db = None
    try:
        database = BenchDatabase(args.db, workdir, args.mysql_driver)
        db = Database(database.url)
        migration.upgrade(db)
        conf = make_conf([], state_path=workdir, host=HOSTNAME)
        if "inventory" in conf and "new_device_activation" in conf.inventory:
            # The bench binds what its agent reports: new devices ready (doc/devices.md).
            conf.set_override("new_device_activation", "ready", group="inventory")
        client = InProcessClient(loadapp(conf, db))
        rp_uuids = seed(client)
        scenarios = Scenarios(client, rp_uuids)
        load = os.getloadavg()[0]
        print(f"in-process, {args.db}, load average {load:.2f} at start")
        if "new_host" in args.scenarios:
            scenarios.prepare_new_hosts(args.warmup + args.ops * (args.rounds + 1))
        for name in args.scenarios:
            op = getattr(scenarios, name)
            figures = measure(op, args.ops, args.warmup, args.rounds)
            spread = ", ".join(f"{f:.3f}" for f in figures)
            print(f"  {name:12} {statistics.median(figures):.3f} ms CPU/op ({spread})")
            if args.profile:
                profiler = cProfile.Profile(time.thread_time)  # CPU, not waits
                profiler.runcall(measure, op, args.ops, 0, 1)
                profiler.dump_stats(f"{args.profile}.{name}.pstats")
        if args.count:
            names = [n for n in args.scenarios if n not in ("report", "report_usage", "new_host")]
            counted = count_costs(database.url, names, ops=args.ops, rp_uuids=rp_uuids)
            for name, c in counted.items():
                trips = "-" if c["round_trips"] is None else f"{c['round_trips']:g}"
                print(
                    f"  {name:12} per op: {c['requests']:g} requests, "
                    f"{c['statements']:g} statements, {c['commits']:g} commits, "
                    f"{c['rollbacks']:g} rollbacks, {trips} round trips"
                )
    finally:
        if db is not None:
            db.dispose()
        if database is not None:
            database.drop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        print(f"bench/api_inprocess.py: {error}", file=sys.stderr)
        sys.exit(1)
