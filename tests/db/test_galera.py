"""The concurrency tests on a 3-node MariaDB Galera cluster, their writers spread over the
three nodes (tests/helpers/galera.py: the cluster starts once per run).

On Galera a row lock, ``SELECT … FOR UPDATE`` and ``SKIP LOCKED`` hold on the node that
takes them only; what keeps two writers on two nodes apart is certification: of two
transactions that wrote one row, the one that commits second fails (a deadlock, 1213) and
``Database.write`` runs it again. Each test here is one of the suite's storms with each
client's request sent to the next node's API in turn, and the same assertions: exactly as
many holders as handles, every time. Then two conductors on two nodes share one job queue,
and a node out of the cluster (isolated, then back) delays a write rather than failing it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from exosuit.conductor.worker import Conductor
from exosuit.db import jobs, models
from exosuit.db.api import Database
from tests.conductor.test_jobs import (
    FAST,
    Runs,
    all_succeeded,
    assert_each_ran_once,
    conductor_conf,
)
from tests.db import test_bind_concurrency as binds
from tests.db import test_claim_storm as claim_storms
from tests.db.test_bind_concurrency import HttpApi, assert_consistent, bind_ops, fault, storm
from tests.helpers.agent_processes import wait_for
from tests.helpers.galera import node_databases, serve_each
from tests.helpers.inventory import fpga, snapshot

V_CLAIMS = "2.8"
V_DRAIN = "2.9"


@pytest.fixture
def galera_databases(galera):
    """One Database per node, empty."""
    yield from node_databases(galera)


@pytest.fixture
def spread_api(conf, galera_databases):
    """The API on each node; each call goes to the next one."""
    yield from serve_each(conf, galera_databases, HttpApi, threads=40)


def test_bind_storm_64_clients_16_handles_over_three_nodes(spread_api, galera_databases):
    """64 binds for 16 handles, spread over the nodes: 16 x 202, 48 x 409, no double hold
    (three rounds)."""
    binds.test_bind_storm_64_clients_16_handles(spread_api, galera_databases[0])


def test_binds_race_unbinds_and_deletes_over_three_nodes(spread_api, galera_databases):
    """Binds against unbinds and deletes of the holders, spread over the nodes."""
    binds.test_mixed_storm_bind_unbind_delete(spread_api, galera_databases[0])


def test_claims_race_binds_over_three_nodes(spread_api, galera_databases):
    """32 claims and 32 ARQ binds for 16 handles at once, spread over the nodes: exactly
    16 holders between them, each handle held once; the others refused saying why."""
    api, database = spread_api, galera_databases[0]
    rp_uuid, arqs = binds.seed(api, 32)  # the "storm" profile: 32 ARQs
    api.ok(
        "POST",
        "/v2/device_profiles",
        [{"name": "one", "groups": [{"resources:FPGA": "1"}]}],
        expect=201,
    )
    calls = [
        (
            lambda u=u: api.call(
                "PATCH", "/v2/accelerator_requests", {u: bind_ops(rp_uuid, str(uuid.uuid4()))}
            )
        )
        for u in arqs
    ]
    calls += [
        lambda: api.call("POST", "/v2/claims", {"device_profile_name": "one"}, version=V_CLAIMS)
        for _ in range(32)
    ]
    results = storm(calls)
    bind_results, claim_results = results[:32], results[32:]
    assert {s for s, _ in bind_results} <= {202, 409}, bind_results
    assert {s for s, _ in claim_results} <= {201, 409}, claim_results
    for status, body in bind_results:
        if status == 409:
            assert binds.NO_FREE_HANDLE in fault(body)["faultstring"], body
    for status, body in claim_results:
        if status == 409:
            assert fault(body)["code"] == "exosuit.claim.unsatisfiable", body
    bound = sum(s == 202 for s, _ in bind_results)
    claimed = sum(s == 201 for s, _ in claim_results)
    assert bound + claimed == binds.HANDLES, (bound, claimed)
    in_use, ids = binds.held_handles(database)
    assert in_use == len(ids) == len(set(ids)) == binds.HANDLES
    claims = claim_storms.live_claims(api)
    assert len(claims) == claimed
    claim_handles = {d["attach_handle_uuid"] for c in claims for d in c["devices"]}
    listed = binds.arqs_by_uuid(api)
    arq_handles = {listed[u]["attach_handle_uuid"] for u in arqs if listed[u]["state"] == "Bound"}
    assert len(arq_handles) == bound and not claim_handles & arq_handles


def test_boot_storm_new_hosts_over_three_nodes(spread_api, galera_databases):
    """24 new hosts report their first inventory at once, each twice (to two nodes): each
    host is made once with its device; then 48 claims for their 24 handles: 24 made."""
    api, database = spread_api, galera_databases[0]
    names = [f"galera-boot-{n:02d}" for n in range(24)]
    reports = {h: snapshot(h, [fpga("0000:5e:00.0", handles=1)]) for h in names}
    results = storm(
        [
            (lambda h=h: api.call("PUT", f"/agent/v1/hosts/{h}/inventory", reports[h]))
            for h in names
            for _ in range(2)
        ]
    )
    assert {s for s, _ in results} == {200}, [r for r in results if r[0] != 200]
    with database.reader() as conn:
        hosts = Counter(conn.execute(sa.select(models.hosts.c.hostname)).scalars())
        devices = Counter(conn.execute(sa.select(models.devices.c.hostname)).scalars())
        handles = conn.execute(sa.select(sa.func.count()).select_from(models.attach_handles))
        assert handles.scalar() == len(names)
    assert hosts == dict.fromkeys(names, 1)
    assert devices == dict.fromkeys(names, 1)
    api.ok(
        "POST",
        "/v2/device_profiles",
        [{"name": "one", "groups": [{"resources:FPGA": "1"}]}],
        expect=201,
    )
    claims = storm(
        [
            lambda: api.call("POST", "/v2/claims", {"device_profile_name": "one"}, version=V_CLAIMS)
            for _ in range(2 * len(names))
        ]
    )
    assert Counter(s for s, _ in claims) == {201: len(names), 409: len(names)}, claims
    in_use, ids = binds.held_handles(database)
    assert in_use == len(ids) == len(set(ids)) == len(names)


def test_drain_during_binds_over_three_nodes(spread_api, galera_databases):
    """A drain of the device lands among 48 binds spread over the nodes: the binds that won
    hold distinct handles, the device's holders are exactly they, and every bind sent after
    the drain answered is refused."""
    api, database = spread_api, galera_databases[0]
    rp_uuid, arqs = binds.seed(api, 48)
    (device,) = api.ok("GET", "/v2/devices")["devices"]
    path = f"/v2/devices/{device['uuid']}/drain"
    calls = [binds.later(0.05, lambda: api.call("POST", path, {}, version=V_DRAIN))]
    calls += [
        binds.later(
            i * 0.3 / len(arqs),
            lambda u=u: api.call(
                "PATCH", "/v2/accelerator_requests", {u: bind_ops(rp_uuid, str(uuid.uuid4()))}
            ),
        )
        for i, u in enumerate(arqs)
    ]
    results = storm(calls)
    drained, bind_results = results[0], results[1:]
    assert drained[0] == 200, drained
    assert {s for s, _ in bind_results} <= {202, 409}, bind_results
    won = {u for u, (s, _) in zip(arqs, bind_results, strict=True) if s == 202}
    assert len(won) <= binds.HANDLES
    all_arqs = assert_consistent(api, database, expect_bound=len(won))
    status, body = api.call("GET", f"/v2/devices/{device['uuid']}", version=V_DRAIN)
    assert status == 200, body
    assert body["status"] == "maintaining"
    assert {h["arq_uuid"] for h in body["holders"]} == won
    assert body["maintenance"] == ("draining" if won else "drained")
    assert {h["attach_handle_uuid"] for h in body["holders"]} == {
        all_arqs[u]["attach_handle_uuid"] for u in won
    }
    # After the drain's answer, on any node: no bind wins.
    late = [u for u in arqs if u not in won][:6]
    for u in late:
        api.ok(
            "PATCH",
            "/v2/accelerator_requests",
            {u: [{"op": "remove", "path": "/hostname"}]},
            expect=202,
        )
    after = storm(
        [
            (
                lambda u=u: api.call(
                    "PATCH", "/v2/accelerator_requests", {u: bind_ops(rp_uuid, str(uuid.uuid4()))}
                )
            )
            for u in late
        ]
    )
    assert {s for s, _ in after} == {409}, after
    assert binds.held_handles(database)[0] == len(won)


def test_two_conductors_on_two_nodes_run_each_job_once(galera_databases, tmp_path):
    """Two conductors of 3 workers each, on nodes 1 and 2, hammer one queue of 60 jobs
    enqueued on node 3: every job runs once, none twice at the same time, and both
    conductors did some of the work (a claim that lost certification was run again)."""
    first, second, third = galera_databases
    count = 60
    with third.writer() as conn:
        for n in range(count):
            jobs.enqueue(conn, "test.record", {"dir": str(tmp_path), "n": n, "sleep": 0.01})
    conductors = [
        Conductor(conductor_conf(), db, workers=3, settings=FAST, periodic={}, name=name)
        for db, name in ((first, "node1"), (second, "node2"))
    ]
    for conductor in conductors:
        conductor.start()
    try:
        wait_for(lambda: all_succeeded(third, count), 120, "all jobs succeeded")
    finally:
        for conductor in conductors:
            assert conductor.stop(timeout=30)
    runs = Runs(tmp_path)
    assert_each_ran_once(runs, count)
    workers = [
        r["worker"]
        for r in third.read(lambda conn: conn.execute(sa.select(models.jobs)).mappings().all())
    ]
    assert {w.split(":")[2].split("-")[0] for w in workers} == {"node1", "node2"}


@contextlib.contextmanager
def _rejecting_queries(url: str) -> Iterator[None]:
    """The node of ``url`` refuses every new connection's queries meanwhile; the one
    connection that said so says when to stop (a new one would be refused too)."""
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SET GLOBAL wsrep_reject_queries = ALL")
            try:
                yield
            finally:
                conn.exec_driver_sql("SET GLOBAL wsrep_reject_queries = NONE")
    finally:
        engine.dispose()


def test_a_write_to_a_node_not_ready_is_retried_until_it_is(galera, galera_databases, caplog):
    """Node 3 refuses queries as a node that is not yet synced does (1047, "WSREP has not
    yet prepared node for application use"): a write sent to it is retried by the one
    retry rule (said at DEBUG), and commits once the node answers; node 1 sees it."""
    caplog.set_level(logging.DEBUG, logger="exosuit.db.api")
    db = Database(galera.urls[2], max_retries=200)
    errors: list[BaseException] = []

    def add_host(conn) -> None:
        values = {"hostname": "galera-not-ready", "created_at": models.utcnow()}
        conn.execute(sa.insert(models.hosts).values(**values))

    def write() -> None:
        try:
            db.write(add_host)
        except BaseException as error:  # reported below
            errors.append(error)

    def retried() -> bool:
        return any("has not yet prepared node" in r.getMessage() for r in caplog.records)

    writer = threading.Thread(target=write)
    with _rejecting_queries(galera.urls[2]):
        writer.start()
        wait_for(lambda: retried() or not writer.is_alive(), 60, "a refused attempt retried")
        assert writer.is_alive(), errors
    writer.join(120)
    db.dispose()
    assert not writer.is_alive() and errors == []
    with galera_databases[0].reader() as conn:
        hosts = conn.execute(sa.select(models.hosts.c.hostname)).scalars().all()
    assert hosts == ["galera-not-ready"]
