"""The fault campaign (bench/chaos.py), short: a few kills, short outages, its invariants.

``test_short_campaign`` runs the campaign as ``bench/chaos.py`` runs it (a subprocess
that starts its own private PostgreSQL, uses a fresh MariaDB database behind its
proxy, or starts a private 3-node Galera cluster, its own Placement, two exosuit-api,
two exosuit-conductor, two agents), with 20 s of load, 3 kill -9, a 5 s database
outage (on Galera: one node killed -9 for 5 s, rejoining by IST) and a 5 s Placement
outage, and checks
that every invariant held and that the faults and the load really happened. Nothing
depends on the machine's speed: the campaign's waits are bounded by generous deadlines
and no duration is asserted.

``test_checks_find_violations`` shows that the campaign's checks (bench/invariants.py)
are not vacuous: on a database put by hand into each bad state, each check reports it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from bench._common import PrivatePostgres
from bench.chaos import parse_args
from bench.galera import galera_missing
from bench.invariants import (
    Arq,
    check_double_holders,
    check_handles,
    check_inventory,
    check_ledger,
    check_stuck,
)
from exosuit.db import arqs as arqs_db
from exosuit.db import device_profiles, inventory, models
from tests.conftest import MYSQL_URL, require
from tests.helpers.inventory import fpga, snapshot

ROOT = Path(__file__).resolve().parents[2]
# About 50 s per backend on a busy 2-core machine: 20 s of load, set-up and checks.
SHORT = [
    "--duration", "20", "--kills", "3", "--db-outage", "5", "--placement-outage", "5",
    "--bind-timeout", "20", "--lease-seconds", "15", "--clients", "6", "--sim-hosts", "3",
    "--lifetime", "0.5", "3", "--settle-timeout", "300", "--seed", "7",
]  # fmt: skip


GALERA_LAYOUT = (("api-1", 1), ("api-2", 2), ("conductor-1", 3), ("conductor-2", 1))


def _mariadb_reachable() -> bool:
    try:
        engine = sa.create_engine(MYSQL_URL)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
        return True
    except Exception:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql", "mariadb", "galera"])
def test_short_campaign(backend, tmp_path):
    require(
        Path(sys.executable).with_name("placement-manage").exists()
        or shutil.which("placement-manage") is not None,
        "openstack-placement is not installed",
    )
    if backend == "postgresql":
        try:
            PrivatePostgres(str(tmp_path))
        except RuntimeError as error:
            require(False, str(error))
    elif backend == "galera":
        missing = galera_missing()
        require(missing is None, f"no Galera cluster here: {missing}")
    else:
        require(_mariadb_reachable(), f"MariaDB at {MYSQL_URL} unavailable")
    out = tmp_path / "chaos.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "chaos.py"), "--backend", backend, *SHORT]
        + ["--json", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "EXOSUIT_BENCH_MYSQL_URL": MYSQL_URL},
    )
    report = done.stdout + done.stderr[-6000:]
    assert out.exists(), report
    (result,) = json.loads(out.read_text())
    broken = {k: v["violations"] for k, v in result["invariants"].items() if not v["ok"]}
    assert not broken, report
    assert done.returncode == 0, report
    # The faults happened ...
    kills = sum(p["kills"] for p in result["processes"].values())
    assert kills == 3, report
    assert any(f.startswith("database outage") for f in result["faults"]), report
    assert any(f.startswith("Placement outage") for f in result["faults"]), report
    # ... and the load went through them: instances bound and deleted, hosts reporting.
    ops = result["operations"]
    assert ops.get("instances bound", 0) > 0, report
    assert ops.get("instances deleted (204)", 0) > 0, report
    assert ops.get("inventory reports acknowledged", 0) > 0, report
    if backend == "galera":
        # The killed node came back by IST (the writes it missed), and the APIs and
        # conductors were on different nodes.
        (rejoin,) = result["galera_rejoins"]
        assert rejoin["transfer"] == "IST", report
        assert {ops[f"{p} on Galera node {n}"] for p, n in GALERA_LAYOUT} == {1}, report
        assert result["invariants"]["the three Galera nodes hold the same rows"]["ok"]


HOST = "chaos-sim-0"


def _bound_host(db):
    """One simulated host's FPGA (4 handles), a profile, two ARQs: one bound, one not."""
    db.write(inventory.apply_snapshot, HOST, snapshot(HOST, [fpga("0000:21:00.0", handles=4)]))
    db.write(device_profiles.create, name="p", groups=[{"resources:FPGA": "1"}])
    first, second = (
        db.write(arqs_db.create, profile_name="p", project_id=None, handles_per_unit={})[0]
        for _ in range(2)
    )
    dep = models.deployables
    rp_uuid = db.read(lambda conn: conn.execute(sa.select(dep.c.rp_uuid)).scalar_one())
    instance = "00000000-0000-4000-8000-000000000001"
    binding = arqs_db.Binding(first["uuid"], HOST, rp_uuid, instance)
    (result,) = db.write(arqs_db.bind, [binding], arqs_db.Scope(None), skip_locked=False)
    assert result.arq["state"] == "Bound" and result.error is None
    return first["uuid"], second["uuid"], rp_uuid, instance


