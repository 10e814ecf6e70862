"""Nova hears how each bind resolved: one ``accelerator-request-bound`` event per ARQ,
one POST per instance, from a conductor job, exactly once.

Exosuit's API runs in-process (as Nova calls it, with Nova's pair of tokens),
its real conductor worker runs the jobs, and Nova is a real HTTP server on
loopback (tests/nova/fake_nova.py) reached through keystoneauth with the
``[nova]`` and ``[service_user]`` options of an INI file.
"""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from exosuit.conductor.worker import Settings, Worker
from exosuit.conf import make_conf
from exosuit.db import models
from tests.nova.conftest import (
    ARQS,
    EXOSUIT_TOKEN,
    HOST,
    SERVICE_TOKEN,
    Cloud,
    new_instance,
    write_nova_conf,
)
from tests.nova.fake_nova import FakeNova, static_tokens

TWO_GROUPS = [
    {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"},
    {"resources:FPGA": "1"},
]


def event(instance: str, arq: str, status: str) -> dict:
    return {
        "name": "accelerator-request-bound",
        "server_uuid": instance,
        "tag": arq,
        "status": status,
    }


def two_arqs_bound(cloud: Cloud, instance: str):
    """Nova's boot: two groups on two devices of HOST, bound in one PATCH."""
    rps = cloud.report(HOST, ("0000:0c:00.0", "0000:0d:00.0"))
    cloud.profile("two", TWO_GROUPS)
    arqs = [a["uuid"] for a in cloud.create_arqs("two")]
    r = cloud.bind(
        [(arqs[0], rps["0000:0c:00.0"], instance), (arqs[1], rps["0000:0d:00.0"], instance)]
    )
    assert r.status_code == 202, r.text
    return arqs


def test_a_bind_sends_each_event_once_with_both_tokens(database, cloud_factory, fake_nova):
    """The core contract, on SQLite, PostgreSQL and MariaDB."""
    cloud = cloud_factory(database)
    instance = new_instance()
    fake_nova.add_server(instance, HOST)
    arqs = two_arqs_bound(cloud, instance)

    # Never inside the API request: the job is queued, Nova has heard nothing yet.
    assert fake_nova.requests == []
    [job] = cloud.nova_jobs()
    assert job["state"] == "pending"
    assert job["payload"]["arqs"] == [
        {"uuid": arqs[0], "status": "completed"},
        {"uuid": arqs[1], "status": "completed"},
    ]

    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {
        "events": [event(instance, arqs[0], "completed"), event(instance, arqs[1], "completed")]
    }
    assert request.status == 200
    assert request.headers["X-Auth-Token"] == EXOSUIT_TOKEN
    assert request.headers["X-Service-Token"] == SERVICE_TOKEN
    assert request.headers["OpenStack-API-Version"] == "compute 2.82"
    assert request.path == "/v2.1/os-server-external-events"
    assert fake_nova.accepted == [dict(e, code=200) for e in request.body["events"]]
    [job] = cloud.nova_jobs()
    assert job["state"] == "succeeded"

    # Run the conductor again, bind the same again (idempotent): nothing more is sent.
    r = cloud.bind([(arqs[0], cloud.providers()["0000:0c:00.0"], instance)])
    assert r.status_code == 202, r.text
    cloud.drain()
    assert len(fake_nova.requests) == 1
    assert len(cloud.nova_jobs()) == 1


def test_one_post_per_instance(sqlite_database, cloud_factory, fake_nova):
    cloud = cloud_factory(sqlite_database)
    rps = cloud.report(HOST, ("0000:0c:00.0", "0000:0d:00.0"))
    cloud.profile("one", [{"resources:FPGA": "1"}])
    first, second = new_instance(), new_instance()
    for instance in (first, second):
        fake_nova.add_server(instance, HOST)
    [a] = cloud.create_arqs("one")
    [b] = cloud.create_arqs("one")
    r = cloud.bind(
        [(a["uuid"], rps["0000:0c:00.0"], first), (b["uuid"], rps["0000:0d:00.0"], second)]
    )
    assert r.status_code == 202, r.text
    cloud.drain()
    bodies = sorted(
        (r.body for r in fake_nova.requests), key=lambda b: b["events"][0]["server_uuid"] != first
    )
    assert bodies == [
        {"events": [event(first, a["uuid"], "completed")]},
        {"events": [event(second, b["uuid"], "completed")]},
    ]


def test_failed_binds_are_failed_events_even_once_nova_deleted_the_arqs(
    database, cloud_factory, fake_nova
):
    """Unknown provider and disabled device: the PATCH says 409, the ARQs are
    BindFailed, Nova deletes them (DELETE ?arqs=) before the conductor runs, and
    still gets a ``failed`` event for each."""
    cloud = cloud_factory(database)
    instance = new_instance()
    fake_nova.add_server(instance, HOST)
    rps = cloud.report(HOST, ("0000:0c:00.0", "0000:0d:00.0"))
    [device] = [d for d in cloud.admin.get("/v2/devices").json["devices"] if d["hostname"] == HOST][
        :1
    ]
    cloud.profile("two", TWO_GROUPS)
    arqs = [a["uuid"] for a in cloud.create_arqs("two")]
    r = cloud.admin.post(f"/v2/devices/{device['uuid']}/disable")
    assert r.status_code == 200, r.text
    disabled_rp = next(
        d["rp_uuid"]
        for d in cloud.admin.get("/v2/deployables").json["deployables"]
        if _device_of(cloud, d["uuid"]) == device["uuid"]
    )
    assert disabled_rp in rps.values()
    unknown_rp = "5a8e7c3c-0000-4000-8000-00000000dead"
    r = cloud.bind([(arqs[0], unknown_rp, instance), (arqs[1], disabled_rp, instance)])
    assert r.status_code == 409, r.text
    assert f"no deployable has resource provider {unknown_rp}" in r.text
    assert "is disabled" in r.text
    assert [cloud.state(a) for a in arqs] == ["BindFailed", "BindFailed"]

    r = cloud.nova.delete(f"{ARQS}?arqs={arqs[0]},{arqs[1]}")
    assert r.status_code == 204, r.text
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {
        "events": [event(instance, arqs[0], "failed"), event(instance, arqs[1], "failed")]
    }


def _device_of(cloud: Cloud, deployable_uuid: str) -> str:
    """The uuid of a deployable's device (GET /v2/devices lists no integer ids)."""
    with cloud.db.engine.connect() as conn:
        dep, dev = models.deployables, models.devices
        return conn.execute(
            sa.select(dev.c.uuid)
            .select_from(dep.join(dev, dep.c.device_id == dev.c.id))
            .where(dep.c.uuid == deployable_uuid)
        ).scalar_one()


def test_a_refused_patch_queues_nothing(sqlite_database, cloud_factory, fake_nova):
    """The job is in the bind's transaction: a PATCH refused as a whole (an ARQ in the
    wrong state) changes no ARQ and queues no notification."""
    cloud = cloud_factory(sqlite_database)
    rps = cloud.report()
    cloud.profile("one", [{"resources:FPGA": "1"}])
    [a] = cloud.create_arqs("one")
    [b] = cloud.create_arqs("one")
    rp = rps["0000:0c:00.0"]
    assert cloud.bind([(a["uuid"], rp, new_instance())]).status_code == 202
    cloud.drain()
    requests_before = len(fake_nova.requests)
    r = cloud.bind([(b["uuid"], rp, new_instance()), (a["uuid"], rp, new_instance())])
    assert r.status_code == 409, r.text
    assert "exosuit.arq.bad_state" in r.text
    assert cloud.state(b["uuid"]) == "Initial"
    assert len(cloud.nova_jobs()) == 1
    cloud.drain()
    assert len(fake_nova.requests) == requests_before


def test_nova_errors_are_retried_with_backoff_and_sent_once(database, cloud_factory, fake_nova):
    cloud = cloud_factory(database)
    instance = new_instance()
    fake_nova.add_server(instance, HOST)
    fake_nova.fail_next(2, 500)
    fake_nova.fail_next(1, 503)
    arqs = two_arqs_bound(cloud, instance)
    cloud.drain()
    statuses = [r.status for r in fake_nova.requests]
    assert statuses == [500, 500, 503, 200]
    expected = {
        "events": [event(instance, arqs[0], "completed"), event(instance, arqs[1], "completed")]
    }
    assert all(r.body == expected for r in fake_nova.requests)
    assert fake_nova.events_for(instance) == expected["events"]  # taken once
    [job] = cloud.nova_jobs()
    assert (job["state"], job["attempts"]) == ("succeeded", 3)
    assert "Nova is unavailable" in job["last_error"] and "503" in job["last_error"]


def test_unreachable_nova_is_a_failed_attempt(sqlite_database, tmp_path, closed_port):
    conf = write_nova_conf(tmp_path / "exosuit.conf", f"http://127.0.0.1:{closed_port}/v2.1")
    cloud = Cloud(conf, sqlite_database)
    cloud.worker = Worker(conf, sqlite_database, settings=Settings(backoff_base=30))
    rps = cloud.report()
    cloud.profile("one", [{"resources:FPGA": "1"}])
    [a] = cloud.create_arqs("one")
    assert cloud.bind([(a["uuid"], rps["0000:0c:00.0"], new_instance())]).status_code == 202
    outcomes = [cloud.worker.run_once() for _ in range(3)]
    nova_outcome = next(o for o in outcomes if o is not None and o.kind == "nova_notify")
    assert nova_outcome.state == "pending" and nova_outcome.retry_in >= 15
    assert "Nova is unavailable" in nova_outcome.error


@pytest.fixture
def closed_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("on_host", "code", "says"),
    [
        (None, 422, "not on a host yet"),  # the bind was quicker than the build: normal
        ("unknown", 404, "did not take event(s)"),  # Nova has no such server
    ],
)
def test_207_with_per_event_codes_is_logged_and_not_retried(
    sqlite_database, cloud_factory, fake_nova, caplog, on_host, code, says
):
    """Nova answers 207 with a code per event (as Nova 34 was seen to when it took
    none): logged, done, never resent."""
    cloud = cloud_factory(sqlite_database)
    instance = new_instance()
    if on_host != "unknown":
        fake_nova.add_server(instance, on_host)
    with caplog.at_level(logging.INFO, logger="exosuit.nova.notify"):
        arqs = two_arqs_bound(cloud, instance)
        cloud.drain()
    [request] = fake_nova.requests
    assert request.status == 207
    assert [e["code"] for e in request.answer["events"]] == [code, code]
    [job] = cloud.nova_jobs()
    assert (job["state"], job["attempts"]) == ("succeeded", 0)
    assert f"{arqs[0]}: {code}" in caplog.text and says in caplog.text


