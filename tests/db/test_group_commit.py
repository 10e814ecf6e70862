"""Group commit of agent reports (exosuit/db/group_commit.py), on SQLite, PostgreSQL and
MariaDB: the writes queued while a leader holds the admission slot are applied in one
transaction, each in its own savepoint; one write's failure is its own answer and
leaves the others applied; a lost connection before the commit answers nothing as
done unless a later attempt committed it; and through the API, a snapshot the schema
refuses gets its 400 while the hosts batched with it are applied."""

from __future__ import annotations

import json
import threading
import time

import pytest
import sqlalchemy as sa
import webob

from exosuit import exceptions
from exosuit.api import wsgi
from exosuit.api.admission import Admission
from exosuit.api.deploy import loadapp
from exosuit.db import inventory, models
from exosuit.db.group_commit import GroupCommit
from tests.conftest import make_test_conf
from tests.helpers.inventory import fpga, snapshot

DEADLINE = 60.0


def _admission(wait: float = 60.0) -> Admission:
    return Admission(1, wait, message="busy; retry later.", code="test.busy")


def _devices(database, hostname: str) -> int:
    def count(conn):
        query = sa.select(sa.func.count()).where(models.devices.c.hostname == hostname)
        return conn.execute(query).scalar()

    return database.read(count)


def _host_names(database) -> set[str]:
    def names(conn):
        return {r.hostname for r in conn.execute(sa.select(models.hosts.c.hostname))}

    return database.read(names)


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE} s: {what}")
        time.sleep(0.01)


class _Batch:
    """Writes queued while the test holds the only admission slot, then let go at once:
    one leader takes them all. ``outcomes``: host → ("ok", result) or ("error", exc)."""

    def __init__(self, group: GroupCommit) -> None:
        self.group = group
        self.threads: list[threading.Thread] = []
        self.outcomes: dict[str, tuple[str, object]] = {}
        assert group.admission.try_acquire()  # another leader, for now

    def add(self, key: str, apply, prepare=None) -> None:
        def run():
            try:
                self.outcomes[key] = ("ok", self.group.run(key, apply, prepare=prepare))
            except BaseException as error:  # noqa: BLE001 - the outcome under test
                self.outcomes[key] = ("error", error)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def release(self) -> dict[str, tuple[str, object]]:
        _wait_until(lambda: self.group.queued == len(self.threads), "every write queued")
        self.group.admission.release()
        for thread in self.threads:
            thread.join(DEADLINE)
            assert not thread.is_alive()
        return self.outcomes


def _apply(hostname: str, body: dict):
    return lambda conn: inventory.apply_snapshot(conn, hostname, body, expect_new=True)


def test_several_hosts_in_one_transaction(database):
    group = GroupCommit(database, _admission())
    batch = _Batch(group)
    hosts = [f"gc-{i}" for i in range(4)]
    for i, host in enumerate(hosts):
        batch.add(host, _apply(host, snapshot(host, [fpga(f"0000:0{i + 1}:00.0")])))
    outcomes = batch.release()
    assert {h: kind for h, (kind, _) in outcomes.items()} == dict.fromkeys(hosts, "ok")
    assert all(result.changed for _, result in outcomes.values())
    assert (group.transactions, group.writes) == (1, 4)
    assert all(_devices(database, h) == 1 for h in hosts)


