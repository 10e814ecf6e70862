"""The API's cache of host reports on SQLite, PostgreSQL and MariaDB (issue 16): an
unchanged report of a host this process read costs no read of the host; a change of
the host's snapshot or desired state committed by another process (or the conductor)
is seen by the next report, never answered from the cache."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from exosuit.api.deploy import loadapp
from exosuit.db import changes, desired_state, inventory, models
from tests.conftest import ApiClient
from tests.db.test_unchanged_reports import statements
from tests.helpers.inventory import fpga, snapshot

HOST = "cached-host"
HEADER = "Exosuit-Desired-Generation"


def _put(api, body, generation="0"):
    return api.put(f"/agent/v1/hosts/{HOST}/inventory", body, headers={HEADER: generation})


@pytest.fixture
def two(conf, database):
    """Two API processes on one database (each its own application and cache)."""
    return ApiClient(loadapp(conf, database)), ApiClient(loadapp(conf, database))


@pytest.fixture
def first(two):
    """The host's first snapshot, applied through the first process, and its hash-only
    report, answered once there (so that process keeps the host)."""
    a, _ = two
    body = snapshot(HOST, [fpga("0000:0c:00.0")])
    assert _put(a, body).status_code == 200
    quiet = {"schema_version": 1, "hash": body["hash"], "hostname": HOST}
    assert _put(a, quiet).json == {"hostname": HOST, "hash": body["hash"], "changed": False}
    return quiet


def test_a_kept_host_costs_no_read_of_its_own(two, database, first):
    a, _ = two
    with statements(database, a) as seen:
        answer = _put(a, first).json
    assert answer == {"hostname": HOST, "hash": first["hash"], "changed": False}
    # Only the version (shared with the reports that came meanwhile), not the host.
    assert len(seen) == 1 and "metric_counters" in seen[0] and "hosts" not in seen[0], seen


def test_a_snapshot_applied_by_another_process_is_seen(two, database, first):
    a, b = two
    changed = snapshot(HOST, [fpga("0000:0c:00.0"), fpga("0000:0d:00.0")])
    assert _put(b, changed).json["changed"] is True
    # The first process kept the old hash: an agent sending it gets 412, not "unchanged".
    response = _put(a, first)
    assert response.status_code == 412, response.text
    quiet = {**first, "hash": changed["hash"]}
    assert _put(a, quiet).json == {"hostname": HOST, "hash": changed["hash"], "changed": False}


def test_a_desired_state_changed_elsewhere_comes_in_the_answer(two, database, first):
    a, _ = two
    database.write(desired_state.bump, [HOST])  # as another process or the conductor
    answer = _put(a, first, "0").json
    assert answer["desired_state"]["generation"] == 1
    assert "desired_state" not in _put(a, first, "1").json


def _delete_hosts(conn) -> None:
    """No write function of Exosuit deletes a host: a test that does says so, as they
    would (exosuit/db/changes.py: ``mark``)."""
    conn.execute(sa.delete(models.hosts))
    changes.mark(conn, changes.HOST_REPORTS)


def test_a_host_deleted_elsewhere_is_not_answered_from_the_cache(two, database, first):
    a, _ = two
    database.write(_delete_hosts)
    response = _put(a, first)
    assert response.status_code == 412, response.text


def _version(database) -> int:
    return database.read(changes.version, changes.HOST_REPORTS)


def _changed_snapshot(conn) -> None:
    inventory.apply_snapshot(conn, HOST, snapshot(HOST, [fpga("0000:0d:00.0")]))


def _report_time(conn) -> None:
    assert inventory.touch_host(conn, HOST, _hash(conn), 0.0)


def _observed_generation(conn) -> None:
    inventory.touch_host(conn, HOST, _hash(conn), 3600.0, observed_generation=3)


def _hash(conn) -> str:
    hosts = models.hosts
    query = sa.select(hosts.c.snapshot_hash).where(hosts.c.hostname == HOST)
    return str(conn.execute(query).scalar_one())


# The writes of a host's row, through the write functions that make them.
WRITES = {
    "desired generation": (lambda conn: desired_state.bump(conn, [HOST]), True),
    "snapshot hash": (_changed_snapshot, True),
    "report time": (_report_time, False),
    "observed generation": (_observed_generation, False),
    "host deleted": (_delete_hosts, True),
}


@pytest.mark.parametrize("write", WRITES, ids=list(WRITES))
def test_what_moves_the_version(database, first, write):
    fn, moves = WRITES[write]
    before = _version(database)
    database.write(fn)
    assert (_version(database) > before) is moves


def test_reports_that_write_only_the_report_time_leave_the_version(two, database, first):
    a, _ = two
    before = _version(database)
    # The observed generation moves (a write), and a report older than the resolution.
    assert _put(a, {**first, "observed_generation": 0}).status_code == 200
    database.write(lambda conn: conn.execute(sa.update(models.hosts).values(last_report_at=None)))
    assert _put(a, first).status_code == 200
    assert _version(database) == before


def test_an_agent_without_the_header_is_answered_from_the_cache_too(two, database, first):
    a, _ = two
    path = f"/agent/v1/hosts/{HOST}/inventory"
    assert a.put(path, first).json["desired_state"]["generation"] == 0
    with statements(database) as seen:
        answer = a.put(path, first).json
    assert answer["changed"] is False and answer["desired_state"]["generation"] == 0
    # The desired state is read (the agent holds none it names); the host's report is not.
    assert not any("snapshot_hash" in s for s in seen), seen
