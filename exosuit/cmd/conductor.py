"""``exosuit-conductor``: the durable job workers (Placement sync, Nova events, drift repair).

``exosuit-conductor [--workers N]`` runs N worker threads until SIGTERM/SIGINT:
the first signal stops claiming jobs and lets the jobs in hand finish; a second
one exits at once (those jobs are claimed again when their leases expire).
``exosuit-conductor status`` lists pending, running and failed jobs;
``exosuit-conductor retry ID`` makes a failed job pending again.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING

from exosuit.cmd import add_config_argument, setup_logging
from exosuit.conf import DatabaseSettings, DefaultSettings, make_conf
from exosuit.stopping import stop_while_starting

if TYPE_CHECKING:
    from oslo_config import cfg

    from exosuit.db.api import Database
    from exosuit.db.jobs import JobRow

LOG = logging.getLogger("exosuit.conductor")
STATES = ("pending", "running", "failed", "succeeded")


def _database(conf: cfg.ConfigOpts) -> Database:
    from exosuit.db import migration
    from exosuit.db.api import Database

    db = Database.from_conf(conf)
    problem = migration.start_problem(db, wait=DatabaseSettings.from_conf(conf).startup_wait)
    if problem is not None:
        db.dispose()
        raise SystemExit(f"exosuit-conductor: {problem}")
    return db


def _run(args: argparse.Namespace) -> int:
    from exosuit.conductor.worker import Conductor

    overrides = {"conductor.workers": args.workers} if args.workers else {}
    conf = make_conf(args.config_file, **overrides)
    setup_logging(DefaultSettings.from_conf(conf).debug)
    db = _database(conf)
    conductor = Conductor(conf, db)

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        if conductor.finished:
            return
        if conductor.stopping:
            LOG.warning(
                "signal %d again: exiting now; the jobs in hand will be claimed "
                "again when their leases expire",
                signum,
            )
            os._exit(1)
        LOG.info("signal %d: finishing the jobs in hand (send it again to exit at once)", signum)
        conductor.request_stop()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_signal)
    conductor.start()
    LOG.info("exosuit-conductor running %d worker(s)", len(conductor.workers))
    # NOTE: join with a timeout, so that the main thread wakes up for signals.
    while not conductor.join(timeout=0.2):
        pass
    db.dispose()
    LOG.info("exosuit-conductor stopped")
    return 0


def _status(args: argparse.Namespace) -> int:
    from exosuit.db import jobs

    conf = make_conf(args.config_file)
    db = _database(conf)
    states = args.state or ["pending", "running", "failed"]
    try:
        counts = db.read(jobs.count_by_state)
        listed = db.read(jobs.list_jobs, states, kind=args.kind, limit=args.limit)
    finally:
        db.dispose()
    if args.format == "json":
        print(json.dumps({"counts": counts, "jobs": listed}, default=str, indent=2))
        return 0
    print("jobs: " + ", ".join(f"{counts[s]} {s}" for s in STATES))
    if not listed:
        return 0
    print()
    header = (
        "ID",
        "KIND",
        "STATE",
        "ATTEMPTS",
        "DUE/LEASE UNTIL (UTC)",
        "KEY",
        "WORKER",
        "LAST ERROR",
    )
    rows = [header] + [_row(job) for job in listed]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)), row[-1])
    return 0


def _row(job: JobRow) -> tuple[str, ...]:
    when = job["lease_expires_at"] if job["state"] == "running" else job["run_after"]
    error = (job["last_error"] or "").splitlines()[0:1]
    return (
        str(job["id"]),
        job["kind"],
        job["state"],
        str(job["attempts"]),
        when.isoformat(sep=" ", timespec="seconds") if when else "-",
        job["key"] or "-",
        job["worker"] or "-",
        (error[0] if error else "")[:120],
    )


def _retry(args: argparse.Namespace) -> int:
    from exosuit.db import jobs

    conf = make_conf(args.config_file)
    db = _database(conf)
    try:
        done = db.write(jobs.retry_failed, args.job_id)
    finally:
        db.dispose()
    if not done:
        print(f"exosuit-conductor: no failed job {args.job_id}", file=sys.stderr)
        return 1
    print(f"job {args.job_id} is pending again")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="exosuit-conductor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_argument(parser)
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="Worker threads in this process ([conductor] workers).",
    )
    parser.set_defaults(func=_run)
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="Run the workers (the default).")
    add_config_argument(run, subcommand=True)
    run.add_argument(
        "--workers",
        type=int,
        metavar="N",
        default=argparse.SUPPRESS,
        help="Worker threads in this process ([conductor] workers).",
    )
    run.set_defaults(func=_run)
    status = sub.add_parser(
        "status", help="Count jobs by state and list the unfinished and failed ones."
    )
    add_config_argument(status, subcommand=True)
    status.add_argument(
        "--state",
        action="append",
        choices=STATES,
        help="List jobs in this state (may be repeated; default: pending, running and failed).",
    )
    status.add_argument("--kind", help="List only jobs of this kind.")
    status.add_argument("--limit", type=int, default=50, help="List at most this many jobs.")
    status.add_argument("--format", choices=("table", "json"), default="table")
    status.set_defaults(func=_status)
    retry = sub.add_parser("retry", help="Make a failed job pending again (attempts reset).")
    add_config_argument(retry, subcommand=True)
    retry.add_argument("job_id", type=int)
    retry.set_defaults(func=_retry)
    args = parser.parse_args(argv)
    with stop_while_starting():  # until the workers' own handlers take over
        return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
