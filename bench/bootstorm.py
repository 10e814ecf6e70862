"""Boot storm: N simulated agents report their hosts at once to one exosuit-api.

    .venv/bin/python bench/bootstorm.py --db postgresql --hosts 10000

Phases:

1. storm: every agent waits a random first-report jitter (as exosuit-agent does),
   then PUTs its whole snapshot (8 devices by default), honouring 429 +
   Retry-After and backing off on errors. Measures the time until every host's
   inventory is acknowledged and checks the database holds all of it (no report
   lost after retries).
2. unchanged: every agent reports again with only its hash (what an agent sends
   when nothing changed); measures reports per second.
3. agent: a real `exosuit-agent run` process (simulated driver, 8 devices):
   its resident memory after it has reported. Then a second one with uevents on,
   reading a copy of a recorded sysfs tree (`--uevent-fixture`, driver
   `--uevent-driver`): a device's NUMA node is changed in the copy, a real kernel
   uevent is written to one of this machine's PCI functions, and the time until the
   change is visible in the API is measured `--uevent-repeats` times (median and
   max; the goal is under 2 s). Needs root for the uevent; otherwise it says why it
   was skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
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
    api_server,
    dumps,
    fresh_database,
    percentile,
)
from exosuit.agent.snapshot import build_snapshot  # noqa: E402
from exosuit.drivers import DriverContext  # noqa: E402
from exosuit.drivers.simulated import SimulatedDriver  # noqa: E402


def _snapshots(hosts: int, shape: dict[str, int]) -> list[tuple[str, bytes, str]]:
    out = []
    for i in range(hosts):
        name = f"storm-{i:05d}"
        driver = SimulatedDriver(DriverContext(hostname=name, settings={"devices": shape}))
        snapshot = build_snapshot(name, [driver])
        out.append((name, dumps(snapshot), snapshot["hash"]))
    return out


async def _storm(url: str, snapshots, concurrency: int, jitter: float) -> dict:
    host, port = url.split("//")[1].split(":")
    port = int(port)
    queue: asyncio.Queue = asyncio.Queue()
    start = time.monotonic()
    stats = {"requests": 0, "429": 0, "errors": 0, "latencies": []}
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
            name, body, _ = item
            t0 = time.monotonic()
            try:
                status, headers, payload = await conn.request(
                    "PUT", f"/agent/v1/hosts/{name}/inventory", body)
            except OSError:
                stats["errors"] += 1
                asyncio.get_running_loop().create_task(_later(queue, item, 1.0))
                continue
            stats["requests"] += 1
            if status == 200:
                stats["latencies"].append(time.monotonic() - t0)
                done_at.append(time.monotonic() - start)
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


async def _unchanged(url: str, snapshots, concurrency: int, seconds: float) -> dict:
    host, port = url.split("//")[1].split(":")
    bodies = [(name, dumps({"schema_version": 1, "hash": h, "hostname": name}))
              for name, _, h in snapshots]
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + seconds

    async def worker(offset: int):
        conn = Connection(host, int(port))
        i = offset
        while time.monotonic() < deadline:
            name, body = bodies[i % len(bodies)]
            i += concurrency
            t0 = time.monotonic()
            status, _, _ = await conn.request("PUT", f"/agent/v1/hosts/{name}/inventory", body)
            latencies.append(time.monotonic() - t0)
            statuses[status] = statuses.get(status, 0) + 1
        await conn.close()

    start = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    elapsed = time.monotonic() - start
    return {"reports": len(latencies), "per_second": len(latencies) / elapsed,
            "p50_ms": percentile(latencies, 0.5) * 1000,
            "p95_ms": percentile(latencies, 0.95) * 1000, "statuses": statuses}


def _count(url: str, resource: str) -> int:
    total, marker = 0, None
    while True:
        query = f"/v2/{resource}?limit=1000" + (f"&marker={marker}" if marker else "")
        request = urllib.request.Request(url + query,
                                         headers={"OpenStack-API-Version": "accelerator 2.4"})
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
                f.write(f"[DEFAULT]\nhost = bench-agent\nstate_path = {workdir}\n"
                        f"[agent]\napi_url = {url}\nenabled_drivers = simulated\n"
                        "report_interval = 3600\nreport_jitter = 0\nuevents = false\n"
                        f"[simulated]\ndevices = {devices}\n")

        write(shape_text)
        process = subprocess.Popen([agent_bin, "run",
                                    "--config-file", config],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while len(_devices_of(url, "bench-agent")) != sum(shape.values()):
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
    request = urllib.request.Request(f"{url}/v2/devices?hostname={hostname}",
                                     headers={"OpenStack-API-Version": "accelerator 2.4"})
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
            f.write(f"[DEFAULT]\nhost = {hostname}\nstate_path = {workdir}\n"
                    f"[agent]\napi_url = {url}\nenabled_drivers = {driver}\n"
                    f"sysfs_root = {root}\nreport_interval = 3600\nreport_jitter = 0\n"
                    "uevents = true\n")
        log_path = os.path.join(workdir, "agent.log")
        with open(log_path, "w") as log:
            process = subprocess.Popen([os.path.join(BIN, "exosuit-agent"), "run",
                                        "--config-file", config],
                                       stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not (nodes := _numa_nodes(url, hostname)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the agent found nothing in {fixture} with {driver}")
                time.sleep(0.1)
            with open(log_path) as f:
                if "watching" not in f.read():
                    return {"uevent_visible": "skipped: the agent cannot watch uevents here"}
            address = next(a for a in sorted(nodes) if os.path.exists(
                os.path.join(root, "sys/bus/pci/devices", a, "numa_node")))
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
            return {"uevent_visible_median_ms": round(statistics.median(times) * 1000),
                    "uevent_visible_max_ms": round(max(times) * 1000),
                    "uevent_visible_under_2s": max(times) < 2}
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgresql", "mariadb"],
                        default="postgresql")
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--shape", default="nvidia_gpu:6,fake_fpga:2",
                        help="simulated devices per host (8 by default)")
    parser.add_argument("--concurrency", type=int, default=64,
                        help="connections the simulated agents share")
    parser.add_argument("--jitter", type=float, default=10.0,
                        help="first-report jitter of each agent, seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--server", choices=["granian", "gunicorn"], default="granian",
                        help="[api] server of exosuit-api")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--unchanged-seconds", type=float, default=10.0)
    parser.add_argument("--uevent-fixture",
                        default=os.path.join(ROOT, "tests", "fixtures", "nvidia-gpu-host"),
                        help="recorded sysfs tree the uevent agent reads (a copy of it)")
    parser.add_argument("--uevent-driver", default="nvidia_gpu",
                        help="driver of the uevent agent")
    parser.add_argument("--uevent-repeats", type=int, default=10)
    parser.add_argument("--agent-bin", default=os.path.join(BIN, "exosuit-agent"),
                        help="the exosuit-agent whose memory is measured; the repository's "
                        ".venv also holds the test tools (osprofiler, imported by "
                        "keystoneauth when present, costs about 5 MB): point this at an "
                        "agent installed as on a host (`pip install .` in its own venv)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    shape = {k: int(v) for k, v in (p.split(":") for p in args.shape.split(","))}
    print(f"building {args.hosts} snapshots of {sum(shape.values())} devices …",
          file=sys.stderr)
    snapshots = _snapshots(args.hosts, shape)
    results = {"db": args.db, "hosts": args.hosts, "shape": args.shape,
               "server": args.server, "workers": args.workers, "threads": args.threads,
               "concurrency": args.concurrency, "jitter_s": args.jitter}
    with tempfile.TemporaryDirectory() as workdir, \
            fresh_database(args.db, workdir) as db_url, \
            api_server(db_url, workers=args.workers, threads=args.threads,
                       extra=f"server = {args.server}\n") as (url, _):
        print("storm …", file=sys.stderr)
        storm = asyncio.run(_storm(url, snapshots, args.concurrency, args.jitter))
        results["storm_all_visible_s"] = round(storm["all_acknowledged_s"], 1)
        results["storm_requests"] = storm["requests"]
        results["storm_429"] = storm["429"]
        results["storm_errors"] = storm["errors"]
        results["storm_p95_ms"] = round(percentile(storm["latencies"], 0.95) * 1000, 1)
        devices = _count(url, "devices")
        results["devices_in_api"] = devices
        results["devices_expected"] = args.hosts * sum(shape.values())
        print("unchanged reports …", file=sys.stderr)
        unchanged = asyncio.run(_unchanged(url, snapshots, args.concurrency,
                                           args.unchanged_seconds))
        results["unchanged_per_s"] = round(unchanged["per_second"])
        results["unchanged_p50_ms"] = round(unchanged["p50_ms"], 1)
        results["unchanged_p95_ms"] = round(unchanged["p95_ms"], 1)
        results["unchanged_statuses"] = unchanged["statuses"]
        print("agent process …", file=sys.stderr)
        results.update(_agent_phase(url, shape, args.agent_bin))
        print("uevent → API …", file=sys.stderr)
        results.update(_uevent_phase(url, args.uevent_fixture, args.uevent_driver,
                                     args.uevent_repeats))
    load = os.getloadavg()
    results["load_average"] = [round(x, 2) for x in load]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        width = max(len(k) for k in results)
        for key, value in results.items():
            print(f"{key:<{width}}  {value}")
    return 0 if results["devices_in_api"] == results["devices_expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
