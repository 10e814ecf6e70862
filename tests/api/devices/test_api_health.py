"""Device health on the server (doc/devices.md, "Health"): a device its agent reports
unhealthy is held back within that report (Placement reserves it, binds and claims refuse
it) while what holds it keeps it; it is offered again once healthy for [health]
recover_after (the conductor's health_recovery job) or cleared by an operator, who may
also hold a device back by hand. Through the API, on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from exosuit import schemas
from exosuit.db import health as health_db
from exosuit.db import models
from exosuit.db import placement as placement_db
from exosuit.placement import providers
from tests.conftest import make_test_conf
from tests.helpers.devices import (
    FIRST,
    HOST,
    SECOND,
    bind,
    body,
    clear_jobs,
    device,
    pending_syncs,
    rp_uuid,
    unbind,
)

V = "2.9"
SICK = {"state": "unhealthy", "reason": "NVIDIA XID 79 within 3600 s"}


@pytest.fixture
def conf():
    # New devices start ready here: health alone decides what is offered.
    return make_test_conf()


def _report(api, devices, health: dict[str, dict] | None = None) -> None:
    """Report ``devices`` with ``health`` (PCI address → health) as the agent puts it."""
    found = body(HOST, devices)
    for reported in found["devices"]:
        if reported["pci_address"] in (health or {}):
            reported["health"] = health[reported["pci_address"]]
    found["hash"] = schemas.snapshot_hash(found["devices"], found.get("driver_errors", []))
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", found)
    assert r.status_code == 200, r.text


def _device(api, address: str = FIRST) -> dict:
    r = api.get(f"/v2/devices?hostname={HOST}", version=V)
    assert r.status_code == 200, r.text
    (found,) = [d for d in r.json["devices"] if d["pci_address"] == address]
    return found


def _reserved(database) -> dict[str, bool]:
    rows = database.read(placement_db.deployable_rows, HOST)
    wanted = providers.desired_providers(HOST, "compute", rows)
    return {uuid: p.reserved == p.total for uuid, p in wanted.items()}


def _fault(response) -> tuple[str, str]:
    fault = json.loads(response.json["error_message"])
    return fault["code"], fault["faultstring"]


def _health(api, uuid: str, body, expect: int = 200, version: str = V):
    r = api.post(f"/v2/devices/{uuid}/health", body, version=version)
    assert r.status_code == expect, r.text
    return r.json


def _later(database, seconds: float) -> list[str]:
    """The recovery job as if ``seconds`` had passed."""
    now = models.utcnow() + dt.timedelta(seconds=seconds)
    return database.write(health_db.recover, 600.0, now)


def test_a_device_reported_unhealthy_is_held_back_within_that_report(api, database):
    _report(api, [device(FIRST), device(SECOND)])
    healthy = _device(api)
    assert healthy["health"] == {
        "state": "ok",
        "reason": None,
        "since": None,
        "offered": True,
        "held_by": None,
        "offered_at": None,
    }
    clear_jobs(database)

    _report(api, [device(FIRST), device(SECOND)], {FIRST: SICK})
    sick = _device(api)
    assert sick["health"]["state"] == "unhealthy"
    assert sick["health"]["reason"] == SICK["reason"]
    assert sick["health"]["since"] is not None
    assert (sick["health"]["offered"], sick["health"]["held_by"]) == (False, "agent")
    assert _device(api, SECOND)["health"]["offered"] is True
    # The host's Placement sync is queued in the report's transaction: reserved whole.
    assert pending_syncs(database, HOST) == 1
    assert _reserved(database) == {rp_uuid(FIRST): True, rp_uuid(SECOND): False}

    response, arq = bind(api, rp_uuid(FIRST))
    assert response.status_code == 409, response.text
    assert arq["state"] == "BindFailed"
    code, message = _fault(response)
    assert f"device {sick['uuid']} is held back as unhealthy (by its agent)" in message
    assert SICK["reason"] in message
    response, arq = bind(api, rp_uuid(SECOND))
    assert (response.status_code, arq["state"]) == (202, "Bound")

    # Before 2.9 the body is as it was.
    r = api.get(f"/v2/devices/{sick['uuid']}", version="2.8")
    assert "health" not in r.json


def test_its_holders_keep_it_and_are_listed(api, database):
    _report(api, [device(FIRST, handles=2)])
    response, arq = bind(api, rp_uuid(FIRST))
    assert response.status_code == 202, response.text

    _report(api, [device(FIRST, handles=2)], {FIRST: SICK})
    found = _device(api)
    assert found["health"]["offered"] is False
    assert [h["arq_uuid"] for h in found["holders"]] == [arq["uuid"]]
    assert api.get(f"/v2/accelerator_requests/{arq['uuid']}").json["state"] == "Bound"
    # The second handle is free, but not offered.
    response, again = bind(api, rp_uuid(FIRST))
    assert (response.status_code, again["state"]) == (409, "BindFailed")
    unbind(api, arq["uuid"])
    assert _device(api)["holders"] == []


def test_it_is_offered_again_after_recover_after_healthy(api, database):
    _report(api, [device(FIRST)], {FIRST: SICK})
    uuid = _device(api)["uuid"]
    assert _later(database, 3600) == []  # still unhealthy: nothing to recover

    # Healthy again (the report without health): still held back, for recover_after.
    _report(api, [device(FIRST)], {FIRST: {"state": "warning", "reason": "PCIe link x8"}})
    found = _device(api)["health"]
    assert (found["state"], found["offered"], found["held_by"]) == ("warning", False, "agent")
    since = dt.datetime.fromisoformat(found["since"].replace("Z", "+00:00"))
    offered_at = dt.datetime.fromisoformat(found["offered_at"].replace("Z", "+00:00"))
    assert offered_at - since == dt.timedelta(seconds=600)
    assert _later(database, 60) == []
    assert _reserved(database) == {rp_uuid(FIRST): True}

    clear_jobs(database)
    assert _later(database, 601) == [uuid]
    assert pending_syncs(database, HOST) == 1
    r = api.get(f"/v2/audit_events?object_uuid={uuid}&action=health.recover", version=V)
    assert [e["after"] for e in r.json["audit_events"]] == [{"held_by": None}]
    found = _device(api)["health"]
    assert (found["state"], found["offered"], found["held_by"]) == ("warning", True, None)
    assert _reserved(database) == {rp_uuid(FIRST): False}
    assert bind(api, rp_uuid(FIRST))[1]["state"] == "Bound"
    assert _later(database, 601) == []  # once


def test_an_operator_clears_a_device_or_holds_one_back(api, database):
    _report(api, [device(FIRST)], {FIRST: SICK})
    uuid = _device(api)["uuid"]
    clear_jobs(database)

    cleared = _health(api, uuid, {"clear": True})
    assert (cleared["uuid"], cleared["hostname"], cleared["state"]) == (uuid, HOST, "unhealthy")
    assert (cleared["offered"], cleared["held_by"], cleared["holders"]) == (True, None, [])
    assert pending_syncs(database, HOST) == 1
    assert _reserved(database) == {rp_uuid(FIRST): False}
    assert _health(api, uuid, {"clear": True}) == cleared  # idempotent
    # The same report again changes nothing: cleared stays cleared ...
    _report(api, [device(FIRST)], {FIRST: SICK})
    assert _device(api)["health"]["offered"] is True
    # ... until its health changes to unhealthy again.
    _report(api, [device(FIRST)])
    _report(api, [device(FIRST)], {FIRST: SICK})
    assert _device(api)["health"]["held_by"] == "agent"
    _health(api, uuid, {"clear": True})

    held = _health(api, uuid, {"hold": True, "reason": "fan replaced on Tuesday"})
    assert (held["offered"], held["held_by"]) == (False, "operator")
    assert held["reason"] == "held back by an operator: fan replaced on Tuesday"
    _report(api, [device(FIRST)])  # healthy, for hours: an operator's hold stays
    assert _later(database, 36000) == []
    assert _device(api)["health"]["held_by"] == "operator"
    assert bind(api, rp_uuid(FIRST))[1]["state"] == "BindFailed"
    assert _health(api, uuid, {"clear": True})["offered"] is True

    # Each change of the offer is in the audit trail: who, and what it was.
    r = api.get(f"/v2/audit_events?object_uuid={uuid}", version=V)
    assert r.status_code == 200, r.text
    events = [
        (e["action"], e["actor"])
        for e in reversed(r.json["audit_events"])
        if e["action"].startswith("health.")
    ]
    operator = "service:admin"  # noauth's caller
    assert events == [
        ("health.hold", f"host:{HOST}"),
        ("health.clear", operator),
        ("health.hold", f"host:{HOST}"),
        ("health.clear", operator),
        ("health.hold", operator),
        ("health.clear", operator),
    ]


def test_bad_health_requests_are_refused_with_the_right_status(api, database):
    _report(api, [device(FIRST)])
    uuid = _device(api)["uuid"]
    for bad in (
        {},
        {"clear": False},
        {"clear": True, "hold": True},
        {"clear": True, "reason": "x"},
        {"hold": True, "reason": ""},
        {"state": "unhealthy"},
        [],
        "clear",
    ):
        _health(api, uuid, bad, expect=400)
    _health(api, "7d6b2d0a-0c1e-4d5b-9d8e-0f4a1c2b3d4e", {"clear": True}, expect=404)
    _health(api, "not-a-uuid", {"clear": True}, expect=404)
    _health(api, uuid, {"clear": True}, expect=404, version="2.8")
    assert _device(api)["health"]["offered"] is True
