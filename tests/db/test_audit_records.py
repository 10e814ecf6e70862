"""Which changes leave an audit record, and as whom (doc/audit.md), on SQLite,
PostgreSQL and MariaDB, through the in-process API: an agent's report (devices
appearing, changing, disappearing; an unchanged report writes nothing), enable and
disable, drain and undrain (device, host), attributes, activation, drivers, claims and
images. Each change is read back through GET /v2/audit_events.
"""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from exosuit import schemas
from exosuit.conductor import kinds
from exosuit.conductor.worker import Services, Worker
from exosuit.db import claims as claims_db
from exosuit.db import jobs, models
from tests.conftest import PERSONAS
from tests.db.test_unchanged_reports import statements
from tests.helpers.inventory import fpga, snapshot

HOST = "audited-host"
V = "2.9"
ADMIN = PERSONAS["admin"]


@pytest.fixture(autouse=True)
def _image_data_in_tmp(conf, tmp_path):
    conf.set_override("state_path", str(tmp_path / "state"))


def events(api, **filters) -> list[dict]:
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    r = api.get(f"/v2/audit_events?{query}", version=V, headers=ADMIN)
    assert r.status_code == 200, r.text
    return r.json["audit_events"]


def report(api, devices) -> dict:
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", snapshot(HOST, devices))
    assert r.status_code == 200, r.text
    return r.json


def count(database) -> int:
    return database.read(
        lambda conn: conn.execute(sa.select(sa.func.count()).select_from(models.audit_events))
    ).scalar()


def device_uuid(api) -> str:
    (device,) = api.get(f"/v2/devices?hostname={HOST}").json["devices"]
    return device["uuid"]


def test_an_agent_report_records_what_appeared_changed_and_disappeared(api, database):
    report(api, [fpga("0000:0c:00.0"), fpga("0000:0d:00.0")])
    appeared = events(api, action="appear")
    assert len(appeared) == 2
    assert {e["actor"] for e in appeared} == {f"host:{HOST}"}
    assert {e["host"] for e in appeared} == {HOST}
    assert appeared[0]["before"] is None and appeared[0]["after"]["type"] == "FPGA"

    before = count(database)
    report(api, [fpga("0000:0c:00.0"), fpga("0000:0d:00.0")])  # unchanged
    assert count(database) == before

    changed = fpga("0000:0c:00.0")
    changed = changed.__class__(**{**changed.__dict__, "model": "Fake FPGA v2"})
    report(api, [changed])
    (update,) = events(api, action="update")
    assert update["before"] == {"model": "Fake FPGA"} and update["after"] == {
        "model": "Fake FPGA v2"
    }
    (gone,) = events(api, action="disappear")
    assert gone["after"] is None and gone["before"]["type"] == "FPGA"
    assert gone["object_uuid"] not in {update["object_uuid"]}


def test_enable_disable_drain_undrain_are_recorded_once_each(api):
    report(api, [fpga("0000:0c:00.0")])
    uuid = device_uuid(api)
    operator = api.as_({**ADMIN, "X-User-Id": "u-operator"})
    assert operator.post(f"/v2/devices/{uuid}/disable").status_code == 200
    assert operator.post(f"/v2/devices/{uuid}/disable").status_code == 200  # no change
    assert operator.post(f"/v2/devices/{uuid}/enable").status_code == 200
    assert operator.post(f"/v2/devices/{uuid}/drain", version=V).status_code == 200
    assert operator.post(f"/v2/devices/{uuid}/undrain", version=V).status_code == 200
    assert operator.post(f"/v2/hosts/{HOST}/drain", version=V).status_code == 200
    assert operator.post(f"/v2/hosts/{HOST}/undrain", version=V).status_code == 200
    mine = list(reversed(events(api, actor="user:u-operator")))
    assert [(e["action"], e["object_type"]) for e in mine] == [
        ("disable", "device"),
        ("enable", "device"),
        ("drain", "device"),
        ("undrain", "device"),
        ("drain", "host"),
        ("drain", "device"),
        ("undrain", "host"),
        ("undrain", "device"),
    ]
    assert mine[0]["before"]["status"] == "enabled" and mine[0]["after"] == {
        "status": "maintaining"
    }
    assert {e["object_uuid"] for e in mine if e["object_type"] == "device"} == {uuid}
    assert mine[4]["object_uuid"] == HOST and mine[4]["after"]["drained_at"]
    # A uuid is found whatever its case; a host's name as it is.
    assert len(events(api, object_uuid=uuid.upper(), actor="user:u-operator")) == 6
    assert [e["action"] for e in events(api, object_uuid=HOST)] == ["undrain", "drain"]


