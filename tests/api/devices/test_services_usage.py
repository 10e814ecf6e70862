"""Services and usage (doc/devices.md): stored from each changed report and shown on the
device and by GET /v2/services; usage outside the hash, kept with the throttled write of
an unchanged report (no write per heartbeat). Through the API, on three databases."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from exosuit import schemas
from exosuit.db import changes, models
from tests.conftest import PERSONAS
from tests.helpers.devices import (
    FIRST,
    HOST,
    OTHER,
    SECOND,
    V2_7,
    body,
    device,
    hash_only,
    report,
    service,
    the_device,
)

QAT = (
    service("qat", "sym", vfs="16"),
    service("qat", "asym", vfs="0"),
    service("qat", "dc", enabled=False),
)


def _services(api, query: str = "") -> list[dict]:
    r = api.get(f"/v2/services{query}", version=V2_7)
    assert r.status_code == 200, r.text
    return r.json["services"]


def _identity(address: str = FIRST) -> str:
    return schemas.device_identity(device(address).to_snapshot()["controlpath_id"])


def test_services_are_shown_on_the_device_and_listed_across_the_fleet(api):
    report(api, HOST, [device(FIRST, services=QAT), device(SECOND)])
    report(api, OTHER, [device(FIRST, services=(service("vgpu", "nvidia-222", False),))])
    found = the_device(api)
    assert found["services"] == [
        {"kind": "qat", "name": "sym", "enabled": True, "details": {"vfs": "16"}},
        {"kind": "qat", "name": "asym", "enabled": True, "details": {"vfs": "0"}},
        {"kind": "qat", "name": "dc", "enabled": False, "details": {}},
    ]
    assert the_device(api, address=SECOND)["services"] == []
    shown = api.get(f"/v2/devices/{found['uuid']}", version=V2_7).json
    assert shown["services"] == found["services"]
    assert "services" not in api.get(f"/v2/devices/{found['uuid']}", version="2.6").json

    every = _services(api)
    assert len(every) == 4
    assert {(s["hostname"], s["kind"], s["name"]) for s in every} == {
        (HOST, "qat", "sym"),
        (HOST, "qat", "asym"),
        (HOST, "qat", "dc"),
        (OTHER, "vgpu", "nvidia-222"),
    }
    assert [s["name"] for s in _services(api, "?kind=qat&enabled=false")] == ["dc"]
    assert [s["hostname"] for s in _services(api, "?kind=vgpu")] == [OTHER]
    assert [s["device_uuid"] for s in _services(api, f"?hostname={HOST}&name=sym")] == [
        found["uuid"]
    ]
    assert _services(api, "?type=GPU") == []
    page = api.get("/v2/services?limit=3", version=V2_7).json
    assert len(page["services"]) == 3 and "next" in page
    rest = api.get(page["next"].split("/v2", 1)[1], version=V2_7).json
    assert len(rest["services"]) == 1 and "next" not in rest
    assert api.get("/v2/services?enabled=yes", version=V2_7).status_code == 400
    assert api.get("/v2/services", version="2.6").status_code == 404


def test_a_changed_report_replaces_the_services_keeping_those_that_stay(api):
    report(api, HOST, [device(FIRST, services=QAT)])
    before = {s["name"]: s["id"] for s in _services(api)}
    changed = (service("qat", "sym", vfs="8"), service("qat", "dc", vfs="8"))
    report(api, HOST, [device(FIRST, services=changed)])
    after = {s["name"]: s for s in _services(api)}
    assert set(after) == {"sym", "dc"}
    assert after["sym"]["id"] == before["sym"] and after["sym"]["details"] == {"vfs": "8"}
    assert after["dc"]["id"] == before["dc"] and after["dc"]["enabled"] is True
    report(api, HOST, [device(FIRST)])
    assert _services(api) == []


def _move_last_report(database, hostname: str, seconds: float) -> None:
    """As if ``seconds`` had passed since the host's last report. Its hash is set too
    (to itself), and marked as a change: the API's cache of host reports keeps the
    report time it read, which real time would age but this rewrite does not; a write
    of the hash is a change it hears of (exosuit/db/changes.py)."""
    hosts = models.hosts
    with database.writer() as conn:
        conn.execute(
            sa.update(hosts)
            .where(hosts.c.hostname == hostname)
            .values(
                last_report_at=models.utcnow() - dt.timedelta(seconds=seconds),
                snapshot_hash=hosts.c.snapshot_hash,
            )
        )
        changes.mark(conn, changes.HOST_REPORTS)


def _host_row(database, hostname: str = HOST):
    with database.reader() as conn:
        return conn.execute(
            sa.select(models.hosts).where(models.hosts.c.hostname == hostname)
        ).one()


def test_usage_is_kept_at_most_once_per_report_age_resolution(api, database):
    usage = {_identity(): {"utilization_percent": 12.5, "errors_total": 0}}
    first = body(HOST, [device()], usage=usage)
    assert api.put(f"/agent/v1/hosts/{HOST}/inventory", first).status_code == 200
    found = the_device(api)
    assert found["usage"] == {"utilization_percent": 12.5, "errors_total": 0}
    seen = found["usage_seen_at"]
    assert seen is not None

    # Within [api] report_age_resolution: an unchanged report writes nothing.
    statements = []
    # Every engine (the database's readers have a pool of their own).
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", _record(statements))
    try:
        newer = {_identity(): {"utilization_percent": 99.0}}
        hash_only(api, HOST, first["hash"], usage=newer)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", _record(statements))
    verbs = [s.lstrip().split(None, 1)[0].upper() for s in statements]
    # The host's report, then its desired state: two reads, as before usage existed.
    assert [v for v in verbs if v not in ("BEGIN", "COMMIT", "ROLLBACK")] == ["SELECT"] * 2
    assert the_device(api)["usage"] == {"utilization_percent": 12.5, "errors_total": 0}

    # Past it, the unchanged report's usage is kept with its report time.
    _move_last_report(database, HOST, 3600)
    hash_only(api, HOST, first["hash"], usage=newer)
    found = the_device(api)
    assert found["usage"] == {"utilization_percent": 99.0}
    assert found["usage_seen_at"] >= seen
    # A report without usage forgets it.
    _move_last_report(database, HOST, 3600)
    hash_only(api, HOST, first["hash"])
    assert the_device(api)["usage"] is None
    # What an unchanged report would keep is checked as the snapshot is.
    _move_last_report(database, HOST, 3600)
    bad = {"schema_version": 1, "hash": first["hash"], "usage": {"x": {"Bad Name": 1}}}
    assert api.put(f"/agent/v1/hosts/{HOST}/inventory", bad).status_code == 400
    bad = {"schema_version": 1, "hash": first["hash"], "observed_generation": "7"}
    assert api.put(f"/agent/v1/hosts/{HOST}/inventory", bad).status_code == 400


_RECORDERS: dict[int, object] = {}


def _record(statements: list[str]):
    """One listener per list (removable: the same function object both times)."""
    key = id(statements)
    if key not in _RECORDERS:

        def listener(conn, cursor, statement, parameters, context, executemany):
            statements.append(statement)

        _RECORDERS[key] = listener
    return _RECORDERS[key]


def test_usage_is_on_metrics_as_gauges_per_device(api, database):
    usage = {_identity(): {"utilization_percent": 40, "memory_used_bytes": 1024}}
    report(api, HOST, [device()], usage=usage)
    uuid = the_device(api)["uuid"]
    admin = PERSONAS["admin"]  # the per-device series are an admin's (doc/metrics.md)
    text = api.get("/metrics", headers=admin).text
    labels = (  # in prometheus-client's order
        f'device_uuid="{uuid}",hostname="{HOST}",model="Fake FPGA",pci_address="{FIRST}",'
        'type="FPGA",vendor="0xABCD"'
    )
    assert f"exosuit_device_utilization_percent{{{labels}}} 40.0" in text
    assert f"exosuit_device_memory_used_bytes{{{labels}}} 1024.0" in text
    # A host whose usage is older than [api] stale_report_after shows none.
    hosts = models.hosts
    with database.writer() as conn:
        old = models.utcnow() - dt.timedelta(hours=1)
        conn.execute(sa.update(hosts).values(usage_at=old))
    assert "exosuit_device_utilization_percent" not in api.get("/metrics", headers=admin).text


def test_the_drivers_reported_are_kept_per_host(api):
    drivers = [
        {
            "name": "fake",
            "version": "1.0",
            "enabled": True,
            "config_digest": "sha256:ab",
            "found": 1,
            "error": None,
        },
        {
            "name": "nvme",
            "version": "1.0",
            "enabled": False,
            "config_digest": None,
            "found": 0,
            "error": "no /sys/class/nvme",
        },
    ]
    report(api, HOST, [device()], drivers=drivers)
    listed = api.get(f"/v2/drivers?hostname={HOST}", version=V2_7).json["drivers"]
    assert [(d["name"], d["enabled"], d["found"], d["error"]) for d in listed] == [
        ("fake", True, 1, None),
        ("nvme", False, 0, "no /sys/class/nvme"),
    ]
    assert all(d["desired"] is None and d["observed"] is None for d in listed)
    report(api, HOST, [device()], drivers=drivers[:1])
    listed = api.get(f"/v2/drivers?hostname={HOST}", version=V2_7).json["drivers"]
    assert [d["name"] for d in listed] == ["fake"]
