"""Boot storm: N simulated agents report their hosts at once to one exosuit-api.

    .venv/bin/python bench/bootstorm.py --db postgresql --hosts 10000
    .venv/bin/python bench/bootstorm.py --db galera --hosts 1000 --no-agent

``--db galera`` starts a private 3-node Galera cluster (bench/galera.py) and runs
exosuit-api on node 1. After the storm the database's size and rows are read
(``database_after_storm``: bytes of tables and indexes, and rows per table, added per
host; doc/capacity.md).

Phases:

1. storm: every agent waits a random first-report jitter (as exosuit-agent does),
   then PUTs its whole snapshot (8 devices by default), honouring 429 +
   Retry-After and backing off on errors. Measures the time until every host's
   inventory is acknowledged and checks the database holds all of it (no report
   lost after retries).
2. unchanged: every agent reports again with only its hash (what an agent sends
   when nothing changed); measures reports per second. Then again with the drivers'
   live usage in each report (``usage``: a few figures per device, outside the hash,
   as an agent with UsageReader drivers sends it; doc/devices.md): the API keeps it at
   most once per ``[api] report_age_resolution``, so a report still writes nothing.
   The unchanged phases' client (``--client raw``, the default since 2026-11-26) sends
   requests encoded before the clock starts on non-blocking keep-alive sockets from
   one thread, one request in flight per connection: about 0.025 ms of CPU per
   report against 0.07 ms for the asyncio client (``--client asyncio``) of the figures
   before, on a 2-core machine where the client's CPU is the server's loss.
   Then ``--changed-hosts`` hosts report a changed snapshot (one device's firmware
   version), all at once.

Each phase's cost is measured as figures that travel between a busy and a quiet
machine: the CPU time of the API's processes, of the database server and of this
client per accepted report, with the load average before and at its end; the SQL
statements and commits per report of each kind are counted in-process (the same
application called directly on the same database).

After the storm the database is ANALYZEd (as autovacuum would be; ``--no-analyze``).

Power cut (after the other phases; ``--power-cut-minutes 0`` leaves it out):
exosuit-api restarts on the same database (its caches cold), every host's last report
moves ``--power-cut-minutes`` back, and every host's agent reports as a restarted
exosuit-agent with its cache does, within ``--power-cut-jitter``: half the hash only
(their report time then written), a quarter a device unhealthy, a quarter a device
missing (``_power_cut_reports``). Measures the time until all are acknowledged, the
statuses (5xx, 429), the CPU and server transactions per report, then reads every host
and device back through the API (``power_cut_visible``).

3. agent: a real `exosuit-agent run` process (simulated and pci drivers, 8 simulated
   devices), installed as on a host (`--agent-bin host`, the default: its own
   virtualenv holding the package and its runtime dependencies only, made with `pip
   install` under `--agent-cache` and reused while the package's files are the same):
   its resident memory after it has reported. Then a second one with uevents on,
   reading a copy of a recorded sysfs tree (`--uevent-fixture`, driver
   `--uevent-driver`): a device's NUMA node is changed in the copy, a real kernel
   uevent is written to one of this machine's PCI functions, and the time until the
   change is visible in the API is measured `--uevent-repeats` times (median and
   max; the goal is under 0.5 s). Needs root for the uevent; otherwise it says why it
   was skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import (  # noqa: E402
    BIN,
    ROOT,
    Connection,
    CpuMeter,
    api_server,
    blast,
    database_growth,
    database_size,
    dumps,
    encode_request,
    fresh_database,
    percentile,
)
from bench.costs import commit_floor  # noqa: E402
from exosuit.agent.snapshot import build_snapshot  # noqa: E402
from exosuit.drivers import DriverContext  # noqa: E402
from exosuit.drivers.simulated import SimulatedDriver  # noqa: E402
from exosuit.schemas import device_identity, snapshot_hash  # noqa: E402

# The header an agent names the desired state it holds with (doc/agent-api.md).
HOLDS = "Exosuit-Desired-Generation"


def _snapshots(
    hosts: int, shape: dict[str, int], prefix: str = "storm"
) -> list[tuple[str, bytes, str, dict]]:
    """(hostname, snapshot body, hash, the usage its drivers would read) of each host."""
    out = []
    for i in range(hosts):
        name = f"{prefix}-{i:05d}"
        driver = SimulatedDriver(DriverContext(hostname=name, settings={"devices": shape}))
        snapshot = build_snapshot(name, [driver])
        out.append((name, dumps(snapshot), snapshot["hash"], _usage(snapshot, i)))
    return out


def _usage(snapshot: dict, seed: int) -> dict:
    """Live figures of each device, as UsageReader drivers return them: a GPU's
    utilisation and memory, an FPGA's error count."""
    rng = random.Random(seed)
    usage = {}
    for device in snapshot["devices"]:
        identity = device_identity(device["controlpath_id"])
        if device["type"] == "GPU":
            usage[identity] = {
                "utilization_percent": rng.randint(0, 100),
                "memory_used_bytes": rng.randint(0, 80) * 2**30,
                "memory_total_bytes": 80 * 2**30,
            }
        else:
            usage[identity] = {"errors_total": rng.randint(0, 3)}
    return usage


