"""Placement sync: time and Placement requests to register H hosts x 8 devices.

    .venv/bin/python bench/placement_sync.py --hosts 50

A real OpenStack Placement (the openstack-placement package of the test extra,
served like the tests serve it: tests/placement/placement_server.py, its own
database, noauth2) unless ``--placement-url`` names one (noauth2, admin token).
Exosuit's database: SQLite by default, ``--db postgresql|mariadb`` for a server.
Standalone mode (Exosuit creates the compute node providers).

Phases, each run by a real conductor (exosuit.conductor.worker.Conductor,
``--workers`` threads) until no placement_sync job is left:

1. register: every host's snapshot (simulated driver, ``--shape``, 8 devices by
   default) is applied as the agent API applies it (one transaction per host,
   which queues the host's sync); the conductor creates everything in Placement.
2. unchanged: the same snapshots again: no job is queued; then a sync of every
   host is forced (as a change that Placement does not see would queue one).
3. verify: a drift-repair round over every host with nothing drifted.
4. disable: one device per host disabled (one change per host).

For each phase: wall time, Placement requests (total, by method, per host and per
new deployable), read from the counters the sync keeps (the API's /metrics).
Placement on SQLite must run one worker process, and concurrent writers there
fail with "database is locked": keep ``--workers 1`` unless ``--placement-db``
puts Placement's database on PostgreSQL or MariaDB.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sqlalchemy as sa  # noqa: E402

from bench._common import ROOT, free_port, fresh_database  # noqa: E402
from exosuit.agent.snapshot import build_snapshot  # noqa: E402
from exosuit.conductor.worker import Conductor  # noqa: E402
from exosuit.conf import make_conf  # noqa: E402
from exosuit.db import devices as db_devices  # noqa: E402
from exosuit.db import inventory, migration, models  # noqa: E402
from exosuit.db import placement as state  # noqa: E402
from exosuit.db.api import Database  # noqa: E402
from exosuit.db.metrics import read_counters  # noqa: E402
from exosuit.drivers import DriverContext  # noqa: E402
from exosuit.drivers.simulated import SimulatedDriver  # noqa: E402
from exosuit.placement.client import use_placement_url  # noqa: E402

RUNNER = os.path.join(ROOT, "tests", "placement", "placement_server.py")


@contextlib.contextmanager
def placement_server(workdir: str, connection: str | None, threads: int):
    """openstack-placement on a free loopback port with its own database."""
    manage = os.path.join(os.path.dirname(sys.executable), "placement-manage")
    if not os.path.exists(manage):
        manage = shutil.which("placement-manage")
    if manage is None:
        raise SystemExit("openstack-placement is not installed: pip install -e '.[test]'")
    sqlite = connection is None
    connection = connection or f"sqlite:///{workdir}/placement.sqlite"
    with open(os.path.join(workdir, "placement.conf"), "w") as f:
        f.write(
            "[DEFAULT]\ndebug = false\n[api]\nauth_strategy = noauth2\n"
            f"[placement_database]\nconnection = {connection}\n"
        )
    subprocess.run(
        [manage, "--config-file", os.path.join(workdir, "placement.conf"), "db", "sync"],
        check=True,
        capture_output=True,
    )
    if sqlite:
        import sqlite3

        with sqlite3.connect(os.path.join(workdir, "placement.sqlite")) as db:
            db.execute("PRAGMA journal_mode=WAL")
    port = free_port()
    log = open(os.path.join(workdir, "placement.log"), "w")
    process = subprocess.Popen(
        [
            sys.executable,
            RUNNER,
            workdir,
            "--port",
            str(port),
            "--threads",
            str(threads),
            "--port-file",
            os.path.join(workdir, "port"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        import requests

        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(url + "/", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("Placement did not start; see " + log.name)
            time.sleep(0.1)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _snapshots(hosts: int, prefix: str, shape: dict[str, int]) -> list[tuple[str, dict]]:
    out = []
    for i in range(hosts):
        name = f"{prefix}-{i:05d}"
        driver = SimulatedDriver(DriverContext(hostname=name, settings={"devices": shape}))
        out.append((name, build_snapshot(name, [driver])))
    return out


def _requests(db) -> dict[str, int]:
    """Placement requests so far, by "job method"."""
    return {
        f"{dict(labels)['job']} {dict(labels)['method']}": value
        for (name, labels), value in db.read(read_counters).items()
        if name == "exosuit_placement_requests"
    }


def _busy(db) -> int:
    jobs = models.jobs
    return db.read(
        lambda conn: conn.execute(
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(jobs.c.kind == state.SYNC, jobs.c.state.in_(("pending", "running")))
        ).scalar()
    )


def _failed(db) -> int:
    jobs = models.jobs
    return db.read(
        lambda conn: conn.execute(
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(jobs.c.kind == state.SYNC, jobs.c.state == "failed")
        ).scalar()
    )


def _last_job(db) -> int:
    jobs = models.jobs
    return db.read(lambda conn: conn.execute(sa.select(sa.func.max(jobs.c.id))).scalar()) or 0


def _jobs_since(db, last: int) -> int:
    jobs = models.jobs
    return db.read(
        lambda conn: conn.execute(
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(jobs.c.kind == state.SYNC, jobs.c.id > last)
        ).scalar()
    )


def _phase(db, name: str, hosts: int, act, *, deployables: int = 0) -> dict:
    before = _requests(db)
    last = _last_job(db)
    began = time.monotonic()
    act()
    while _busy(db):
        time.sleep(0.02)
    elapsed = time.monotonic() - began
    after = _requests(db)
    by_method = {
        k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)
    }
    total = sum(by_method.values())
    result = {
        "phase": name,
        "seconds": round(elapsed, 3),
        "jobs": _jobs_since(db, last),
        "placement_requests": total,
        "by_method": by_method,
        "requests_per_host": round(total / hosts, 3),
    }
    if deployables:
        result["requests_per_new_deployable"] = round(total / deployables, 3)
        result["deployables_per_second"] = round(deployables / elapsed, 1)
    print(json.dumps(result), flush=True)
    return result


def run(args, placement_url: str, db_url: str, workdir: str) -> list[dict]:
    conf = make_conf(
        [],
        **{
            "state_path": workdir,
            "database.connection": db_url,
            "placement.manage_compute_providers": True,
            "conductor.workers": args.workers,
            "conductor.poll_interval": 0.05,
            # Drift repair runs only when this benchmark asks for it.
            "conductor.reconcile_interval": 0,
        },
    )
    use_placement_url(conf, placement_url)
    db = Database(db_url, pool_size=args.workers + 4)
    migration.upgrade(db)
    shape = dict((k, int(v)) for k, v in (p.split(":") for p in args.shape.split(",")))
    snapshots = _snapshots(args.hosts, args.prefix, shape)
    per_host = sum(shape.values())
    results = []

    def apply_all() -> None:
        for name, snapshot in snapshots:
            db.write(inventory.apply_snapshot, name, snapshot)

    conductor = Conductor(conf, db)
    conductor.start()
    try:
        began = time.monotonic()
        apply_all_seconds = None

        def register() -> None:
            nonlocal apply_all_seconds
            apply_all()
            apply_all_seconds = round(time.monotonic() - began, 3)

        results.append(
            _phase(db, "register", args.hosts, register, deployables=args.hosts * per_host)
        )
        results[-1]["snapshots_applied_seconds"] = apply_all_seconds

        results.append(_phase(db, "unchanged re-report", args.hosts, apply_all))

        def force() -> None:
            db.write(lambda conn: [state.enqueue_sync(conn, n) for n, _ in snapshots])

        results.append(_phase(db, "unchanged, sync forced", args.hosts, force))

        def verify() -> None:
            db.write(lambda conn: [state.enqueue_sync(conn, n, verify=True) for n, _ in snapshots])

        results.append(_phase(db, "verify (drift repair, no drift)", args.hosts, verify))

        def disable() -> None:
            dev = models.devices
            for name, _ in snapshots:
                uuid = db.read(
                    lambda conn, name=name: conn.execute(
                        sa.select(dev.c.uuid)
                        .where(dev.c.hostname == name)
                        .order_by(dev.c.id)
                        .limit(1)
                    ).scalar()
                )
                db.write(db_devices.set_status, uuid, "maintaining")

        results.append(_phase(db, "one device disabled per host", args.hosts, disable))
    finally:
        conductor.stop(timeout=30)
        failed = _failed(db)
        db.dispose()
    if failed:
        print(json.dumps({"failed_jobs": failed}), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument(
        "--shape",
        default="fake_fpga:4,nvidia_gpu:4",
        help="Simulated devices per host (SHAPE:COUNT,...).",
    )
    parser.add_argument("--workers", type=int, default=1, help="Conductor worker threads.")
    parser.add_argument(
        "--db",
        choices=["sqlite", "postgresql", "mariadb"],
        default="sqlite",
        help="Exosuit's database.",
    )
    parser.add_argument(
        "--placement-url", help="Use this Placement (noauth2) instead of starting one."
    )
    parser.add_argument(
        "--placement-db",
        choices=["sqlite", "postgresql", "mariadb"],
        default="sqlite",
        help="Database of the Placement this benchmark starts (a new one, dropped afterwards).",
    )
    parser.add_argument("--placement-threads", type=int, default=4)
    parser.add_argument(
        "--prefix",
        default=f"bench-{os.getpid()}",
        help="Host name prefix (hosts must be new to that Placement).",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="exosuit-bench-placement-") as workdir:
        with fresh_database(args.db, workdir) as db_url:
            if args.placement_url:
                run(args, args.placement_url, db_url, workdir)
                return 0
            placement_dir = os.path.join(workdir, "placement")
            os.makedirs(placement_dir)
            with contextlib.ExitStack() as stack:
                placement_db = None
                if args.placement_db != "sqlite":
                    placement_db = stack.enter_context(
                        fresh_database(args.placement_db, placement_dir)
                    )
                url = stack.enter_context(
                    placement_server(placement_dir, placement_db, args.placement_threads)
                )
                run(args, url, db_url, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
