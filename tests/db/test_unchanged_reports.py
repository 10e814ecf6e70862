"""What an unchanged agent report costs and answers (issue 16), on SQLite, PostgreSQL and
MariaDB: one indexed read and no write when the agent holds the host's current desired
state (``Exosuit-Desired-Generation``), the desired state in the answer otherwise.
"""

from __future__ import annotations

import contextlib

import pytest
import sqlalchemy as sa

from exosuit.db import desired_state
from exosuit.schemas import device_identity
from tests.helpers.inventory import fpga, snapshot

HOST = "quiet-host"
ADDRESS = "0000:0c:00.0"
HEADER = "Exosuit-Desired-Generation"


@contextlib.contextmanager
def statements(database, *apis):
    """Every statement sent to ``database`` meanwhile (all its engines), but SQLite's
    BEGIN of a read transaction; and the counter reads each of ``apis`` sent on its
    own connection (exosuit/db/changes.py: CounterReader, which SQLAlchemy's events do
    not see), each as ``DIRECT_READ``."""
    seen: list[str] = []
    target = database.url.render_as_string(hide_password=False)
    readers = [api.app.application.host_reports.version.read for api in apis]
    before = [reader.direct_reads for reader in readers]

    def _listener(conn, cursor, statement, parameters, context, executemany):
        if conn.engine.url.render_as_string(hide_password=False) == target:
            if statement.strip().upper() != "BEGIN":
                seen.append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", _listener)
    try:
        yield seen
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", _listener)
        for reader, count in zip(readers, before, strict=True):
            seen.extend([DIRECT_READ] * (reader.direct_reads - count))


# A read of the HOST_REPORTS counter on a CounterReader's own connection.
DIRECT_READ = "SELECT coalesce(sum(value), 0) FROM metric_counters (direct)"


def report(api, body: dict, generation: str | None = None):
    headers = {HEADER: generation} if generation is not None else {}
    response = api.put(f"/agent/v1/hosts/{HOST}/inventory", body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json


@pytest.fixture
def known(api):
    """The host's snapshot, applied: the hash-only report of it."""
    body = snapshot(HOST, [fpga(ADDRESS)])
    first = report(api, body, "0")
    assert first["changed"] is True
    assert first["desired_state"]["generation"] == 0  # a write: the state comes along
    return {"schema_version": 1, "hash": body["hash"], "hostname": HOST}


@pytest.fixture
def identity():
    return device_identity(snapshot(HOST, [fpga(ADDRESS)])["devices"][0]["controlpath_id"])


def test_agent_holding_the_current_state_costs_one_read(api, database, known):
    with statements(database) as seen:
        answer = report(api, known, "0")
    assert answer == {"hostname": HOST, "hash": known["hash"], "changed": False}
    assert len(seen) == 1 and seen[0].lstrip().upper().startswith("SELECT"), seen


def test_with_usage_still_one_read_within_the_resolution(api, database, known, identity):
    usage = {identity: {"utilization_percent": 37.0}}
    with statements(database) as seen:
        answer = report(api, {**known, "usage": usage}, "0")
    assert "desired_state" not in answer
    assert len(seen) == 1, seen


def test_a_new_generation_comes_in_the_answer_then_is_left_out(api, database, known):
    database.write(desired_state.bump, [HOST])
    answer = report(api, known, "0")
    assert answer["changed"] is False
    assert answer["desired_state"]["generation"] == 1
    assert "desired_state" not in report(api, known, "1")


def test_an_older_agent_without_the_header_gets_the_state(api, known):
    assert report(api, known)["desired_state"]["generation"] == 0


@pytest.mark.parametrize("value", ["x", "-1", "1e3", " 0", "0.0", "٠", "99999999999999999999"])
def test_a_header_that_is_not_a_generation_is_ignored(api, known, value):
    assert report(api, known, value)["desired_state"]["generation"] == 0


def test_a_report_that_writes_carries_the_state(api, database, known):
    # The observed generation moved: written, and the answer says what is current.
    with statements(database) as seen:
        answer = report(api, {**known, "observed_generation": 0}, "0")
    assert any(s.lstrip().upper().startswith("UPDATE") for s in seen)
    assert answer["desired_state"]["generation"] == 0


def test_an_unknown_hash_is_still_412(api, known):
    response = api.put(
        f"/agent/v1/hosts/{HOST}/inventory",
        {**known, "hash": "sha256:" + "0" * 64},
        headers={HEADER: "0"},
    )
    assert response.status_code == 412