def test_checks_find_violations(database):
    # The campaign's bind_timeout, as it checks with it.
    bind_timeout = parse_args(["--sim-hosts", "1", "--agents", "0"]).bind_timeout
    bound, created, rp_uuid, instance = _bound_host(database)
    ledger = {
        bound: Arq(bound, instance, "p", "bound", HOST, rp_uuid),
        created: Arq(created, "-", "p", "created"),
    }
    acked = {HOST: snapshot(HOST, [fpga("0000:21:00.0", handles=4)])}
    # A consistent state: nothing to report.
    assert check_double_holders(database) == []
    assert check_handles(database) == []
    assert check_stuck(database, bind_timeout) == []
    assert check_ledger(database, ledger) == []
    assert check_inventory(database, [HOST], acked) == []

    arq, ah = models.accelerator_requests, models.attach_handles

    def update(table, where, **values) -> None:
        database.write(lambda conn: conn.execute(sa.update(table).where(where).values(**values)))

    # Two holders of one handle: the schema refuses it (UNIQUE), whatever the code does.
    handle = database.read(
        lambda conn: conn.execute(
            sa.select(arq.c.attach_handle_id).where(arq.c.uuid == bound)
        ).scalar_one()
    )
    with pytest.raises(sa.exc.IntegrityError):
        update(arq, arq.c.uuid == created, attach_handle_id=handle)
    # A held handle not in use, and a free one in use.
    update(ah, ah.c.id == handle, in_use=False)
    update(ah, ah.c.id != handle, in_use=True)
    problems = check_handles(database)
    assert any("not in use" in p for p in problems), problems
    assert sum("held by no ARQ" in p for p in problems) == 3, problems
    # An ARQ BindStarted since longer than bind_timeout.
    long_ago = models.utcnow() - dt.timedelta(seconds=bind_timeout + 5)
    update(arq, arq.c.uuid == created, state="BindStarted", updated_at=long_ago)
    assert [p for p in check_stuck(database, bind_timeout) if created in p], check_stuck(
        database, bind_timeout
    )
    # Acknowledged writes missing: the bound ARQ unbound behind the client's back, the
    # created one gone, one said deleted still there.
    update(arq, arq.c.uuid == bound, state="Unbound")
    database.write(lambda conn: conn.execute(sa.delete(arq).where(arq.c.uuid == created)))
    ghost = database.write(arqs_db.create, profile_name="p", project_id=None, handles_per_unit={})
    ledger[ghost[0]["uuid"]] = Arq(ghost[0]["uuid"], "-", "p", "deleted")
    problems = check_ledger(database, ledger)
    assert len(problems) == 3, problems
    # The host's inventory is not its last acknowledged report.
    acked[HOST] = snapshot(HOST, [fpga("0000:21:00.0", handles=4), fpga("0000:22:00.0", handles=4)])
    assert check_inventory(database, [HOST], acked), "a missing device was not reported"
