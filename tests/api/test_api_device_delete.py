"""Deleting a lost device (API 2.10, doc/devices.md "Deleting a lost device"): only a
device gone from its host's report (lost) that no ARQ holds; its rows go in one
transaction with its host's Placement sync queued, and it is audited. Each refusal on
SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json

import sqlalchemy as sa

from exosuit import schemas
from exosuit.db import models
from tests.helpers.devices import (
    FIRST,
    HOST,
    SECOND,
    bind,
    body,
    clear_jobs,
    device,
    pending_syncs,
    report,
    rp_uuid,
    unbind,
)

V2_10 = "2.10"
UNKNOWN = "5a1d0f3c-0000-4000-8000-00000000dead"


def _fault(response) -> tuple[str, str]:
    fault = json.loads(response.json["error_message"])
    return fault["code"], fault["faultstring"]


def _device(api, address: str = FIRST) -> dict | None:
    r = api.get(f"/v2/devices?hostname={HOST}", version=V2_10)
    assert r.status_code == 200, r.text
    found = [d for d in r.json["devices"] if d["pci_address"] == address]
    return found[0] if found else None


def _delete(api, uuid: str, expect: int):
    r = api.delete(f"/v2/devices/{uuid}", version=V2_10)
    assert r.status_code == expect, r.text
    return r


def _count(database, table: sa.Table, **where) -> int:
    with database.reader() as conn:
        query = sa.select(sa.func.count()).select_from(table)
        for name, value in where.items():
            query = query.where(table.c[name] == value)
        return conn.execute(query).scalar()


def _lost_and_held(api) -> tuple[dict, dict]:
    """The first device bound, then gone from its host's report: lost. (It, its ARQ.)"""
    report(api, HOST, [device(FIRST), device(SECOND)])
    response, arq = bind(api, rp_uuid(FIRST))
    assert response.status_code == 202, response.text
    report(api, HOST, [device(SECOND)])
    lost = _device(api)
    assert lost is not None and lost["presence"] == "lost"
    return lost, arq


def test_a_lost_device_is_refused_while_an_arq_holds_it(api, database):
    lost, arq = _lost_and_held(api)
    code, text = _fault(_delete(api, lost["uuid"], 409))
    assert code == "exosuit.device.in_use"
    assert f"Device {lost['uuid']} is lost but held: attach handle" in text
    assert f"held by ARQ {arq['uuid']} of instance {arq['instance_uuid']}" in text
    assert "Release them first" in text
    assert _device(api)["presence"] == "lost"
    # Released, it goes by itself (as before 2.10): nothing is left to delete.
    unbind(api, arq["uuid"])
    assert _device(api) is None
    assert _fault(_delete(api, lost["uuid"], 404))[0] == "exosuit.device.not_found"


def test_a_lost_device_nothing_holds_is_deleted_with_its_rows(api, database):
    report(api, HOST, [device(FIRST), device(SECOND)])
    first = _device(api)
    # A lost device no ARQ holds: its handle marked in use with no ARQ behind it (as rows
    # imported from Cyborg can be), which no release will ever collect.
    with database.writer() as conn:
        dev = models.devices
        device_id = conn.execute(sa.select(dev.c.id).where(dev.c.uuid == first["uuid"])).scalar()
        conn.execute(sa.update(dev).where(dev.c.id == device_id).values(presence="lost"))
        deployables = sa.select(models.deployables.c.id).where(
            models.deployables.c.device_id == device_id
        )
        conn.execute(
            sa.update(models.attach_handles)
            .where(models.attach_handles.c.deployable_id.in_(deployables))
            .values(in_use=True)
        )
    clear_jobs(database)
    handles = _count(database, models.attach_handles)

    r = _delete(api, first["uuid"], 204)
    assert r.body == b""
    assert _device(api) is None
    assert _device(api, SECOND) is not None
    assert _count(database, models.deployables, device_id=device_id) == 0
    assert _count(database, models.attach_handles) == handles - 2
    assert _count(database, models.controlpath_ids, device_id=device_id) == 0
    assert pending_syncs(database, HOST) == 1  # its provider leaves Placement
    assert _fault(_delete(api, first["uuid"], 404))[0] == "exosuit.device.not_found"

    r = api.get(f"/v2/audit_events?object_uuid={first['uuid']}&action=delete", version="2.9")
    (event,) = r.json["audit_events"]
    assert (event["before"]["presence"], event["after"], event["host"]) == ("lost", None, HOST)


def test_a_present_or_missing_device_is_refused(api, database):
    found = body(HOST, [device(FIRST), device(SECOND)])
    found["devices"][1]["missing_since"] = "2026-11-29T00:00:00Z"  # the agent's removal grace runs
    found["hash"] = schemas.snapshot_hash(found["devices"], found["driver_errors"])
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", found)
    assert r.status_code == 200, r.text
    present, missing = _device(api), _device(api, SECOND)
    assert missing["presence"] == "missing"

    code, text = _fault(_delete(api, present["uuid"], 409))
    assert code == "exosuit.device.not_lost"
    assert text.startswith(f"Device {present['uuid']} is present: its host's agent reports it")
    code, text = _fault(_delete(api, missing["uuid"], 409))
    assert code == "exosuit.device.not_lost"
    assert text.startswith(f"Device {missing['uuid']} is missing: its host's agent still")
    assert _device(api) is not None and _device(api, SECOND) is not None


def test_an_unknown_device_is_404_and_delete_is_2_10(api, database):
    for uuid in (UNKNOWN, "not-a-uuid"):
        code, text = _fault(_delete(api, uuid, 404))
        assert (code, text) == ("exosuit.device.not_found", f"Device {uuid} could not be found.")
    report(api, HOST, [device(FIRST)])
    r = api.delete(f"/v2/devices/{_device(api)['uuid']}", version="2.9")
    assert r.status_code == 404, r.text
    assert _fault(r)[0] == "exosuit.not_found"
