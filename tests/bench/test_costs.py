"""bench/costs.py: the commit floor, the server's counters, statements and round trips
counted in-process; and bench/api.py printing the costs per operation (issue 25)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from bench.costs import RoundTripProxy, ServerCounters, StatementCounter, commit_floor
from exosuit.db.api import Database
from tests.conftest import require

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVERS = ("postgresql", "mariadb")


def _empty_database(backend: str, db_servers, tmp_path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/costs.sqlite"
    server = db_servers[backend]
    require(server.engine is not None, server.error or "")
    return server.create()


def _tables(url: str) -> list[str]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        return sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


def _driver_connect(url: str):
    """A plain driver connection (no SQLAlchemy: nothing sent that the test did not)."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "postgresql":
        import psycopg2

        return psycopg2.connect(
            host=parsed.host, port=parsed.port or 5432, user=parsed.username,
            password=parsed.password or "", dbname=parsed.database,
        )  # fmt: skip
    import pymysql

    return pymysql.connect(
        host=parsed.host, port=parsed.port or 3306, user=parsed.username,
        password=parsed.password or "", database=parsed.database,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ("sqlite", *SERVERS))
def test_the_commit_floor_times_one_insert_and_commit_and_drops_its_table(
    backend, db_servers, tmp_path
):
    url = _empty_database(backend, db_servers, tmp_path)
    floor = commit_floor(url, n=30, warmup=2)
    assert floor["backend"] == backend
    assert floor["n"] == 30
    assert floor["concurrency"] == 1
    assert 0 < floor["p50_ms"] <= floor["p95_ms"]
    assert floor["commits_per_s"] > 0
    # Several connections at once share the n transactions between them.
    eight = commit_floor(url, n=20, concurrency=8, warmup=1)
    assert eight["n"] == 20
    assert eight["concurrency"] == 8
    assert 0 < eight["p50_ms"] <= eight["p95_ms"]
    assert not [t for t in _tables(url) if t.startswith("costs_floor_")]


def test_the_commit_floor_refuses_no_transactions(tmp_path):
    with pytest.raises(ValueError):
        commit_floor(f"sqlite:///{tmp_path}/x.sqlite", n=0)


def _pg_transactions(url: str, counters: ServerCounters) -> dict:
    """What the counters saw of one connection's 7 commits and 2 rollbacks."""
    before = counters.snapshot()
    conn = _driver_connect(url)
    cursor = conn.cursor()
    for _ in range(7):
        cursor.execute("SELECT 1")
        conn.commit()
    for _ in range(2):
        cursor.execute("SELECT 2")
        conn.rollback()
    conn.close()  # the backend reports its counts as it exits
    deadline = time.monotonic() + 60
    while counters.delta(before, counters.snapshot())["commits"] < 8:
        assert time.monotonic() < deadline, "pg_stat_database never counted the commits"
        time.sleep(0.2)
    return counters.delta(before, counters.settle(delay=0))


def test_postgresql_counters_count_the_transactions_of_their_database_exactly(db_servers, tmp_path):
    url = _empty_database("postgresql", db_servers, tmp_path)
    with ServerCounters(url) as counters:
        assert counters.backend == "postgresql"
        assert counters.statements_counted or "not counted server-side" in counters.scope
        # The counters' own reads go to another database: only ours are counted, and
        # the transaction a new backend commits as it starts (reading the catalogs).
        # An autovacuum worker visiting the database meanwhile would add its own: tried
        # again then.
        deltas = []
        for _ in range(3):
            delta = _pg_transactions(url, counters)
            deltas.append((delta["commits"], delta["rollbacks"]))
            assert delta["commits"] >= 7 + 1 and delta["rollbacks"] >= 2, delta
            if deltas[-1] == (7 + 1, 2):
                break
    assert (7 + 1, 2) in deltas, deltas


def test_mariadb_counters_count_statements_and_commits_less_their_own_reads(db_servers, tmp_path):
    url = _empty_database("mariadb", db_servers, tmp_path)
    conn = _driver_connect(url)
    cursor = conn.cursor()
    with ServerCounters(url) as counters:
        # One reading is one statement (SHOW GLOBAL STATUS), measured at start (the
        # least of a few pairs of readings in a row) and subtracted.
        assert counters.statements_counted
        assert counters._own["statements"] >= 1
        before = counters.snapshot()
        same = {key: value + counters._own.get(key, 0) for key, value in before.items()}
        assert set(counters.delta(before, same).values()) == {0}
        before = counters.snapshot()
        for _ in range(7):
            cursor.execute("SELECT 1")
            conn.commit()
        for _ in range(2):
            cursor.execute("SELECT 2")
            conn.rollback()
        delta = counters.delta(before, counters.snapshot())
    conn.close()
    # The server's counters are global: other clients of the same server (other tests
    # running beside this one) may add to them, never take away.
    expected = {"statements": 7 * 2 + 2 * 2, "commits": 7, "rollbacks": 2, "selects": 9}
    for key, value in expected.items():
        assert delta[key] >= value, (key, delta)
    assert delta["begins"] >= 0  # PyMySQL sends no BEGIN; others' may be counted


