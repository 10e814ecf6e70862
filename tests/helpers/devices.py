"""Hosts, devices and binds for the tests of activation, services, drivers, discovery
and usage (doc/devices.md), through the in-process API."""

from __future__ import annotations

import dataclasses
import uuid

import sqlalchemy as sa

from exosuit import schemas
from exosuit.db import inventory, models
from exosuit.drivers.base import Service
from exosuit.schemas import device_identity
from tests.helpers.inventory import fpga, snapshot

HOST = "dev-host"
OTHER = "dev-other"
FIRST = "0000:0c:00.0"
SECOND = "0000:0d:00.0"
V2_7 = "2.7"


def device(address: str = FIRST, *, handles: int = 2, services=(), driver: str = "fake"):
    """A fake FPGA of ``driver`` with ``handles`` attach handles and ``services``."""
    found = fpga(address, handles=handles)
    return dataclasses.replace(found, driver_name=driver, services=tuple(services))


def service(kind: str, name: str, enabled: bool = True, **details: str) -> Service:
    return Service(kind, name, enabled, details)


def drivers(*names: str) -> list[dict]:
    """What an agent reports of its driver plug-ins ``names`` (the snapshot's ``drivers``):
    install and update need a host that reports the driver."""
    return [
        {"name": name, "version": "1.0", "enabled": True, "found": 0, "error": None}
        for name in names
    ]


def body(hostname: str, devices, **extra) -> dict:
    """A snapshot of ``devices`` with ``extra`` fields (drivers hashed, the others not)."""
    found = snapshot(hostname, devices)
    found.update(extra)
    found["hash"] = schemas.snapshot_hash(
        found["devices"], found.get("driver_errors", []), found.get("drivers")
    )
    return found


def report(api, hostname: str, devices=(), **extra) -> dict:
    r = api.put(f"/agent/v1/hosts/{hostname}/inventory", body(hostname, devices, **extra))
    assert r.status_code == 200, r.text
    return r.json


def hash_only(api, hostname: str, snapshot_hash: str, **extra) -> dict:
    r = api.put(
        f"/agent/v1/hosts/{hostname}/inventory",
        {"schema_version": 1, "hash": snapshot_hash, **extra},
    )
    assert r.status_code == 200, r.text
    return r.json


def devices(api, **query) -> list[dict]:
    path = "/v2/devices" + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
    r = api.get(path, version=V2_7)
    assert r.status_code == 200, r.text
    return r.json["devices"]


def the_device(api, hostname: str = HOST, address: str = FIRST) -> dict:
    (found,) = [d for d in devices(api, hostname=hostname) if d["pci_address"] == address]
    return found


def desired(api, hostname: str = HOST) -> dict:
    r = api.get(f"/agent/v1/hosts/{hostname}/desired_state")
    assert r.status_code == 200, r.text
    return r.json


def activate(api, state: str, expect: int = 202, **selection) -> dict:
    r = api.post("/v2/device_activations", {"state": state, **selection}, version=V2_7)
    assert r.status_code == expect, r.text
    return r.json


def outcome(api, device_uuid: str, expect: int = 200, hostname: str = HOST, **report) -> dict:
    r = api.put(f"/agent/v1/hosts/{hostname}/activations/{device_uuid}", report)
    assert r.status_code == expect, r.text
    return r.json


def rp_uuid(address: str = FIRST, hostname: str = HOST) -> str:
    """The resource provider of the fake FPGA at ``address`` (derived, as the API does)."""
    identity = device_identity(device(address).to_snapshot()["controlpath_id"])
    return inventory.rp_uuid(hostname, identity, f"fake_{address}")


def bind(api, rp: str, hostname: str = HOST):
    """A new one-FPGA profile's ARQ bound to ``rp``: (PATCH response, the ARQ after)."""
    name = f"p{uuid.uuid4().hex[:8]}"
    r = api.post("/v2/device_profiles", [{"name": name, "groups": [{"resources:FPGA": "1"}]}])
    assert r.status_code == 201, r.text
    r = api.post("/v2/accelerator_requests", {"device_profile_name": name})
    assert r.status_code == 201, r.text
    arq = r.json["arqs"][0]
    ops = [
        {"op": "add", "path": "/hostname", "value": hostname},
        {"op": "add", "path": "/device_rp_uuid", "value": rp},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    response = api.patch("/v2/accelerator_requests", {arq["uuid"]: ops})
    return response, api.get(f"/v2/accelerator_requests/{arq['uuid']}").json


def unbind(api, arq_uuid: str) -> None:
    ops = [{"op": "remove", "path": "/hostname"}]
    r = api.patch("/v2/accelerator_requests", {arq_uuid: ops})
    assert r.status_code == 202, r.text


def pending_syncs(database, hostname: str) -> int:
    jobs = models.jobs
    with database.reader() as conn:
        return conn.execute(
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(jobs.c.key == f"placement-sync:{hostname}", jobs.c.state == "pending")
        ).scalar()


def clear_jobs(database) -> None:
    with database.writer() as conn:
        conn.execute(sa.delete(models.jobs))