def test_attributes_and_activation_are_recorded_on_their_objects(api):
    report(api, [fpga("0000:0c:00.0")])
    uuid = device_uuid(api)
    (deployable,) = api.get("/v2/deployables").json["deployables"]
    deployable_id = api.get("/v2/attributes").json["attributes"][0]["deployable_id"]
    body = {"deployable_id": deployable_id, "key": "audit_key", "value": "v1"}
    r = api.post("/v2/attributes", body)
    assert r.status_code == 201, r.text
    assert api.delete(f"/v2/attributes/{r.json['uuid']}").status_code == 204
    on_deployable = events(api, object_uuid=deployable["uuid"])
    assert [e["action"] for e in on_deployable] == ["attribute.delete", "attribute.create"]
    assert on_deployable[1]["after"] == {"key": "audit_key", "value": "v1"}
    assert on_deployable[0]["host"] == HOST

    r = api.post("/v2/device_activations", {"state": "inactive", "uuids": [uuid]}, version="2.7")
    assert r.status_code == 202, r.text
    (moved,) = events(api, action="activation.inactive")
    assert moved["object_uuid"] == uuid
    assert moved["before"] == {"activation": "ready"}
    assert moved["after"] == {"activation": "deactivating"}


def test_a_driver_change_is_recorded_per_host_without_option_values(api):
    reported = snapshot(HOST, [fpga("0000:0c:00.0")])
    reported["drivers"] = [{"name": "fake", "version": "1.0", "enabled": True, "found": 1}]
    reported["hash"] = schemas.snapshot_hash(
        reported["devices"], reported["driver_errors"], reported["drivers"]
    )
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", reported)
    assert r.status_code == 200, r.text
    body = {"hostnames": [HOST], "config": {"password": "s3cret"}}
    r = api.post("/v2/drivers/fake/update", body, version="2.7")
    assert r.status_code == 202, r.text
    (event,) = events(api, object_type="driver")
    assert (event["action"], event["object_uuid"], event["host"]) == ("update", "fake", HOST)
    assert event["after"]["options"] == ["password"]
    assert "s3cret" not in str(event)


def test_a_claim_is_recorded_made_renewed_and_released(api):
    report(api, [fpga("0000:0c:00.0")])
    body = [{"name": "audit-fpga", "groups": [{"resources:FPGA": "1"}]}]
    assert api.post("/v2/device_profiles", body).status_code == 201
    member = api.as_(PERSONAS["member"])
    r = member.post(
        "/v2/claims", {"device_profile_name": "audit-fpga", "consumer": "job-1"}, version="2.8"
    )
    assert r.status_code == 201, r.text
    claim = r.json["uuid"]
    r = member.post(f"/v2/claims/{claim}/renew", {"expires_in": 600}, version="2.8")
    assert r.status_code == 200, r.text
    assert member.delete(f"/v2/claims/{claim}", version="2.8").status_code in (200, 204)
    trail = list(reversed(events(api, object_uuid=claim)))
    assert [e["action"] for e in trail] == ["create", "renew", "release"]
    assert {e["actor"] for e in trail} == {"user:u-member"}
    assert trail[0]["after"]["consumer"] == "job-1" and trail[0]["host"] == HOST
    assert trail[1]["after"]["expires_at"]
    assert trail[2]["after"]["released_at"]


def test_an_image_is_recorded_made_uploaded_shared_and_deleted(api):
    member = api.as_(PERSONAS["member"])
    body = {"name": "audit-image", "format": "simulated", "visibility": "shared"}
    r = member.post("/v2/images", body, version="2.6")
    assert r.status_code == 201, r.text
    image = r.json["uuid"]
    r = member.put(f"/v2/images/{image}/file", b"audit image data", version="2.6")
    assert r.status_code == 204, r.text
    r = member.put(f"/v2/images/{image}/members/p-friend", version="2.6")
    assert r.status_code == 200, r.text
    r = member.delete(f"/v2/images/{image}/members/p-friend", version="2.6")
    assert r.status_code == 204, r.text
    assert member.delete(f"/v2/images/{image}", version="2.6").status_code == 204
    trail = list(reversed(events(api, object_type="image")))
    assert [e["action"] for e in trail] == [
        "create",
        "upload",
        "member.add",
        "member.remove",
        "delete",
    ]
    assert trail[0]["after"]["visibility"] == "shared"
    assert trail[1]["after"]["size"] == len(b"audit image data")
    assert trail[2]["after"] == {"member": "p-friend"}


