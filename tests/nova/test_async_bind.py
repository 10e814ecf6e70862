"""Binds that need work on their host stay BindStarted until the agent reports it, or
until ``[DEFAULT] bind_timeout``; Nova gets its event either way.

The host-side work is asked for by the profile group (``accel:bitstream_id`` the
device does not have yet, or ``accel:function_id``: Cyborg programs FPGAs during
a bind). The agent's report is ``PUT /agent/v1/hosts/{host}/accelerator_requests/
{uuid}``. A bind without such work is Bound within the PATCH.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from exosuit.db import models
from tests.conftest import PERSONAS
from tests.nova.conftest import ARQS, HOST, Cloud, new_instance
from tests.nova.test_notify import event

BITSTREAM = "1e1b5b6c-6a3c-4a57-9c55-6b2f2c3c5d11"
PROGRAMMED = [{"resources:FPGA": "1", "accel:bitstream_id": BITSTREAM}]


def handles_in_use(cloud: Cloud) -> int:
    ah = models.attach_handles
    with cloud.db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(ah)
                            .where(ah.c.in_use.is_(True))).scalar()


def report_work(cloud: Cloud, arq: str, body: dict, host: str = HOST):
    return cloud.agent.put(f"/agent/v1/hosts/{host}/accelerator_requests/{arq}", body)


def resolved(cloud: Cloud, instance: str):
    """nova-compute's poll."""
    return cloud.nova.get(f"{ARQS}?instance={instance}&bind_state=resolved")


def bind_waiting(cloud: Cloud, fake_nova, groups=PROGRAMMED) -> tuple[str, list[str]]:
    rps = cloud.report()
    cloud.profile("programmed", groups)
    arqs = [a["uuid"] for a in cloud.create_arqs("programmed")]
    instance = new_instance()
    fake_nova.add_server(instance, HOST)
    began = time.monotonic()
    r = cloud.bind([(arq, rps["0000:0c:00.0"], instance) for arq in arqs])
    assert r.status_code == 202, r.text
    assert time.monotonic() - began < 5  # at once, not after the work
    return instance, arqs


def test_bind_stays_started_until_the_agent_reports_it_done(database, cloud_factory,
                                                            fake_nova):
    cloud = cloud_factory(database)
    instance, [arq] = bind_waiting(cloud, fake_nova)
    assert cloud.state(arq) == "BindStarted"
    assert handles_in_use(cloud) == 1  # held while the host works
    # The same bind again is a no-op (another bind of the waiting ARQ is not).
    again = cloud.bind([(arq, cloud.providers()["0000:0c:00.0"], instance)])
    assert again.status_code == 202, again.text
    other = cloud.bind([(arq, cloud.providers()["0000:0c:00.0"], new_instance())])
    assert other.status_code == 409 and "exosuit.arq.bad_state" in other.text
    assert len(cloud.nova_jobs()) == 1
    r = resolved(cloud, instance)
    assert r.status_code == 423, r.text
    shown = cloud.admin.get(f"{ARQS}/{arq}").json
    assert (shown["attach_handle_type"], shown["attach_handle_info"]) == ("", {})
    cloud.drain()
    assert fake_nova.requests == []  # nothing to tell yet

    r = report_work(cloud, arq, {"result": "done"})
    assert r.status_code == 200, r.text
    assert r.json == {"uuid": arq, "hostname": HOST, "state": "Bound"}
    r = resolved(cloud, instance)
    assert r.status_code == 200, r.text
    [shown] = r.json["arqs"]
    assert shown["state"] == "Bound" and shown["attach_handle_type"] == "TEST_PCI"
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "completed")]}

    # The same report again changes nothing and sends nothing.
    assert report_work(cloud, arq, {"result": "done"}).json["state"] == "Bound"
    cloud.drain()
    assert len(fake_nova.requests) == 1


def test_a_failed_report_fails_the_bind(sqlite_database, cloud_factory, fake_nova):
    cloud = cloud_factory(sqlite_database)
    instance, [arq] = bind_waiting(cloud, fake_nova)
    r = report_work(cloud, arq, {"result": "failed", "reason": "fpgaconf exited 1"})
    assert r.status_code == 200, r.text
    assert r.json["state"] == "BindFailed"
    assert handles_in_use(cloud) == 0
    with cloud.db.engine.connect() as conn:
        reason = conn.execute(sa.select(models.accelerator_requests.c.reason)).scalar()
    assert reason == f"host {HOST}: fpgaconf exited 1"
    assert resolved(cloud, instance).status_code == 200
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "failed")]}


