"""Statements, commits and round trips per API operation, in-process.

    .venv/bin/python bench/api_statements.py --db {sqlite,postgresql,mariadb}
        [--mysql-driver pymysql|mysqldb] [--ops N] [--scenarios profile,arq,arq_wait]
        [--sql]

The application of bench/api_inprocess.py (the same seed, the WSGI app called in a
loop), with SQLAlchemy's engine events counting what each operation sends to the
database: statements (``before_cursor_execute``), commits and rollbacks, and, on
MariaDB with PyMySQL, every command PyMySQL writes to its socket (a round trip each:
statements, COMMIT, ROLLBACK, pings). ``--sql`` prints the statements of one operation.
Machine-independent: the figures are the same on a busy machine and a quiet one. CPU
per operation is printed too (process CPU, the median of three rounds), with the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.api import HOSTNAME, BenchDatabase, BenchError  # noqa: E402
from bench.api_inprocess import InProcessClient, Scenarios, _expect, seed  # noqa: E402

SCENARIOS = ("profile", "arq", "arq_wait", "deployables")


class Counting:
    """Counts what the engines of a ``Database`` send, while ``on``."""

    def __init__(self, db) -> None:
        from sqlalchemy import event

        self.counts: Counter[str] = Counter()
        self.sql: list[str] | None = None
        self.on = False
        engines = {id(db.engine): db.engine, id(db._read_engine): db._read_engine}
        for engine in engines.values():
            event.listen(engine, "before_cursor_execute", self._statement)
            event.listen(engine, "commit", self._event("commits"))
            event.listen(engine, "rollback", self._event("rollbacks"))
        if db.dialect in ("mysql", "mariadb") and db.url.get_driver_name() == "pymysql":
            import pymysql.connections

            original = pymysql.connections.Connection._execute_command
            counting = self

            def _execute_command(self, command, sql):
                if counting.on:
                    counting.counts["round trips"] += 1
                return original(self, command, sql)

            pymysql.connections.Connection._execute_command = _execute_command

    def _statement(self, conn, cursor, statement, parameters, context, executemany) -> None:
        if self.on:
            self.counts["statements"] += 1
            if self.sql is not None:
                self.sql.append(" ".join(statement.split())[:160])

    def _event(self, name: str):
        def count(conn) -> None:
            if self.on:
                self.counts[name] += 1

        return count


def arq_wait(scenarios: Scenarios) -> None:
    """The ARQ cycle with Nova's wait: create, bind, ``GET ?instance=`` until every ARQ
    of the instance is Bound (at once here: the bench profile needs no host work),
    delete."""
    client = scenarios.client
    rp_uuid = scenarios.rp_uuids[scenarios.count % len(scenarios.rp_uuids)]
    scenarios.count += 1
    from bench.api import ARQ_PROFILE

    status, body = client.request(
        "POST", "/v2/accelerator_requests", {"device_profile_name": ARQ_PROFILE}
    )
    _expect(status, body, 201, "POST /v2/accelerator_requests")
    import json

    (arq,) = json.loads(body)["arqs"]
    instance = str(uuid.uuid4())
    ops = [
        {"op": "add", "path": "/hostname", "value": HOSTNAME},
        {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]
    status, body = client.request("PATCH", "/v2/accelerator_requests", {arq["uuid"]: ops})
    _expect(status, body, 202, "PATCH /v2/accelerator_requests (bind)")
    while True:
        status, body = client.request("GET", f"/v2/accelerator_requests?instance={instance}")
        _expect(status, body, 200, "GET /v2/accelerator_requests?instance=")
        if all(a["state"] == "Bound" for a in json.loads(body)["arqs"]):
            break
    status, body = client.request("DELETE", f"/v2/accelerator_requests?instance={instance}")
    _expect(status, body, 204, "DELETE /v2/accelerator_requests?instance=")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/api_statements.py", description=__doc__)
    parser.add_argument("--db", choices=("sqlite", "postgresql", "mariadb"), default="sqlite")
    parser.add_argument("--mysql-driver", choices=("pymysql", "mysqldb"), default="pymysql")
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--scenarios", default="profile,arq,arq_wait")
    parser.add_argument("--sql", action="store_true", help="Print one operation's SQL.")
    args = parser.parse_args(argv)
    names = [s for s in args.scenarios.split(",") if s]
    if set(names) - set(SCENARIOS):
        parser.error(f"scenarios: {', '.join(SCENARIOS)}")

    from exosuit.api.deploy import loadapp
    from exosuit.conf import make_conf
    from exosuit.db import migration
    from exosuit.db.api import Database

    workdir = tempfile.mkdtemp(prefix="exosuit-bench-statements-")
    database = db = None
    try:
        database = BenchDatabase(args.db, workdir, args.mysql_driver)
        db = Database(database.url)
        migration.upgrade(db)
        conf = make_conf([], state_path=workdir, host=HOSTNAME)
        conf.set_override("new_device_activation", "ready", group="inventory")
        client = InProcessClient(loadapp(conf, db))
        scenarios = Scenarios(client, seed(client))
        counting = Counting(db)
        driver = f" ({args.mysql_driver})" if args.db == "mariadb" else ""
        print(f"in-process, {args.db}{driver}, load average {os.getloadavg()[0]:.2f}")
        for name in names:
            # "arq": create, bind, delete (bench/api_inprocess.py's arq_nowait: its own
            # "arq" polls as Nova does, which is arq_wait here).
            op = {"arq": scenarios.arq_nowait, "arq_wait": lambda: arq_wait(scenarios)}.get(
                name
            ) or getattr(scenarios, name)
            for _ in range(20):
                op()  # warm-up: caches, pools
            if args.sql:
                counting.sql, counting.on = [], True
                op()
                counting.on = False
                print(f"  {name}: one operation's statements")
                for line in counting.sql:
                    print(f"    {line}")
                counting.sql = None
            counting.counts.clear()
            counting.on = True
            for _ in range(args.ops):
                op()
            counting.on = False
            per_op = {k: v / args.ops for k, v in sorted(counting.counts.items())}
            figures = []
            for _ in range(3):
                start = time.process_time()
                for _ in range(args.ops):
                    op()
                figures.append((time.process_time() - start) * 1000 / args.ops)
            shown = ", ".join(f"{k} {v:g}" for k, v in per_op.items())
            cpu = statistics.median(figures)
            print(f"  {name:12} {shown}; {cpu:.3f} ms CPU/op")
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
        print(f"bench/api_statements.py: {error}", file=sys.stderr)
        sys.exit(1)