def test_whole_request_404_is_a_warning_not_retried(
    sqlite_database, cloud_factory, fake_nova, caplog
):
    """No server took any event (Nova's controller says 404 then): the server is gone."""
    fake_nova.none_accepted_status = 404
    cloud = cloud_factory(sqlite_database)
    instance = new_instance()  # unknown to Nova
    with caplog.at_level(logging.WARNING, logger="exosuit.nova.notify"):
        two_arqs_bound(cloud, instance)
        cloud.drain()
    [request] = fake_nova.requests
    assert request.status == 404
    [job] = cloud.nova_jobs()
    assert (job["state"], job["attempts"]) == ("succeeded", 0)
    assert "No instances found for any event" in caplog.text


def test_without_service_token_option_only_exosuits_token_is_sent(sqlite_database, tmp_path):
    nova = FakeNova(static_tokens({EXOSUIT_TOKEN: {"service"}})).start()
    try:
        conf = write_nova_conf(tmp_path / "exosuit.conf", nova.url, service_token=False)
        cloud = Cloud(conf, sqlite_database)
        instance = new_instance()
        nova.add_server(instance)
        two_arqs_bound(cloud, instance)
        cloud.drain()
        [request] = nova.requests
        assert request.status == 200
        assert "X-Service-Token" not in request.headers
    finally:
        nova.stop()


def test_without_nova_credentials_nothing_is_sent(sqlite_database, fake_nova):
    """Standalone (no auth_type in [nova]): the job succeeds and sends nothing."""
    cloud = Cloud(make_conf([], **{"inventory.new_device_activation": "ready"}), sqlite_database)
    two_arqs_bound(cloud, new_instance())
    cloud.drain()
    [job] = cloud.nova_jobs()
    assert job["state"] == "succeeded"
    assert fake_nova.requests == []
