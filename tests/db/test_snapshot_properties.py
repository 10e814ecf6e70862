"""Properties of inventory snapshot application (exosuit/db/inventory.py), through the
agent API, on SQLite and PostgreSQL.

* A valid snapshot sent twice changes nothing the second time: every table, every row.
* Applied again from scratch (the host's stored hash forgotten, so the whole difference
  is computed again), after any earlier snapshot, it still changes nothing: the
  difference of a snapshot with the database it made is empty.
* An invalid snapshot (against the schema of exosuit/schemas/, or its hash) gets a 4xx
  and writes nothing, whatever the database held before.

The snapshots are drawn from small pools of PCI addresses, deployable names, attribute
keys and attach handles, so that consecutive snapshots share devices and deployables
and the updates, renames and removals of the applier run, not only inserts.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import hypothesis
import pytest
import sqlalchemy as sa
from hypothesis import strategies as st

from exosuit import schemas
from exosuit.api.deploy import loadapp
from exosuit.db import changes, models
from exosuit.db.api import Database
from tests.conftest import ApiClient, empty_database, make_test_conf, new_database_url

HOST = "prop-host"
INVENTORY = f"/agent/v1/hosts/{HOST}/inventory"
ADDRESSES = [f"0000:{bus:02x}:00.0" for bus in (0x0C, 0x0D, 0x5E)]
NAMES = ["fn0", "fn1", "fn2"]
KEYS = ["rc", "trait0", "trait1", "program_formats"]
TEXT = st.text(alphabet="abcXYZ019_-:", max_size=6)
EXAMPLES = {"sqlite": 50, "postgresql": 50}

# What a second, identical report may change: when the host last reported (within
# [api] report_age_resolution: not at all) and nothing else. Re-applied from scratch, the
# host's hash and report time move and the host's Placement sync is queued again (jobs).
# usage_at: the report time of the usage kept with it.
REPORT_COLUMNS = {"snapshot_hash", "last_report_at", "updated_at", "usage_at"}


@st.composite
def deployables(draw: st.DrawFn, name: str) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3))
    functions = draw(st.lists(st.integers(0, 5), unique=True, max_size=4))
    return {
        "name": name,
        "num_accelerators": draw(st.integers(0, 8)),
        "driver_name": draw(st.sampled_from(["fake", "simulated"])),
        "attributes": [{"key": k, "value": draw(TEXT)} for k in keys],
        "attach_handles": [
            {
                "attach_type": draw(st.sampled_from(["PCI", "MDEV"])),
                "attach_info": {"domain": "0000", "bus": "0c", "function": str(f)},
            }
            for f in functions
        ],
    }


@st.composite
def devices(draw: st.DrawFn, address: str) -> dict[str, Any]:
    domain, bus, rest = address.split(":")
    device, function = rest.split(".")
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
    body: dict[str, Any] = {
        "type": draw(st.sampled_from(["FPGA", "GPU"])),
        "vendor": draw(st.sampled_from(["0x8086", "0x10de"])),
        "model": draw(st.sampled_from(["A", "B"])),
        "std_board_info": draw(st.dictionaries(st.sampled_from(["a", "b"]), TEXT, max_size=2)),
        "vendor_board_info": {},
        "controlpath_id": {
            "cpid_type": "PCI",
            "cpid_info": {"domain": domain, "bus": bus, "device": device, "function": function},
        },
        "driver_name": "fake",
        "pci_address": address,
        "numa_node": draw(st.sampled_from([None, -1, 0, 1])),
        "firmware_version": draw(st.sampled_from([None, "1.0", "2.0"])),
        "deployables": [draw(deployables(name)) for name in names],
    }
    if draw(st.booleans()) and draw(st.booleans()):
        body["missing_since"] = "2026-01-01T00:00:00Z"
    return body


@st.composite
def snapshots(draw: st.DrawFn) -> dict[str, Any]:
    addresses = draw(st.lists(st.sampled_from(ADDRESSES), unique=True, max_size=3))
    found = [draw(devices(a)) for a in addresses]
    errors = draw(st.sampled_from([[], [{"driver": "nvidia_gpu", "error": "NVML not found"}]]))
    body = {
        "schema_version": 1,
        "hostname": HOST,
        "agent_version": draw(st.sampled_from(["0.1.0", "0.2.0"])),
        "devices": found,
        "driver_errors": errors,
    }
    body["hash"] = schemas.snapshot_hash(found, errors)
    return body


def _rehash(body: dict[str, Any]) -> dict[str, Any]:
    body["hash"] = schemas.snapshot_hash(body["devices"], body["driver_errors"])
    return body


def _break(body: dict[str, Any], how: str) -> dict[str, Any]:
    """``body`` made invalid in one way (hash recomputed, unless the hash is the fault)."""
    bad = copy.deepcopy(body)
    device = bad["devices"][0] if bad["devices"] else None
    if how == "hash":
        bad["hash"] = "sha256:" + "0" * 64
        return bad
    if how == "schema_version":
        bad["schema_version"] = 2
    elif how == "hostname":
        bad["hostname"] = "another-host"
    elif how == "unknown_field":
        bad["extra"] = True
    elif how == "driver_error":
        bad["driver_errors"] = [{"driver": "", "error": "x"}]
    elif device is None:
        bad["devices"] = [{"type": "FPGA"}]  # the device's required fields missing
    elif how == "device_type":
        device["type"] = "fpga"
    elif how == "vendor_missing":
        del device["vendor"]
    elif how == "numa_node":
        device["numa_node"] = 2**40
    elif how == "nul":
        device["model"] = "A\x00B"
    elif how == "cpid_type":
        device["controlpath_id"]["cpid_type"] = "USB"
    elif how == "long_name" and device["deployables"]:
        device["deployables"][0]["name"] = "n" * 256
    elif how == "negative_accelerators" and device["deployables"]:
        device["deployables"][0]["num_accelerators"] = -1
    elif how == "attach_type" and device["deployables"]:
        device["deployables"][0]["attach_handles"].append({"attach_type": "pci", "attach_info": {}})
    elif how == "duplicate_deployable" and device["deployables"]:
        device["deployables"].append(copy.deepcopy(device["deployables"][0]))
    elif how == "duplicate_attribute" and device["deployables"]:
        twice = [{"key": "k", "value": "1"}, {"key": "k", "value": "2"}]
        device["deployables"][0]["attributes"] += twice
    else:
        device["deployables"] = "none"
    return _rehash(bad)


BREAKS = [
    "hash",
    "schema_version",
    "hostname",
    "unknown_field",
    "driver_error",
    "device_type",
    "vendor_missing",
    "numa_node",
    "nul",
    "cpid_type",
    "long_name",
    "negative_accelerators",
    "attach_type",
    "duplicate_deployable",
    "duplicate_attribute",
    "deployables_type",
]


def _tables(db: Database, *, ignore_report: bool = False) -> dict[str, list[tuple]]:
    """Every row of every table, in primary-key order (``ignore_report``: without the
    host's report columns, the job table and the counters: forgetting the hash and
    reporting again are writes of the hash, which exosuit_host_report_changes counts)."""
    contents = {}
    with db.engine.connect() as conn:
        for table in models.Base.metadata.sorted_tables:
            if ignore_report and table.name in ("jobs", "metric_counters"):
                continue
            columns = [c for c in table.columns if not (ignore_report and c.name in REPORT_COLUMNS)]
            order = list(table.primary_key.columns) or columns
            rows = conn.execute(sa.select(*columns).order_by(*order)).all()
            contents[table.name] = [tuple(_plain(v) for v in row) for row in rows]
    return contents


def _plain(value: Any) -> Any:
    # MariaDB and SQLite hand back naive datetimes, PostgreSQL aware ones: compare alike.
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    return value


def _forget_hash(db: Database) -> None:
    # Through the writer, marked: the API's cache of host reports hears of the write
    # (exosuit/db/changes.py), as of every write of a hash.
    with db.writer() as conn:
        conn.execute(sa.update(models.hosts).values(snapshot_hash=None))
        changes.mark(conn, changes.HOST_REPORTS)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def backend(request, db_servers, tmp_path_factory):
    db = Database(new_database_url(request.param, db_servers, tmp_path_factory))
    yield request.param, db
    db.dispose()


def _settings(backend_name: str):
    return hypothesis.settings(
        max_examples=EXAMPLES[backend_name],
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[hypothesis.HealthCheck.too_slow],
    )


def _api(db: Database) -> ApiClient:
    empty_database(db)
    return ApiClient(loadapp(make_test_conf(), db))


def test_a_snapshot_sent_twice_changes_nothing_the_second_time(backend):
    name, db = backend

    @_settings(name)
    @hypothesis.given(earlier=snapshots(), body=snapshots())
    def check(earlier, body):
        api = _api(db)
        assert api.put(INVENTORY, earlier).status_code == 200
        r = api.put(INVENTORY, body)
        assert r.status_code == 200, r.text
        before = _tables(db)
        r = api.put(INVENTORY, body)
        assert r.status_code == 200, r.text
        assert r.json["changed"] is False
        assert _tables(db) == before

    check()


def test_a_snapshot_applied_again_from_scratch_changes_nothing(backend):
    """The hash forgotten, the whole difference is computed again: it is empty."""
    name, db = backend

    @_settings(name)
    @hypothesis.given(earlier=snapshots(), body=snapshots())
    def check(earlier, body):
        api = _api(db)
        assert api.put(INVENTORY, earlier).status_code == 200
        assert api.put(INVENTORY, body).status_code == 200
        before = _tables(db, ignore_report=True)
        _forget_hash(db)
        r = api.put(INVENTORY, body)
        assert r.status_code == 200, r.text
        assert r.json["changed"] is True  # it was applied, not skipped by its hash
        assert _tables(db, ignore_report=True) == before

    check()


def test_an_invalid_snapshot_writes_nothing(backend):
    name, db = backend

    @_settings(name)
    @hypothesis.given(earlier=snapshots(), body=snapshots(), how=st.sampled_from(BREAKS))
    def check(earlier, body, how):
        api = _api(db)
        assert api.put(INVENTORY, earlier).status_code == 200
        before = _tables(db)
        r = api.put(INVENTORY, _break(body, how))
        assert 400 <= r.status_code < 500, (how, r.text)
        assert _tables(db) == before, how

    check()


def test_two_attributes_of_one_deployable_with_one_key_are_refused(backend):
    """Found by the property above: applied again, such a snapshot changed one attribute
    to the other's value (and back the next time). Refused as two deployables of one
    name are (exosuit.schemas.snapshot_errors), writing nothing."""
    _, db = backend
    api = _api(db)
    body = {
        "schema_version": 1,
        "hostname": HOST,
        "driver_errors": [],
        "devices": [
            {
                "type": "FPGA",
                "vendor": "0x8086",
                "model": "A",
                "controlpath_id": {"cpid_type": "PCI", "cpid_info": {"bus": "0c"}},
                "driver_name": "fake",
                "deployables": [
                    {
                        "name": "fn0",
                        "num_accelerators": 1,
                        "attributes": [{"key": "k", "value": "1"}, {"key": "k", "value": "2"}],
                        "attach_handles": [],
                    }
                ],
            }
        ],
    }
    before = _tables(db)
    r = api.put(INVENTORY, _rehash(body))
    assert r.status_code == 400, r.text
    fault = json.loads(r.json["error_message"])
    assert fault["code"] == "exosuit.inventory.invalid"
    assert "two attributes 'k'" in fault["faultstring"]
    assert _tables(db) == before