def test_bind_timeout_fails_the_bind_and_tells_nova(database, cloud_factory, fake_nova):
    cloud = cloud_factory(database, bind_timeout=1)
    instance, [arq] = bind_waiting(cloud, fake_nova)
    [job] = cloud.nova_jobs()
    cloud.drain()
    assert fake_nova.requests == [] and cloud.state(arq) == "BindStarted"
    wait = (job["run_after"] - models.utcnow()).total_seconds()
    assert 0 < wait <= 1
    time.sleep(wait + 0.05)
    cloud.drain()
    assert cloud.state(arq) == "BindFailed"
    assert handles_in_use(cloud) == 0
    with cloud.db.engine.connect() as conn:
        reason = conn.execute(sa.select(models.accelerator_requests.c.reason)).scalar()
    assert "bind_timeout" in reason
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "failed")]}
    # The host finishes too late: refused, so that it undoes its work.
    r = report_work(cloud, arq, {"result": "done"})
    assert r.status_code == 409, r.text
    assert "exosuit.arq.bad_state" in r.text
    cloud.drain()
    assert len(fake_nova.requests) == 1


def test_timeout_retried_tells_nova_the_same(sqlite_database, cloud_factory, fake_nova):
    """The timed-out statuses are kept in the job: when Nova fails the first try,
    the retry sends the same events (the ARQ was meanwhile deleted by Nova)."""
    cloud = cloud_factory(sqlite_database, bind_timeout=1)
    fake_nova.fail_next(1, 502)
    instance, [arq] = bind_waiting(cloud, fake_nova)
    time.sleep(1.1)
    outcome = cloud.worker.run_once()
    while outcome is not None and outcome.kind != "nova_notify":
        outcome = cloud.worker.run_once()
    assert outcome.state == "pending"
    assert cloud.nova.delete(f"{ARQS}?instance={instance}").status_code == 204
    cloud.drain()
    assert [r.status for r in fake_nova.requests] == [502, 200]
    assert all(r.body == {"events": [event(instance, arq, "failed")]}
               for r in fake_nova.requests)


def test_one_event_batch_once_every_arq_of_the_round_resolved(database, cloud_factory,
                                                                 fake_nova):
    """One group needs the host, the other not: Bound at once, but Nova hears of both
    together, in the order of the PATCH, once the host reported."""
    cloud = cloud_factory(database)
    instance, arqs = bind_waiting(cloud, fake_nova, PROGRAMMED + [{"resources:FPGA": "1"}])
    assert [cloud.state(a) for a in arqs] == ["BindStarted", "Bound"]
    assert resolved(cloud, instance).status_code == 423
    cloud.drain()
    assert fake_nova.requests == []
    assert report_work(cloud, arqs[0], {"result": "done"}).status_code == 200
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arqs[0], "completed"),
                                       event(instance, arqs[1], "completed")]}


def test_unbound_or_deleted_while_waiting_is_failed_at_once(sqlite_database, cloud_factory,
                                                            fake_nova):
    cloud = cloud_factory(sqlite_database)
    instance, arqs = bind_waiting(cloud, fake_nova, PROGRAMMED + PROGRAMMED)
    r = cloud.nova.patch(ARQS, {arqs[0]: [{"op": "remove", "path": "/hostname"},
                                          {"op": "remove", "path": "/device_rp_uuid"},
                                          {"op": "remove", "path": "/instance_uuid"}]})
    assert r.status_code == 202, r.text
    cloud.drain()
    assert fake_nova.requests == []  # the other one still waits
    assert cloud.nova.delete(f"{ARQS}?arqs={arqs[1]}").status_code == 204
    assert handles_in_use(cloud) == 0
    cloud.drain()  # not at the deadline (60 s): now
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arqs[0], "failed"),
                                       event(instance, arqs[1], "failed")]}


def test_reports_about_other_hosts_arqs_are_not_found(sqlite_database, cloud_factory,
                                                      fake_nova):
    cloud = cloud_factory(sqlite_database)
    _, [arq] = bind_waiting(cloud, fake_nova)
    r = report_work(cloud, arq, {"result": "done"}, host="compute-2")
    assert r.status_code == 404, r.text
    r = report_work(cloud, "9b0e7a4c-1111-4c3e-8a58-2d7f6b1f0001", {"result": "done"})
    assert r.status_code == 404, r.text
    r = report_work(cloud, arq, {"result": "maybe"})
    assert r.status_code == 400, r.text
    r = cloud.api.as_(PERSONAS["member"]).put(
        f"/agent/v1/hosts/{HOST}/accelerator_requests/{arq}", {"result": "done"})
    assert r.status_code == 403, r.text
    assert cloud.state(arq) == "BindStarted"


def test_no_host_work_for_a_device_that_has_the_bitstream(sqlite_database, cloud_factory,
                                                         fake_nova):
    """As Cyborg skips programming a device that already has the bitstream."""
    cloud = cloud_factory(sqlite_database)
    cloud.report()
    with cloud.db.engine.begin() as conn:
        conn.execute(sa.update(models.deployables).values(bitstream_id=BITSTREAM))
    instance, [arq] = bind_waiting(cloud, fake_nova)
    assert cloud.state(arq) == "Bound"
    assert resolved(cloud, instance).status_code == 200
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "completed")]}


def test_function_id_needs_host_work(sqlite_database, cloud_factory, fake_nova):
    cloud = cloud_factory(sqlite_database)
    _, [arq] = bind_waiting(cloud, fake_nova, [{"resources:FPGA": "1",
                                               "accel:function_id": "f-1"}])
    assert cloud.state(arq) == "BindStarted"