def test_sqlite_has_no_server_counters(tmp_path):
    with ServerCounters(f"sqlite:///{tmp_path}/x.sqlite") as counters:
        assert counters.snapshot() is None
        assert counters.delta(None, None) == {
            "statements": None,
            "commits": None,
            "rollbacks": None,
        }


@pytest.mark.parametrize(("backend", "per_write"), (("postgresql", 3), ("mariadb", 2)))
def test_round_trips_are_counted_on_the_wire(backend, per_write, db_servers, tmp_path):
    """psycopg2 sends BEGIN as a round trip of its own; PyMySQL sends none."""
    url = _empty_database(backend, db_servers, tmp_path)
    proxy = RoundTripProxy.for_url(url)
    db = Database(proxy.url(url))
    try:
        db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (i INTEGER)"))
        db.read(lambda conn: conn.exec_driver_sql("SELECT 1").all())  # both pools warm
        with StatementCounter(db) as counter:
            start = proxy.count
            for _ in range(5):
                db.write(lambda conn: conn.exec_driver_sql("INSERT INTO t VALUES (1)"))
            writes = proxy.count - start
            for _ in range(4):
                db.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM t").all())
            reads = proxy.count - start - writes
        assert writes == 5 * per_write
        assert reads == 4  # autocommit reads: the statement alone
        assert counter.counts() == {
            "statements": 9,
            "commits": 5,
            "rollbacks": 0,
            "transactions": 5,
        }
    finally:
        db.dispose()
        proxy.close()


def test_statement_counter_counts_write_commits_not_sqlite_read_transactions(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/x.sqlite")
    try:
        db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (i INTEGER)"))
        with StatementCounter(db) as counter:
            db.write(lambda conn: conn.exec_driver_sql("INSERT INTO t VALUES (1)"))
            db.read(lambda conn: conn.exec_driver_sql("SELECT * FROM t").all())
            with pytest.raises(RuntimeError), db.writer() as conn:
                conn.exec_driver_sql("INSERT INTO t VALUES (2)")
                raise RuntimeError("rolled back")
        # BEGIN IMMEDIATE and COMMIT are not statements; the read's commit is no write.
        assert counter.counts() == {
            "statements": 3,
            "commits": 1,
            "rollbacks": 1,
            "transactions": 2,
        }
        db.write(lambda conn: conn.exec_driver_sql("INSERT INTO t VALUES (3)"))
        assert counter.counts()["commits"] == 1  # detached
    finally:
        db.dispose()


def test_the_api_benchmark_prints_costs_per_operation(tmp_path):
    out = tmp_path / "bench.json"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "api.py"),
            "--db",
            "sqlite",
            "--workers",
            "1",
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--concurrency",
            "1",
            "--scenarios",
            "deployables,profile,arq,arq_nowait",
            "--floor-commits",
            "20",
            "--count-ops",
            "3",
            "--json",
            str(out),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Costs per operation (issue 25); commit floor on this database: x1: p50" in (
        result.stdout
    )
    for column in ("writes", "commits", "stmts", "trips", "floor ops/s", "gap x"):
        assert column in result.stdout
    report = json.loads(out.read_text())
    assert report["commit_floor"]["1"]["n"] == 20
    runs = {r["scenario"]: r for r in report["results"]}
    # Nova's cycle: create, bind, one GET (the bind needs no host work), delete.
    assert runs["arq"]["requests"] == 4 * runs["arq"]["ops"]
    assert runs["arq_nowait"]["requests"] == 3 * runs["arq_nowait"]["ops"]
    assert report["counted_in_process"]["arq"]["requests"] == 4
    costs = {name: run["costs"] for name, run in runs.items()}
    assert costs["deployables"]["writes"] == 0
    assert costs["deployables"]["gap"] is None
    assert costs["profile"]["writes"] == 2
    assert costs["arq"]["writes"] == 3
    assert costs["arq_nowait"]["writes"] == 3
    assert report["counted_in_process"]["profile"]["writes"] == 2
    for name in ("profile", "arq"):
        assert costs[name]["commits"] >= costs[name]["writes"]
        assert costs[name]["statements"] >= costs[name]["commits"]
        assert costs[name]["round_trips"] is None  # SQLite: no server
        assert costs[name]["floor_ms"] > 0
        assert costs[name]["gap"] > 0


def test_cyborg_runs_on_mariadb_only():
    from bench.api import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--target", "cyborg", "--db", "sqlite"])
    assert parse_args(["--target", "cyborg", "--db", "mariadb"]).target == "cyborg"
