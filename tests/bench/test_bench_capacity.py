"""The benches' capacity figures (doc/capacity.md): the database size read after a boot
storm, and the benches on a Galera cluster (``--db galera``)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import sqlalchemy as sa

from bench._common import database_growth, database_size
from exosuit.db import inventory
from exosuit.db.api import Database
from tests.conftest import BACKENDS, new_database_url
from tests.helpers.inventory import fpga, snapshot

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_database_size_counts_every_row_and_grows_with_the_hosts(
    backend, db_servers, tmp_path_factory
):
    # A new database: the shared one's tables keep the pages of earlier tests' rows.
    database = Database(new_database_url(backend, db_servers, tmp_path_factory))
    url = database.engine.url.render_as_string(hide_password=False)
    try:
        empty = database_size(url)
        with database.writer() as conn:
            for i in range(3):
                host = f"size-{i}"
                devices = [fpga(f"0000:{0x10 + d:02x}:00.0", handles=16) for d in range(4)]
                inventory.apply_snapshot(conn, host, snapshot(host, devices))
        full = database_size(url)
    finally:
        database.dispose()
    growth = database_growth(empty, full, hosts=3)
    # Exact counts: 3 hosts of 4 devices, each device one deployable of 16 handles.
    assert growth["rows_added"]["hosts"] == 3
    assert growth["rows_added"]["devices"] == 12
    assert growth["rows_added"]["deployables"] == 12
    assert growth["rows_added"]["attach_handles"] == 192
    assert growth["rows_per_host"]["attach_handles"] == 64
    if backend == "sqlite":
        assert full["bytes"] is None and growth["bytes_per_host"] is None
    else:
        # 192 attach handles need more than the one page an empty table has.
        assert full["bytes"] > empty["bytes"] > 0
        assert growth["bytes_per_host"] == round((full["bytes"] - empty["bytes"]) / 3)


@pytest.mark.slow
def test_the_api_benchmark_runs_on_a_galera_cluster(galera, tmp_path):
    """``--db galera`` on the suite's running cluster (EXOSUIT_BENCH_GALERA_URL names its
    node 1; without it the bench starts a private cluster of its own): a database of its
    own, migrated, the ARQ cycle run, the database dropped."""
    out = tmp_path / "bench.json"
    admin = galera.cluster.nodes[0].admin_url
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "api.py"),
            "--db",
            "galera",
            "--workers",
            "1",
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
            "--concurrency",
            "2",
            "--scenarios",
            "arq",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "EXOSUIT_BENCH_GALERA_URL": admin},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["db"] == "galera"
    (run,) = report["results"]
    assert run["scenario"] == "arq" and run["ops"] > 0
    # Nova's cycle: create, bind, one poll until Bound, delete.
    assert run["requests"] == 4 * run["ops"]
    # Each cycle left its audit records (create, bind, delete) behind.
    assert report["database_added"]["rows_added"]["audit_events"] >= 3 * run["ops"]
    # Its database is gone; the suite's is still there.
    engine = sa.create_engine(admin)
    try:
        with engine.connect() as conn:
            names = {r[0] for r in conn.exec_driver_sql("SHOW DATABASES")}
    finally:
        engine.dispose()
    assert not [n for n in names if n.startswith("exosuit_bench_")]
    assert sa.make_url(galera.urls[0]).database in names
