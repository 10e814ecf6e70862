"""``GET /v2/deployables`` under wrk: requests/s and exosuit-api CPU per request (issue 25).

    .venv/bin/python bench/reads_wrk.py --db {sqlite,postgresql,mariadb} [--workers 2]
        [--threads T] [--connections 8] [--duration 10] [--rounds 3]
        [--source A --source B ...] [--header 'OpenStack-API-Version: accelerator 2.0']

Creates a fresh database, seeds one host through the agent API (10 fake FPGAs, as
bench/api.py does: the list has exactly 10 items), and for each ``--source`` (a checkout
whose ``exosuit/`` the API runs, through PYTHONPATH; by default this one) starts
``exosuit-api`` on it. Then, ``--rounds`` times, each source in turn (interleaved, so
that a change of the machine's load falls on both): ``wrk -t2 -c<connections>
-d<duration>`` on the list, with the API processes' CPU (user + system, from /proc) and
the load average (``uptime``) beside each figure. Needs wrk (``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench._common import api_server, fresh_database  # noqa: E402
from tests.helpers.inventory import fpga, snapshot  # noqa: E402

HOSTNAME = "bench-host"
DEPLOYABLES = 10
_TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rpartition(")")[2].split()[1]) == pid:
                        found.append(int(entry))
    return found


def _cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children (granian's workers)."""
    total = 0.0
    for p in [pid, *_children(pid)]:
        with contextlib.suppress(OSError):
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def _seed(url: str) -> None:
    devices = [fpga(f"0000:{0x10 + i:02x}:00.0", handles=16) for i in range(DEPLOYABLES)]
    body = json.dumps(snapshot(HOSTNAME, devices)).encode()
    request = urllib.request.Request(
        f"{url}/agent/v1/hosts/{HOSTNAME}/inventory",
        data=body,
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=60).read()
    listed = json.loads(urllib.request.urlopen(f"{url}/v2/deployables", timeout=60).read())
    if len(listed["deployables"]) != DEPLOYABLES:
        raise SystemExit(f"the list has {len(listed['deployables'])} items")


def _wrk(url: str, args: argparse.Namespace) -> dict:
    command = ["wrk", "-t2", f"-c{args.connections}", f"-d{args.duration:g}s", "--latency"]
    for header in args.header:
        command += ["-H", header]
    out = subprocess.run(
        [*command, f"{url}/v2/deployables"], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.MULTILINE)
    return {
        "rps": float(found.group(1)) if found else 0.0,
        "requests": int(total.group(1)) if total else 0,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "p50": p50.group(1) if p50 else "?",
    }


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/reads_wrk.py", description=__doc__)
    parser.add_argument("--db", choices=("sqlite", "postgresql", "mariadb"), default="mariadb")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--extra", default="", help="More [api] settings, e.g. 'x = y'.")
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        help="A checkout whose exosuit/ to run (repeatable; default this one), with "
        "'|setting = value;...' after it for [api] settings of its own.",
    )
    parser.add_argument("--header", action="append", default=[], help="A header wrk sends.")
    parser.add_argument(
        "--py-spy",
        metavar="PREFIX",
        help="Sample one worker of each source with py-spy during the first round "
        "(collapsed stacks to PREFIX.<n>.txt; pip install py-spy).",
    )
    args = parser.parse_args(argv)
    sources = args.source or [ROOT]
    extra = "".join(f"{line.strip()}\n" for line in args.extra.split(";") if line.strip())
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="exosuit-wrk-"))
        db_url = stack.enter_context(fresh_database(args.db, tmp))
        servers = []
        for i, source in enumerate(sources):
            path, _, own = source.partition("|")
            own = "".join(f"{line.strip()}\n" for line in own.split(";") if line.strip())
            env = {"PYTHONPATH": os.path.abspath(path)}
            url, process = stack.enter_context(
                api_server(
                    db_url,
                    workers=args.workers,
                    threads=args.threads,
                    extra=f"server = granian\n{extra}{own}",
                    env=env,
                )
            )
            if i == 0:
                _seed(url)
            # Warm-up: each worker fills its cache and connection pools.
            subprocess.run(
                ["wrk", "-t2", f"-c{args.connections}", "-d2s", f"{url}/v2/deployables"],
                capture_output=True,
                check=True,
            )
            servers.append((source, url, process))
        print(
            f"wrk -t2 -c{args.connections} -d{args.duration:g}s GET /v2/deployables; "
            f"{args.db}, exosuit-api granian {args.workers} x {args.threads}",
            flush=True,
        )
        for round_ in range(args.rounds):
            for source, url, process in servers:
                load = _uptime()
                cpu0, wall0 = _cpu(process.pid), time.monotonic()
                spy = None
                if args.py_spy and round_ == 0:
                    worker = _children(process.pid)[0]
                    spy = subprocess.Popen(
                        [
                            os.path.join(os.path.dirname(sys.executable), "py-spy"),
                            "record",
                            "--format",
                            "raw",
                            "--rate",
                            "250",
                            "-d",
                            str(int(args.duration)),
                            "-p",
                            str(worker),
                            "-o",
                            f"{args.py_spy}.{servers.index((source, url, process))}.txt",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                result = _wrk(url, args)
                if spy is not None:
                    spy.wait()
                cpu1, wall1 = _cpu(process.pid), time.monotonic()
                per = (cpu1 - cpu0) / max(result["requests"], 1) * 1000
                print(
                    f"round {round_ + 1} {source}: {result['rps']:,.0f} req/s, "
                    f"p50 {result['p50']}, non-2xx {result['non_2xx']}, "
                    f"API CPU {per:.3f} ms/req ({(cpu1 - cpu0) / (wall1 - wall0):.2f} cores)"
                    f" | {load}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