def test_one_failing_write_fails_alone(database):
    group = GroupCommit(database, _admission())

    def seed(conn):
        conn.execute(sa.insert(models.hosts).values(hostname="gc-seen", created_at=models.utcnow()))

    database.write(seed)
    batch = _Batch(group)
    batch.add("gc-a", _apply("gc-a", snapshot("gc-a", [fpga("0000:0a:00.0")])))

    def written_then_failed(conn):
        inventory.apply_snapshot(conn, "gc-b", snapshot("gc-b", [fpga("0000:0b:00.0")]))
        raise RuntimeError("gc-b fails after writing")

    batch.add("gc-b", written_then_failed)

    def conflicting(conn):  # the database refuses it: the transaction is aborted there
        conn.execute(sa.insert(models.hosts).values(hostname="gc-seen", created_at=models.utcnow()))

    batch.add("gc-c", conflicting)

    def refused_first():
        raise exceptions.InventoryInvalid(hostname="gc-d", reason="test")

    batch.add("gc-d", _apply("gc-d", snapshot("gc-d", [fpga("0000:0d:00.0")])), refused_first)
    batch.add("gc-e", _apply("gc-e", snapshot("gc-e", [fpga("0000:0e:00.0")])))
    outcomes = batch.release()

    assert outcomes["gc-a"][0] == outcomes["gc-e"][0] == "ok"
    assert outcomes["gc-b"][0] == "error" and "gc-b fails" in str(outcomes["gc-b"][1])
    assert outcomes["gc-c"][0] == "error"
    assert isinstance(outcomes["gc-c"][1], sa.exc.IntegrityError)
    assert isinstance(outcomes["gc-d"][1], exceptions.InventoryInvalid)
    # gc-a, gc-b, gc-c and gc-e in one transaction (gc-d's check refused it first),
    # committed with gc-a's and gc-e's writes only.
    assert (group.transactions, group.writes) == (1, 4)
    assert _host_names(database) == {"gc-seen", "gc-a", "gc-e"}
    assert _devices(database, "gc-a") == _devices(database, "gc-e") == 1
    assert _devices(database, "gc-b") == 0


def test_a_write_not_taken_in_time_is_refused_and_writes_nothing(database):
    group = GroupCommit(database, _admission(wait=0.05))
    assert group.admission.try_acquire()  # held elsewhere for longer than the wait
    try:
        with pytest.raises(wsgi.ApiError) as refused:
            group.run("gc-late", _apply("gc-late", snapshot("gc-late", [fpga("0000:0c:00.0")])))
    finally:
        group.admission.release()
    assert refused.value.status == 429
    assert group.queued == 0
    assert _host_names(database) == set()


def _server_connection(database, db_servers):
    server = db_servers["postgresql" if database.dialect == "postgresql" else "mariadb"]
    return server.engine


def _kill(engine, dialect: str, ident: int) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if dialect == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(ident)})")
        else:
            conn.exec_driver_sql(f"KILL {int(ident)}")


def _backend_id(conn) -> int:
    postgresql = conn.dialect.name == "postgresql"
    query = "SELECT pg_backend_pid()" if postgresql else "SELECT CONNECTION_ID()"
    return int(conn.exec_driver_sql(query).scalar())


def test_connection_lost_at_the_commit_answers_nothing_as_done(database, db_servers):
    if database.dialect == "sqlite":
        pytest.skip("SQLite has no server connection to lose")
    admin = _server_connection(database, db_servers)
    group = GroupCommit(database, _admission())
    batch = _Batch(group)
    idents: list[int] = []

    def first(conn):
        idents.append(_backend_id(conn))
        return _apply("gc-1", snapshot("gc-1", [fpga("0000:01:00.0")]))(conn)

    def kill_before_commit(conn):
        if idents:
            _kill(admin, database.dialect, idents.pop())

    batch.add("gc-1", first)
    batch.add("gc-2", _apply("gc-2", snapshot("gc-2", [fpga("0000:02:00.0")])))
    sa.event.listen(database.engine, "commit", kill_before_commit)
    try:
        outcomes = batch.release()
    finally:
        sa.event.remove(database.engine, "commit", kill_before_commit)
    assert {h: kind for h, (kind, _) in outcomes.items()} == {"gc-1": "error", "gc-2": "error"}
    assert all(isinstance(e, exceptions.DatabaseUnavailable) for _, e in outcomes.values())
    assert group.transactions == 0
    assert _host_names(database) == set()  # the server never committed it