async def _storm(
    url: str,
    snapshots,
    concurrency: int,
    jitter: float,
    held: dict[str, int],
    *,
    holds: bool = False,
) -> dict:
    """Every snapshot PUT once it is released (``held``: each host's desired-state
    generation from its answer, which the simulated agent then holds; ``holds``: each
    report names it in ``Exosuit-Desired-Generation``, as a restarted agent with its
    cache does)."""
    host, port = url.split("//")[1].split(":")
    port = int(port)
    queue: asyncio.Queue = asyncio.Queue()
    start = time.monotonic()
    stats: dict = {"requests": 0, "429": 0, "5xx": 0, "errors": 0, "latencies": []}
    stats["statuses"] = {}
    done_at: list[float] = []

    async def release(item):
        await asyncio.sleep(random.uniform(0, jitter))
        await queue.put(item)

    async def worker():
        conn = Connection(host, int(port))
        while True:
            item = await queue.get()
            if item is None:
                break
            name, body, _, _ = item
            t0 = time.monotonic()
            extra = {HOLDS: str(held[name])} if holds and name in held else None
            try:
                status, headers, payload = await conn.request(
                    "PUT", f"/agent/v1/hosts/{name}/inventory", body, extra
                )
            except OSError:
                stats["errors"] += 1
                asyncio.get_running_loop().create_task(_later(queue, item, 1.0))
                continue
            stats["requests"] += 1
            stats["statuses"][status] = stats["statuses"].get(status, 0) + 1
            if status >= 500:
                stats["5xx"] += 1
            if status == 200:
                stats["latencies"].append(time.monotonic() - t0)
                done_at.append(time.monotonic() - start)
                desired = json.loads(payload).get("desired_state")
                if desired is not None:  # none: the one held is current
                    held[name] = desired["generation"]
                if len(done_at) == len(snapshots):
                    for _ in range(concurrency):
                        queue.put_nowait(None)
            elif status == 429:
                stats["429"] += 1
                delay = float(headers.get("retry-after", "1"))
                asyncio.get_running_loop().create_task(_later(queue, item, delay))
            else:
                stats["errors"] += 1
                print(f"  {name}: {status} {payload[:200]!r}", file=sys.stderr)
                asyncio.get_running_loop().create_task(_later(queue, item, 1.0))
        await conn.close()

    releases = [asyncio.create_task(release(item)) for item in snapshots]
    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.gather(*releases)
    await asyncio.gather(*workers)
    stats["all_acknowledged_s"] = max(done_at)
    return stats


async def _later(queue, item, delay):
    await asyncio.sleep(delay)
    await queue.put(item)


async def _unchanged(
    url: str,
    snapshots,
    concurrency: int,
    seconds: float,
    held: dict[str, int],
    *,
    usage: bool = False,
    client: str = "raw",
) -> dict:
    """Hash-only reports for ``seconds`` (``usage``: each carrying its host's usage), each
    naming the desired state its agent holds, as exosuit-agent does. ``client``: "raw"
    (``blast``: the requests encoded before the clock starts, sent on non-blocking
    sockets from one thread) or "asyncio" (``Connection``, each request encoded as it
    goes: several times the client's CPU per report)."""
    host, port = url.split("//")[1].split(":")
    bodies = [
        (
            name,
            dumps(
                {
                    "schema_version": 1,
                    "hash": h,
                    "hostname": name,
                    **({"usage": u} if usage else {}),
                }
            ),
        )
        for name, _, h, u in snapshots
    ]
    if client == "raw":
        requests = [
            encode_request(
                host,
                int(port),
                "PUT",
                f"/agent/v1/hosts/{name}/inventory",
                body,
                {HOLDS: str(held[name])},
            )
            for name, body in bodies
        ]
        start = time.monotonic()
        latencies, statuses = blast(host, int(port), requests, concurrency, seconds)
        return _rates(latencies, statuses, time.monotonic() - start)
    latencies = []
    statuses = {}
    deadline = time.monotonic() + seconds

    async def worker(offset: int):
        conn = Connection(host, int(port))
        i = offset
        while time.monotonic() < deadline:
            name, body = bodies[i % len(bodies)]
            i += concurrency
            t0 = time.monotonic()
            status, _, _ = await conn.request(
                "PUT", f"/agent/v1/hosts/{name}/inventory", body, {HOLDS: str(held[name])}
            )
            latencies.append(time.monotonic() - t0)
            statuses[status] = statuses.get(status, 0) + 1
        await conn.close()

    start = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return _rates(latencies, statuses, time.monotonic() - start)


def _rates(latencies: list[float], statuses: dict[int, int], elapsed: float) -> dict:
    return {
        "reports": len(latencies),
        "per_second": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p95_ms": percentile(latencies, 0.95) * 1000,
        "statuses": statuses,
    }