def test_an_agents_cdi_report_of_a_claim_is_recorded_once(api):
    report(api, [fpga("0000:0c:00.0")])
    body = [{"name": "audit-cdi", "groups": [{"resources:FPGA": "1"}]}]
    assert api.post("/v2/device_profiles", body).status_code == 201
    body = {"device_profile_name": "audit-cdi", "container": True}
    r = api.as_(PERSONAS["member"]).post("/v2/claims", body, version="2.8")
    assert r.status_code == 201, r.text
    claim = r.json["uuid"]
    for _ in range(2):  # the same report twice: one change
        r = api.put(
            f"/agent/v1/hosts/{HOST}/claims/{claim}", {"cdi": "failed", "reason": "disk full"}
        )
        assert r.status_code == 200, r.text
    (event,) = events(api, object_uuid=claim, action="cdi.failed")
    assert event["actor"] == f"host:{HOST}" and event["host"] == HOST
    assert event["after"] == {"cdi": "failed", "reason": "disk full"}


def test_nova_binding_and_unbinding_an_arq_is_recorded_as_the_service(api):
    report(api, [fpga("0000:0c:00.0")])
    (deployable,) = api.get("/v2/deployables").json["deployables"]
    body = [{"name": "audit-arq", "groups": [{"resources:FPGA": "1"}]}]
    assert api.post("/v2/device_profiles", body).status_code == 201
    member, nova = api.as_(PERSONAS["member"]), api.as_(PERSONAS["nova"])
    r = member.post("/v2/accelerator_requests", {"device_profile_name": "audit-arq"})
    assert r.status_code == 201, r.text
    (arq,) = r.json["arqs"]
    instance = "6d7c2a1e-0000-4000-8000-00000000a0d1"
    bind = [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": deployable["rp_uuid"]},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]
    r = nova.patch("/v2/accelerator_requests", {arq["uuid"]: bind})
    assert r.status_code == 202, r.text
    unbind = [
        {"op": "remove", "path": f"/{p}"} for p in ("hostname", "device_rp_uuid", "instance_uuid")
    ]
    r = nova.patch("/v2/accelerator_requests", {arq["uuid"]: unbind})
    assert r.status_code == 202, r.text
    trail = list(reversed(events(api, object_uuid=arq["uuid"])))
    assert [e["action"] for e in trail] == ["create", "bind.end", "unbind"]
    assert trail[0]["actor"] == "user:u-member"
    assert {trail[1]["actor"], trail[2]["actor"]} == {"service:u-member"}
    assert trail[1]["before"] == {"state": "Initial"}
    assert trail[1]["after"]["state"] == "Bound" and trail[1]["after"]["instance_uuid"] == instance
    assert trail[1]["host"] == HOST
    assert trail[2]["after"] == {"state": "Unbound"}


def test_the_conductor_expiring_a_claim_is_recorded_as_the_conductor_with_its_job(
    api, conf, database
):
    report(api, [fpga("0000:0c:00.0")])
    body = [{"name": "audit-expiry", "groups": [{"resources:FPGA": "1"}]}]
    assert api.post("/v2/device_profiles", body).status_code == 201
    r = api.post(
        "/v2/claims", {"device_profile_name": "audit-expiry", "expires_in": 1}, version="2.8"
    )
    assert r.status_code == 201, r.text
    claim = r.json["uuid"]
    past = models.utcnow() - dt.timedelta(seconds=60)
    database.write(
        lambda conn: conn.execute(
            sa.update(models.claims).where(models.claims.c.uuid == claim).values(expires_at=past)
        )
    )
    registry = kinds.load(conf)
    worker = Worker(conf, database, handlers=registry.handlers, services=Services(conf, {}))
    job = database.write(jobs.enqueue, claims_db.EXPIRY, {})
    outcomes = []  # the other jobs due (Placement syncs, unconfigured here) run too
    while (outcome := worker.run_once()) is not None and len(outcomes) < 50:
        outcomes.append(outcome)
    (expiry,) = [o for o in outcomes if o.job_id == job]
    assert expiry.state == jobs.SUCCEEDED, expiry
    (expired,) = events(api, object_uuid=claim, action="expire")
    assert expired["actor"] == "conductor" and expired["request_id"] == f"job-{job}"
    assert expired["after"]["reason"].startswith("expired at")


def test_a_changed_report_writes_its_records_in_one_statement(api, database):
    devices = [fpga(f"0000:{bus:02x}:00.0") for bus in range(0x10, 0x18)]
    with statements(database) as seen:
        report(api, devices)
    inserts = [s for s in seen if "INSERT INTO audit_events" in " ".join(s.split())]
    assert len(inserts) == 1, inserts
    assert len(events(api, action="appear")) == len(devices)
    with statements(database) as seen:
        report(api, devices[2:])  # two gone
    inserts = [s for s in seen if "INSERT INTO audit_events" in " ".join(s.split())]
    assert len(inserts) == 1, inserts
    assert len(events(api, action="disappear")) == 2