def test_connection_lost_before_the_commit_runs_the_batch_again(database, db_servers):
    if database.dialect == "sqlite":
        pytest.skip("SQLite has no server connection to lose")
    admin = _server_connection(database, db_servers)
    group = GroupCommit(database, _admission())
    batch = _Batch(group)
    attempts = []

    def killed_once(conn):  # the first attempt loses its connection mid-batch
        attempts.append(1)
        result = _apply("gc-1", snapshot("gc-1", [fpga("0000:01:00.0")]))(conn)
        if len(attempts) == 1:
            _kill(admin, database.dialect, _backend_id(conn))
            conn.exec_driver_sql("SELECT 1")  # finds the connection gone
        return result

    batch.add("gc-1", killed_once)
    batch.add("gc-2", _apply("gc-2", snapshot("gc-2", [fpga("0000:02:00.0")])))
    outcomes = batch.release()
    assert {h: kind for h, (kind, _) in outcomes.items()} == {"gc-1": "ok", "gc-2": "ok"}
    assert len(attempts) == 2
    assert (group.transactions, group.writes) == (1, 2)
    # Applied once each: the first attempt rolled back with its connection.
    assert _devices(database, "gc-1") == _devices(database, "gc-2") == 1


def test_through_the_api_a_refused_snapshot_fails_alone(database):
    conf = make_test_conf(**{"api.inventory_concurrency": 1, "api.inventory_wait": 60})
    app = loadapp(conf, database)
    group = app.application.inventory_writes
    statuses: dict[str, int] = {}
    bodies = {
        f"gc-api-{i}": snapshot(f"gc-api-{i}", [fpga(f"0000:0{i + 1}:00.0")]) for i in range(3)
    }
    bodies["gc-api-1"]["hash"] = "sha256:" + "0" * 64  # not its content's: 400

    def put(host: str) -> None:
        request = webob.Request.blank(
            f"/agent/v1/hosts/{host}/inventory",
            method="PUT",
            body=json.dumps(bodies[host]).encode(),
            content_type="application/json",
        )
        statuses[host] = request.get_response(app).status_code

    assert group.admission.try_acquire()
    threads = [threading.Thread(target=put, args=(h,), daemon=True) for h in bodies]
    for thread in threads:
        thread.start()
    _wait_until(lambda: group.queued == len(threads), "every snapshot queued")
    group.admission.release()
    for thread in threads:
        thread.join(DEADLINE)
    assert statuses == {"gc-api-0": 200, "gc-api-1": 400, "gc-api-2": 200}
    assert (group.transactions, group.writes) == (1, 2)
    assert _host_names(database) == {"gc-api-0", "gc-api-2"}


class _Deadlock(Exception):
    """A DB-API error as MariaDB raises a deadlock (1213)."""

    def __init__(self) -> None:
        super().__init__(1213, "Deadlock found when trying to get lock; try restarting transaction")


def test_a_deadlock_in_one_write_runs_the_whole_batch_again(database):
    # As MariaDB (and Galera) do on a deadlock: the whole transaction rolled back, its
    # savepoints with it; the batch must run again, not roll back to a savepoint gone.
    group = GroupCommit(database, _admission())
    batch = _Batch(group)
    attempts = []

    def deadlocked_once(conn):
        attempts.append(1)
        result = _apply("gc-2", snapshot("gc-2", [fpga("0000:02:00.0")]))(conn)
        if len(attempts) == 1:
            conn.exec_driver_sql("ROLLBACK")
            raise sa.exc.OperationalError("INSERT …", {}, _Deadlock())
        return result

    batch.add("gc-1", _apply("gc-1", snapshot("gc-1", [fpga("0000:01:00.0")])))
    batch.add("gc-2", deadlocked_once)
    batch.add("gc-3", _apply("gc-3", snapshot("gc-3", [fpga("0000:03:00.0")])))
    outcomes = batch.release()
    assert {h: kind for h, (kind, _) in outcomes.items()} == dict.fromkeys(
        ("gc-1", "gc-2", "gc-3"), "ok"
    )
    assert len(attempts) == 2
    assert (group.transactions, group.writes) == (1, 3)
    assert all(_devices(database, h) == 1 for h in ("gc-1", "gc-2", "gc-3"))