def _count(url: str, resource: str) -> int:
    total, marker = 0, None
    while True:
        query = f"/v2/{resource}?limit=1000" + (f"&marker={marker}" if marker else "")
        request = urllib.request.Request(
            url + query, headers={"OpenStack-API-Version": "accelerator 2.4"}
        )
        body = json.load(urllib.request.urlopen(request, timeout=60))
        items = body[resource]
        total += len(items)
        if "next" not in body:
            return total
        marker = items[-1]["uuid"]


def _devices_of(url: str, hostname: str) -> list:
    with urllib.request.urlopen(f"{url}/v2/devices?hostname={hostname}", timeout=10) as r:
        return json.load(r)["devices"]


def _agent_phase(url: str, shape: dict[str, int], agent_bin: str) -> dict:
    """A real exosuit-agent: its resident memory once it has reported."""
    with tempfile.TemporaryDirectory(prefix="exosuit-agent-") as workdir:
        config = os.path.join(workdir, "agent.conf")
        shape_text = ",".join(f"{k}:{v}" for k, v in shape.items())

        def write(devices: str) -> None:
            with open(config, "w") as f:
                f.write(
                    f"[DEFAULT]\nhost = bench-agent\nstate_path = {workdir}\n"
                    f"[agent]\napi_url = {url}\nenabled_drivers = simulated,pci\n"
                    "report_interval = 3600\nreport_jitter = 0\nuevents = false\n"
                    f"[simulated]\ndevices = {devices}\n"
                )

        write(shape_text)
        process = subprocess.Popen(
            [agent_bin, "run", "--config-file", config],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            # The pci driver adds what its [pci] device specs name on this machine:
            # none by default.
            while len(_devices_of(url, "bench-agent")) < sum(shape.values()):
                if time.monotonic() > deadline:
                    raise RuntimeError("the agent's devices never appeared")
                time.sleep(0.1)
            time.sleep(1)
            with open(f"/proc/{process.pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            rss_mb = int(status["VmRSS"].split()[0]) / 1024
            hwm_mb = int(status["VmHWM"].split()[0]) / 1024
            return {"agent_rss_mb": round(rss_mb, 1), "agent_peak_rss_mb": round(hwm_mb, 1)}
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)


def _numa_nodes(url: str, hostname: str) -> dict:
    request = urllib.request.Request(
        f"{url}/v2/devices?hostname={hostname}",
        headers={"OpenStack-API-Version": "accelerator 2.4"},
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        return {d["pci_address"]: d["numa_node"] for d in json.load(r)["devices"]}


def _uevent_phase(url: str, fixture: str, driver: str, repeats: int) -> dict:
    """A real exosuit-agent with uevents on: change in its sysfs tree + a real kernel
    uevent → the change visible in the API."""
    uevents = sorted(glob.glob("/sys/bus/pci/devices/*/uevent"))
    if not uevents:
        return {"uevent_visible": "skipped: no PCI device in /sys/bus/pci/devices"}
    hostname = "bench-uevent"
    with tempfile.TemporaryDirectory(prefix="exosuit-uevent-") as workdir:
        root = os.path.join(workdir, "host")
        shutil.copytree(fixture, root, symlinks=True)
        config = os.path.join(workdir, "agent.conf")
        with open(config, "w") as f:
            f.write(
                f"[DEFAULT]\nhost = {hostname}\nstate_path = {workdir}\n"
                f"[agent]\napi_url = {url}\nenabled_drivers = {driver}\n"
                f"sysfs_root = {root}\nreport_interval = 3600\nreport_jitter = 0\n"
                "uevents = true\n"
            )
        log_path = os.path.join(workdir, "agent.log")
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [os.path.join(BIN, "exosuit-agent"), "run", "--config-file", config],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 30
            while not (nodes := _numa_nodes(url, hostname)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the agent found nothing in {fixture} with {driver}")
                time.sleep(0.1)
            with open(log_path) as f:
                if "watching" not in f.read():
                    return {"uevent_visible": "skipped: the agent cannot watch uevents here"}
            address = next(
                a
                for a in sorted(nodes)
                if os.path.exists(os.path.join(root, "sys/bus/pci/devices", a, "numa_node"))
            )
            numa_file = os.path.join(root, "sys/bus/pci/devices", address, "numa_node")
            with open(numa_file) as f:
                original = int(f.read())
            times = []
            for i in range(repeats):
                value = original + 1 if i % 2 == 0 else original
                with open(numa_file, "w") as f:
                    f.write(f"{value}\n")
                started = time.monotonic()
                try:
                    with open(uevents[0], "w") as f:
                        f.write("change")
                except OSError as error:
                    return {"uevent_visible": f"skipped: writing {uevents[0]}: {error}"}
                wanted = value if value >= 0 else None
                while _numa_nodes(url, hostname).get(address) != wanted:
                    if time.monotonic() - started > 30:
                        raise RuntimeError("a change was not visible 30 s after its uevent")
                    time.sleep(0.01)
                times.append(time.monotonic() - started)
                time.sleep(0.3)  # past the agent's pause that coalesces uevent bursts
            return {
                "uevent_visible_median_ms": round(statistics.median(times) * 1000),
                "uevent_visible_max_ms": round(max(times) * 1000),
                "uevent_visible_under_0_5s": max(times) < 0.5,
            }
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--db",
        choices=["sqlite", "postgresql", "mariadb", "galera"],
        default="postgresql",
        help="galera: a private 3-node cluster (bench/galera.py; or the running one whose "
        "node EXOSUIT_BENCH_GALERA_URL names), exosuit-api on node 1",
    )
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument(
        "--shape",
        default="nvidia_gpu:6,fake_fpga:2",
        help="simulated devices per host (8 by default)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=64, help="connections the simulated agents share"
    )
    parser.add_argument(
        "--jitter", type=float, default=10.0, help="first-report jitter of each agent, seconds"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--server",
        choices=["granian", "gunicorn"],
        default="granian",
        help="[api] server of exosuit-api",
    )
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--unchanged-seconds", type=float, default=10.0)
    parser.add_argument(
        "--changed-hosts",
        type=int,
        default=2000,
        help="hosts that then report a changed snapshot (one device's firmware version)",
    )
    parser.add_argument(
        "--uevent-fixture",
        default=os.path.join(ROOT, "tests", "fixtures", "nvidia-gpu-host"),
        help="recorded sysfs tree the uevent agent reads (a copy of it)",
    )
    parser.add_argument("--uevent-driver", default="nvidia_gpu", help="driver of the uevent agent")
    parser.add_argument("--uevent-repeats", type=int, default=10)
    parser.add_argument(
        "--agent-bin",
        default="host",
        help="the exosuit-agent whose memory is measured; 'host' (the default): one "
        "installed as on a host, in a virtualenv of its own with the runtime "
        "dependencies only (made under --agent-cache, reused while the package's files "
        "are unchanged); a path: that one (the repository's .venv also holds the test "
        "tools, which make keystoneauth import osprofiler)",
    )
    parser.add_argument(
        "--agent-cache",
        default=os.environ.get(
            "EXOSUIT_BENCH_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "exosuit-bench")
        ),
        help="where --agent-bin host keeps its virtualenvs",
    )
    parser.add_argument(
        "--agent-only",
        action="store_true",
        help="no storm: only the agent's memory and the uevent latency (SQLite unless --db)",
    )
    parser.add_argument(
        "--api-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an [api] option of exosuit-api (repeatable), e.g. report_cache_size=0 to "
        "measure unchanged reports without the API's cache of host reports",
    )
    parser.add_argument(
        "--client",
        choices=["raw", "asyncio"],
        default="raw",
        help="the unchanged phases' client: raw (the default: requests encoded before the "
        "clock starts, sent on non-blocking keep-alive sockets from one thread, no "
        "pipelining) or asyncio (asyncio streams, each request encoded as it is sent: "
        "the client of the figures before 2026-11-26)",
    )
    parser.add_argument(
        "--no-analyze",
        dest="analyze",
        action="store_false",
        help="no ANALYZE after the storm (the figures before 2026-11-29 were taken so, on a "
        "server with autovacuum off: a changed host's rows then read by sequential scans)",
    )
    parser.add_argument(
        "--power-cut-minutes",
        type=int,
        default=10,
        help="after the other phases, exosuit-api restarts and every host's agent restarts "
        "after a power cut this long (each host's last report moved this far back); 0: "
        "no power-cut phase",
    )
    parser.add_argument(
        "--power-cut-jitter",
        type=float,
        default=10.0,
        help="first-report jitter of each restarted agent, seconds ([agent] report_jitter's "
        "default)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--no-agent",
        action="store_true",
        help="stop after the unchanged reports (no agent process, no uevent)",
    )
    args = parser.parse_args()
    shape = {k: int(v) for k, v in (p.split(":") for p in args.shape.split(","))}
    if args.agent_bin == "host" and not args.no_agent:
        print("an agent installed as on a host …", file=sys.stderr)
        args.agent_bin = host_agent(args.agent_cache)
    if args.agent_only:
        return _agent_only(args, shape)
    print(f"building {args.hosts} snapshots of {sum(shape.values())} devices …", file=sys.stderr)
    snapshots = _snapshots(args.hosts, shape)
    results = {
        "db": args.db,
        "hosts": args.hosts,
        "shape": args.shape,
        "server": args.server,
        "workers": args.workers,
        "threads": args.threads,
        "api_options": args.api_option,
        "concurrency": args.concurrency,
        "jitter_s": args.jitter,
        "unchanged_client": args.client,
    }
    results["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
    held: dict[str, int] = {}
    # What each host's agent last had acknowledged: hostname → (snapshot, hash, usage).
    current = {name: (body, digest, usage) for name, body, digest, usage in snapshots}
    extra = f"server = {args.server}\n" + "".join(f"{o}\n" for o in args.api_option)
    with (
        tempfile.TemporaryDirectory() as workdir,
        fresh_database(args.db, workdir) as db_url,
    ):
        with api_server(db_url, workers=args.workers, threads=args.threads, extra=extra) as (
            url,
            server,
        ):
            _phases(args, shape, snapshots, results, held, current, db_url, url, server)
        if args.power_cut_minutes:
            # exosuit-api restarted too (its caches cold), on the database as it is.
            with api_server(db_url, workers=args.workers, threads=args.threads, extra=extra) as (
                url,
                server,
            ):
                results.update(
                    _power_cut_phase(args, shape, results, held, current, db_url, url, server)
                )
    return _print(results, args)


def _phases(args, shape, snapshots, results, held, current, db_url, url, server) -> None:
    """The phases before the power cut, on the first exosuit-api."""
    meter = CpuMeter(server.pid, args.db)
    # What one durable INSERT + COMMIT costs on this database now (bench/costs.py): the
    # floor the write phases' figures compare with.
    results["commit_floor"] = commit_floor(db_url)
    results["commit_floor_8_connections"] = commit_floor(db_url, concurrency=8)
    empty = database_size(db_url)
    print("storm …", file=sys.stderr)
    transactions = _Transactions(db_url)
    meter.start()
    storm = asyncio.run(_storm(url, snapshots, args.concurrency, args.jitter, held))
    results["storm_cost"] = meter.stop(len(snapshots))
    results["storm_server_transactions_per_host"] = transactions.per(len(snapshots))
    results["storm_all_visible_s"] = round(storm["all_acknowledged_s"], 1)
    results["storm_requests"] = storm["requests"]
    results["storm_429"] = storm["429"]
    results["storm_errors"] = storm["errors"]
    results["storm_5xx"] = storm["5xx"]
    results["storm_p95_ms"] = round(percentile(storm["latencies"], 0.95) * 1000, 1)
    devices = _count(url, "devices")
    results["devices_in_api"] = devices
    results["devices_expected"] = args.hosts * sum(shape.values())
    results["database_after_storm"] = database_growth(empty, database_size(db_url), args.hosts)
    if args.analyze:
        results["analyze_after_storm_s"] = _analyze(db_url)
    print("unchanged reports …", file=sys.stderr)
    meter.start()
    unchanged = asyncio.run(
        _unchanged(
            url, snapshots, args.concurrency, args.unchanged_seconds, held, client=args.client
        )
    )
    results["unchanged_cost"] = meter.stop(unchanged["statuses"].get(200, 0))
    results["unchanged_per_s"] = round(unchanged["per_second"])
    results["unchanged_p50_ms"] = round(unchanged["p50_ms"], 1)
    results["unchanged_p95_ms"] = round(unchanged["p95_ms"], 1)
    results["unchanged_statuses"] = unchanged["statuses"]
    print("unchanged reports with usage …", file=sys.stderr)
    meter.start()
    with_usage = asyncio.run(
        _unchanged(
            url,
            snapshots,
            args.concurrency,
            args.unchanged_seconds,
            held,
            usage=True,
            client=args.client,
        )
    )
    results["unchanged_usage_cost"] = meter.stop(with_usage["statuses"].get(200, 0))
    results["unchanged_usage_per_s"] = round(with_usage["per_second"])
    results["unchanged_usage_p50_ms"] = round(with_usage["p50_ms"], 1)
    results["unchanged_usage_p95_ms"] = round(with_usage["p95_ms"], 1)
    results["unchanged_usage_statuses"] = with_usage["statuses"]
    results["unchanged_usage_bytes"] = len(dumps({"usage": snapshots[0][3]}))
    changed_hosts = snapshots[: args.changed_hosts]
    if changed_hosts:
        print(f"changed reports ({len(changed_hosts)} hosts) …", file=sys.stderr)
        changed_reports = _changed(changed_hosts)
        transactions = _Transactions(db_url)
        meter.start()
        changed = asyncio.run(_storm(url, changed_reports, args.concurrency, 0.0, held))
        current.update({n: (b, h, u) for n, b, h, u in changed_reports})
        results["changed_cost"] = meter.stop(len(changed_hosts))
        results["changed_server_transactions_per_report"] = transactions.per(len(changed_hosts))
        results["changed_per_s"] = round(len(changed_hosts) / changed["all_acknowledged_s"])
        results["changed_429"] = changed["429"]
        results["changed_errors"] = changed["errors"]
    print("statements per report (in-process) …", file=sys.stderr)
    results["statements_per_report"] = _statements(db_url, shape)
    if args.no_agent:
        return
    print("agent process …", file=sys.stderr)
    results["agent_install"] = _install_of(args.agent_bin)
    results.update(_agent_phase(url, shape, args.agent_bin))
    print("uevent → API …", file=sys.stderr)
    results.update(_uevent_phase(url, args.uevent_fixture, args.uevent_driver, args.uevent_repeats))


def _power_cut_phase(args, shape, results, held, current, db_url, url, server) -> dict:
    """Every known host's agent restarts after a power cut of ``--power-cut-minutes``,
    against an exosuit-api restarted too: the time until every report is acknowledged
    (each 200 only once committed), then every host read back through the API."""
    reports, expected = _power_cut_reports(current)
    cut_at = _rewind_reports(db_url, args.power_cut_minutes)
    meter = CpuMeter(server.pid, args.db)
    print(f"power cut ({len(reports)} hosts restart) …", file=sys.stderr)
    transactions = _Transactions(db_url)
    meter.start()
    cut = asyncio.run(
        _storm(url, reports, args.concurrency, args.power_cut_jitter, held, holds=True)
    )
    out: dict = {"power_cut_cost": meter.stop(len(reports))}
    out["power_cut_server_transactions_per_report"] = transactions.per(len(reports))
    out["power_cut_jitter_s"] = args.power_cut_jitter
    out["power_cut_all_acknowledged_s"] = round(cut["all_acknowledged_s"], 1)
    out["power_cut_requests"] = cut["requests"]
    out["power_cut_statuses"] = cut["statuses"]
    out["power_cut_429"] = cut["429"]
    out["power_cut_5xx"] = cut["5xx"]
    out["power_cut_p95_ms"] = round(percentile(cut["latencies"], 0.95) * 1000, 1)
    print("power cut: reading every host back …", file=sys.stderr)
    out["power_cut_visible"] = _power_cut_visible(url, expected, cut_at, sum(shape.values()))
    return out


def _agent_only(args: argparse.Namespace, shape: dict[str, int]) -> int:
    """The agent's memory and the uevent latency, against an empty database."""
    results: dict = {"db": args.db, "load_average_before": [round(x, 2) for x in os.getloadavg()]}
    with (
        tempfile.TemporaryDirectory() as workdir,
        fresh_database(args.db, workdir) as db_url,
        api_server(db_url, workers=1, threads=args.threads) as (url, _),
    ):
        results["agent_install"] = _install_of(args.agent_bin)
        results.update(_agent_phase(url, shape, args.agent_bin))
        results.update(
            _uevent_phase(url, args.uevent_fixture, args.uevent_driver, args.uevent_repeats)
        )
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(
        json.dumps(results, indent=2)
        if args.json
        else "\n".join(f"{k:<26}  {v}" for k, v in results.items())
    )
    return 0


def _package_digest() -> str:
    """A digest of what `pip install` of the repository installs: pyproject.toml and
    the package's files."""
    digest = hashlib.sha256()
    paths = [os.path.join(ROOT, "pyproject.toml")]
    for folder, dirs, files in os.walk(os.path.join(ROOT, "exosuit")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        paths.extend(os.path.join(folder, f) for f in sorted(files) if not f.endswith(".pyc"))
    for path in paths:
        digest.update(os.path.relpath(path, ROOT).encode() + b"\0")
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def host_agent(cache: str) -> str:
    """exosuit-agent installed as on a host: a virtualenv of its own into which `pip
    install <repository>` put the package (not editable) and its runtime dependencies,
    no test extras. Made once per version of the package's files and reused."""
    venv = os.path.join(cache, f"agent-{_package_digest()}")
    agent = os.path.join(venv, "bin", "exosuit-agent")
    if os.path.exists(os.path.join(venv, ".installed")):
        return agent
    os.makedirs(cache, exist_ok=True)
    for old in glob.glob(os.path.join(cache, "agent-*")):
        shutil.rmtree(old, ignore_errors=True)  # other versions of the package
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [os.path.join(venv, "bin", "pip"), "install", "--quiet"]
    done = subprocess.run([*pip, ROOT], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"pip install of {ROOT} failed: {done.stderr[-2000:]}")
    open(os.path.join(venv, ".installed"), "w").close()
    return agent


def _changed(snapshots) -> list[tuple[str, bytes, str, dict]]:
    """Each host's snapshot with its first device's firmware version changed (what a
    firmware update reports): the same devices, one field different."""
    out = []
    for name, body, _, usage in snapshots:
        snapshot = json.loads(body)
        snapshot["devices"][0]["firmware_version"] = "bench-changed"
        snapshot["hash"] = snapshot_hash(
            snapshot["devices"], snapshot["driver_errors"], snapshot.get("drivers")
        )
        out.append((name, dumps(snapshot), snapshot["hash"], usage))
    return out


def _analyze(db_url: str) -> float | None:
    """ANALYZE the database (PostgreSQL, SQLite), as autovacuum would within its naptime
    once the storm grew the tables from nothing (this machine's PostgreSQL runs with
    ``autovacuum = off``: without it the planner keeps the empty tables' statistics and
    reads a changed host's rows by sequential scans); the seconds it took. None on
    MariaDB, whose InnoDB recalculates its statistics itself."""
    import sqlalchemy as sa

    if db_url.startswith(("mysql", "mariadb")):
        return None
    engine = sa.create_engine(db_url, isolation_level="AUTOCOMMIT")
    try:
        started = time.monotonic()
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
        return round(time.monotonic() - started, 1)
    finally:
        engine.dispose()


def _server_transactions(db_url: str) -> int | None:
    """Transactions the PostgreSQL server committed in the benchmark's database so far
    (``pg_stat_database.xact_commit``: every client's, the API's autocommit reads
    included; the statistics are flushed by each backend within a second of its
    transaction, so read after a pause); None on other databases."""
    import sqlalchemy as sa

    if not db_url.startswith("postgresql"):
        return None
    time.sleep(1.5)
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return int(
                conn.exec_driver_sql(
                    "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                ).scalar()
            )
    finally:
        engine.dispose()


class _Transactions:
    """The server's committed transactions per accepted report over a phase."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.before = _server_transactions(db_url)

    def per(self, count: int) -> float | None:
        after = _server_transactions(self.db_url)
        if self.before is None or after is None or not count:
            return None
        return round((after - self.before) / count, 2)


def _power_cut_reports(current: dict[str, tuple[bytes, str, dict]]) -> tuple[list, dict]:
    """What each known host's restarted exosuit-agent sends after a power cut, and what
    the API must then show. An agent restarted with its local cache (agent/cache.py)
    sends only the hash when its discovery finds what the API acknowledged (with its
    usage and the desired generation it holds), else the whole snapshot: half the hosts
    unchanged; of the other half, every other one finds its first device unhealthy
    (``health``), the rest no longer find their last device, which the agent keeps
    reporting through its removal grace (``missing_since``: the API shows it missing).
    Returns the reports (as ``_storm`` takes them) and ``expected``: hostname → (hash,
    what changed: None, ``"unhealthy"`` or ``"missing"``)."""
    reports, expected = [], {}
    for i, name in enumerate(sorted(current)):
        body, digest, usage = current[name]
        if i % 2 == 0:
            hash_only = {"schema_version": 1, "hash": digest, "hostname": name, "usage": usage}
            reports.append((name, dumps(hash_only), digest, usage))
            expected[name] = (digest, None)
            continue
        snapshot = json.loads(body)
        if i % 4 == 1:
            snapshot["devices"][0]["health"] = {"state": "unhealthy", "reason": "bench: power cut"}
            change = "unhealthy"
        else:
            snapshot["devices"][-1]["missing_since"] = "2026-11-29T00:00:00Z"
            change = "missing"
        snapshot["usage"] = usage
        snapshot["hash"] = snapshot_hash(
            snapshot["devices"], snapshot["driver_errors"], snapshot.get("drivers")
        )
        reports.append((name, dumps(snapshot), snapshot["hash"], usage))
        expected[name] = (snapshot["hash"], change)
    return reports, expected


def _pages(url: str, path: str, key: str) -> list[dict]:
    """Every item of a paginated list of the API (its ``next`` links), at microversion
    2.9 (hosts' and devices' fields of then: presence, health)."""
    out, query = [], f"{url}{path}?limit=1000"
    while query:
        request = urllib.request.Request(
            query, headers={"OpenStack-API-Version": "accelerator 2.9"}
        )
        with urllib.request.urlopen(request, timeout=120) as r:
            body = json.load(r)
        out.extend(body[key])
        query = body.get("next")
    return out


def _power_cut_visible(url: str, expected: dict, cut_at: str, per_host: int) -> dict:
    """Whether the API shows every host as its agent reported it after the power cut,
    read through the API (all hosts, all devices): each host's snapshot hash, a report
    time after the cut (an unchanged host's report moved it), its devices, and each
    change (the first device unhealthy, the last one missing)."""
    hosts = {h["hostname"]: h for h in _pages(url, "/v2/hosts", "hosts")}
    devices: dict[str, list[dict]] = {}
    for device in _pages(url, "/v2/devices", "devices"):
        devices.setdefault(device["hostname"], []).append(device)
    wrong_hash = stale = wrong_devices = changes_missing = 0
    for name, (digest, change) in expected.items():
        host = hosts.get(name)
        if host is None or host["snapshot_hash"] != digest:
            wrong_hash += 1
        elif host["last_report_at"] is None or host["last_report_at"] < cut_at:
            stale += 1
        found = devices.get(name, [])
        if len(found) != per_host:
            wrong_devices += 1
        unhealthy = sum(d["health"]["state"] == "unhealthy" for d in found)
        missing = sum(d["presence"] == "missing" for d in found)
        if (unhealthy, missing) != (int(change == "unhealthy"), int(change == "missing")):
            changes_missing += 1
    return {
        "hosts_checked": len(expected),
        "hash_not_visible": wrong_hash,
        "report_time_not_moved": stale,
        "devices_wrong": wrong_devices,
        "change_not_visible": changes_missing,
        "all_consistent": not (wrong_hash or stale or wrong_devices or changes_missing),
    }


def _rewind_reports(db_url: str, minutes: int) -> str:
    """Every host's last report ``minutes`` ago (how long the power was off, so that an
    unchanged report writes its report time, as after a real outage); returns the API's
    form of the time from which a report counts as after the cut (UTC)."""
    import datetime

    import sqlalchemy as sa

    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    engine = sa.create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE hosts SET last_report_at = :old, usage_at = :old"),
                {"old": now - datetime.timedelta(minutes=minutes)},
            )
    finally:
        engine.dispose()
    return now.strftime("%Y-%m-%dT%H:%M:%S")


def _statements(db_url: str, shape: dict[str, int], hosts: int = 20) -> dict:
    """SQL statements and commits per accepted report of each kind, counted in-process
    (the application ``exosuit-api`` serves, called directly, on the same database):
    ``hosts`` new hosts, their changed snapshots, then hash-only reports without and
    with usage."""
    import datetime

    import sqlalchemy as sa
    import webob

    from exosuit.api.deploy import loadapp
    from exosuit.conf import make_conf
    from exosuit.db.api import Database

    conf = make_conf([])
    conf.set_override("new_device_activation", "ready", group="inventory")
    database = Database(db_url)
    app = loadapp(conf, database)
    counts = {"statements": 0, "commits": 0}

    def _statement(conn, cursor, statement, *args):
        if statement.strip().upper() not in ("BEGIN", "COMMIT", "ROLLBACK"):
            counts["statements"] += 1

    def _commit(conn):
        counts["commits"] += 1

    engines = {database.engine, database._read_engine}
    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", _statement)
        sa.event.listen(engine, "commit", _commit)
    sample = _snapshots(hosts, shape, prefix="count")

    def put(name: str, body: bytes, generation: int | None) -> dict:
        request = webob.Request.blank(
            f"/agent/v1/hosts/{name}/inventory",
            method="PUT",
            body=body,
            content_type="application/json",
        )
        if generation is not None:
            request.headers[HOLDS] = str(generation)
        response = request.get_response(app)
        if response.status_code != 200:
            raise RuntimeError(f"{name}: {response.status} {response.body[:200]!r}")
        return json.loads(response.body)

    # The counter reads of the cache of host reports go on a connection of their own,
    # which SQLAlchemy's events do not see: counted by the reader (changes.CounterReader).
    reader = app.application.host_reports.version.read

    def measure(bodies, holds: dict[str, int] | None) -> dict:
        before = dict(counts)
        direct = reader.direct_reads
        for name, body in bodies:
            answer = put(name, body, None if holds is None else holds.get(name))
            if holds is not None and "desired_state" in answer:
                holds[name] = answer["desired_state"]["generation"]
        counts["statements"] += reader.direct_reads - direct
        return {k: round((counts[k] - before[k]) / len(bodies), 2) for k in counts}

    holds: dict[str, int] = {}
    try:
        figures = {"new_host": measure([(n, b) for n, b, _, _ in sample], holds)}
        figures["changed"] = measure([(n, b) for n, b, _, _ in _changed(sample)], holds)
        changed_hashes = {n: h for n, _, h, _ in _changed(sample)}
        for kind, usage in (("unchanged", False), ("unchanged_usage", True)):
            bodies = [
                (
                    n,
                    dumps(
                        {
                            "schema_version": 1,
                            "hash": changed_hashes[n],
                            "hostname": n,
                            **({"usage": u} if usage else {}),
                        }
                    ),
                )
                for n, _, _, u in sample
            ]
            figures[kind] = measure(bodies, holds)
        figures["unchanged_without_header"] = measure(bodies, None)
        # The power cut's reports, each host's first after the cut (its report time
        # long past) to a process that has not seen it (the cache cold).
        current = {n: (b, changed_hashes[n], u) for n, b, _, u in _changed(sample)}
        reports, _ = _power_cut_reports(current)
        for kind, parity in (("power_cut_unchanged", 0), ("power_cut_changed", 1)):
            with database.engine.begin() as conn:
                conn.execute(
                    sa.text("UPDATE hosts SET last_report_at = :old"),
                    {"old": datetime.datetime(2000, 1, 1)},
                )
            chosen = [(n, b) for i, (n, b, _, _) in enumerate(reports) if i % 2 == parity]
            for name, _ in chosen:
                app.application.host_reports.forget(name)
            figures[kind] = measure(chosen, holds)
    finally:
        for engine in engines:
            sa.event.remove(engine, "before_cursor_execute", _statement)
            sa.event.remove(engine, "commit", _commit)
        database.dispose()
    return figures


def _install_of(agent_bin: str) -> str:
    """How the measured agent is installed: its virtualenv, whether exosuit is installed
    into it or runs from a source tree, and whether the test tools are there too."""
    python = os.path.join(os.path.dirname(agent_bin), "python")
    probe = (
        "import importlib.metadata as m, exosuit, sys\n"
        "names = {d.metadata['Name'].lower() for d in m.distributions()}\n"
        "print(sys.prefix, len(names), 'pytest' in names, 'keystone' in names, exosuit.__file__)"
    )
    try:
        out = subprocess.run(
            # Not run from the repository: `python -c` would import its exosuit.
            [python, "-c", probe],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            cwd=os.path.dirname(agent_bin),
        ).stdout.split()
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({error})"
    prefix, count, tests, keystone, module = out
    source = "from the source tree" if module.startswith(ROOT) else "installed"
    extras = "with the test tools" if tests == "True" or keystone == "True" else "runtime only"
    return f"virtualenv {prefix}: {count} distributions, {extras}; exosuit {source}"


def _print(results: dict, args: argparse.Namespace) -> int:
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        width = max(len(k) for k in results)
        for key, value in results.items():
            print(f"{key:<{width}}  {value}")
    return 0 if results["devices_in_api"] == results["devices_expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
