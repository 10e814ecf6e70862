"""Binds that need work on their host stay BindStarted until the agent reports it, or
until ``[DEFAULT] bind_timeout``; Nova gets its event either way.

The host-side work is a program (doc/programming.md): the profile group asks for an
image (``accel:bitstream_id`` the device does not have yet, or ``accel:function_id``:
Cyborg programs FPGAs during a bind), the bind queues it as the host's desired
state, and the agent's reports on it (``PUT /agent/v1/hosts/{host}/programs/
{uuid}``) end the bind. A bind without such work is Bound within the PATCH. The
ARQ's own report (``PUT …/accelerator_requests/{uuid}``, the work of binds that
need no program) is covered at the end.
"""

from __future__ import annotations

import datetime as dt
import json

import sqlalchemy as sa

from exosuit.db import arqs, models
from tests.conftest import PERSONAS
from tests.helpers.programs import FUNCTION, upload_image
from tests.nova.conftest import ARQS, HOST, Cloud, new_instance
from tests.nova.test_notify import event

DEVICES = ("0000:0c:00.0", "0000:0d:00.0")


def handles_in_use(cloud: Cloud) -> int:
    ah = models.attach_handles
    with cloud.db.engine.connect() as conn:
        return conn.execute(
            sa.select(sa.func.count()).select_from(ah).where(ah.c.in_use.is_(True))
        ).scalar()


def programmed(image: dict) -> dict:
    return {"resources:FPGA": "1", "accel:bitstream_id": image["uuid"]}


def desired(cloud: Cloud, host: str = HOST) -> list[dict]:
    r = cloud.agent.get(f"/agent/v1/hosts/{host}/desired_state")
    assert r.status_code == 200, r.text
    return r.json["programs"]


def report_program(cloud: Cloud, program: str, state: str, host: str = HOST, **fields):
    return cloud.agent.put(f"/agent/v1/hosts/{host}/programs/{program}", {"state": state, **fields})


def play_agent(cloud: Cloud, program: str, last: str = "done", **fields) -> dict:
    """The agent loads the image: every state in turn, then ``last``."""
    for state in ("fetching", "programming", "verifying"):
        assert report_program(cloud, program, state).status_code == 200
    r = report_program(cloud, program, last, **fields)
    assert r.status_code == 200, r.text
    return r.json


def resolved(cloud: Cloud, instance: str):
    """nova-compute's poll."""
    return cloud.nova.get(f"{ARQS}?instance={instance}&bind_state=resolved")


def bind_waiting(cloud: Cloud, fake_nova, groups: list[dict]) -> tuple[str, list[str]]:
    """Bind one ARQ per group, each to its own programmable FPGA."""
    rps = cloud.providers()
    cloud.profile("programmed", groups)
    arqs_ = [a["uuid"] for a in cloud.create_arqs("programmed")]
    instance = new_instance()
    fake_nova.add_server(instance, HOST)
    bound = zip(arqs_, DEVICES, strict=False)
    r = cloud.bind([(arq, rps[address], instance) for arq, address in bound])
    assert r.status_code == 202, r.text  # at once, before the work
    return instance, arqs_


def setup(cloud: Cloud) -> dict:
    cloud.report(addresses=DEVICES, programmable=True)
    return upload_image(cloud.admin)


def test_bind_stays_started_until_its_program_is_done(database, cloud_factory, fake_nova):
    cloud = cloud_factory(database)
    image = setup(cloud)
    instance, [arq] = bind_waiting(cloud, fake_nova, [programmed(image)])
    assert cloud.state(arq) == "BindStarted"
    assert handles_in_use(cloud) == 1  # held while the host works
    [program] = desired(cloud)
    assert program["image"]["uuid"] == image["uuid"]
    # The same bind again is a no-op (another bind of the waiting ARQ is not).
    again = cloud.bind([(arq, cloud.providers()[DEVICES[0]], instance)])
    assert again.status_code == 202, again.text
    other = cloud.bind([(arq, cloud.providers()[DEVICES[0]], new_instance())])
    assert other.status_code == 409 and "exosuit.arq.bad_state" in other.text
    assert len(cloud.nova_jobs()) == 1 and len(desired(cloud)) == 1
    assert resolved(cloud, instance).status_code == 423
    shown = cloud.admin.get(f"{ARQS}/{arq}").json
    assert (shown["attach_handle_type"], shown["attach_handle_info"]) == ("", {})
    cloud.drain()
    assert fake_nova.requests == []  # nothing to tell yet

    assert play_agent(cloud, program["uuid"])["arq_uuid"] == arq
    r = resolved(cloud, instance)
    assert r.status_code == 200, r.text
    [shown] = r.json["arqs"]
    assert shown["state"] == "Bound" and shown["attach_handle_type"] == "PCI"
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "completed")]}

    # The same report again changes nothing and sends nothing.
    assert report_program(cloud, program["uuid"], "done").status_code == 200
    cloud.drain()
    assert len(fake_nova.requests) == 1


def test_a_failed_program_fails_the_bind(sqlite_database, cloud_factory, fake_nova):
    cloud = cloud_factory(sqlite_database)
    image = setup(cloud)
    instance, [arq] = bind_waiting(cloud, fake_nova, [programmed(image)])
    [program] = desired(cloud)
    play_agent(cloud, program["uuid"], "failed", reason="fpgaconf exited 1", restored=True)
    assert cloud.state(arq) == "BindFailed"
    assert handles_in_use(cloud) == 0
    with cloud.db.engine.connect() as conn:
        reason = conn.execute(sa.select(models.accelerator_requests.c.reason)).scalar()
    assert reason.startswith(f"host {HOST}: program {program['uuid']}")
    assert reason.endswith("failed: fpgaconf exited 1")
    assert resolved(cloud, instance).status_code == 200
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "failed")]}


# A bind_timeout no busy machine reaches by itself; ``at_the_deadline`` ends it.
BIND_TIMEOUT = 3600


def at_the_deadline(cloud: Cloud) -> None:
    """``BIND_TIMEOUT`` has passed for the rounds still waiting: their jobs are due and
    their deadline is over (what the clock would do, an hour later)."""
    jobs = models.jobs
    past = models.utcnow() - dt.timedelta(seconds=1)
    with cloud.db.engine.begin() as conn:
        for job in cloud.nova_jobs():
            if job["state"] == "pending" and job["payload"]["deadline"] is not None:
                payload = {**job["payload"], "deadline": past.isoformat()}
                conn.execute(
                    sa.update(jobs)
                    .where(jobs.c.id == job["id"])
                    .values(run_after=past, payload=json.dumps(payload))
                )


def test_bind_timeout_fails_the_bind_and_its_program(database, cloud_factory, fake_nova):
    cloud = cloud_factory(database, bind_timeout=BIND_TIMEOUT)
    image = setup(cloud)
    instance, [arq] = bind_waiting(cloud, fake_nova, [programmed(image)])
    [program] = desired(cloud)
    [job] = cloud.nova_jobs()
    cloud.drain()
    assert fake_nova.requests == [] and cloud.state(arq) == "BindStarted"
    wait = (job["run_after"] - models.utcnow()).total_seconds()
    assert BIND_TIMEOUT - 600 < wait <= BIND_TIMEOUT  # due bind_timeout after the bind
    at_the_deadline(cloud)
    cloud.drain()
    assert cloud.state(arq) == "BindFailed"
    assert handles_in_use(cloud) == 0
    with cloud.db.engine.connect() as conn:
        reason = conn.execute(sa.select(models.accelerator_requests.c.reason)).scalar()
    assert "bind_timeout" in reason
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "failed")]}
    # Its program failed too, and left the device (the agent had not touched it).
    assert desired(cloud) == []
    shown = cloud.admin.get(
        f"/v2/deployables/{program_deployable(cloud, program)}/program", version="2.6"
    ).json
    assert shown["state"] == "failed" and "bind_timeout" in shown["reason"]
    # The host finishes too late: refused, so that it knows the program ended.
    r = report_program(cloud, program["uuid"], "done")
    assert r.status_code == 409, r.text
    assert "exosuit.program.ended" in r.text
    cloud.drain()
    assert len(fake_nova.requests) == 1


def program_deployable(cloud: Cloud, program: dict) -> str:
    deployables = cloud.admin.get("/v2/deployables").json["deployables"]
    return next(d["uuid"] for d in deployables if d["name"] == program["deployable"])


def test_timeout_retried_tells_nova_the_same(sqlite_database, cloud_factory, fake_nova):
    """The timed-out statuses are kept in the job: when Nova fails the first try,
    the retry sends the same events (the ARQ was meanwhile deleted by Nova)."""
    cloud = cloud_factory(sqlite_database, bind_timeout=BIND_TIMEOUT)
    image = setup(cloud)
    fake_nova.fail_next(1, 502)
    instance, [arq] = bind_waiting(cloud, fake_nova, [programmed(image)])
    at_the_deadline(cloud)
    outcome = cloud.worker.run_once()
    while outcome is not None and outcome.kind != "nova_notify":
        outcome = cloud.worker.run_once()
    assert outcome.state == "pending"
    assert cloud.nova.delete(f"{ARQS}?instance={instance}").status_code == 204
    cloud.drain()
    assert [r.status for r in fake_nova.requests] == [502, 200]
    assert all(r.body == {"events": [event(instance, arq, "failed")]} for r in fake_nova.requests)


def test_one_event_batch_once_every_arq_of_the_round_resolved(database, cloud_factory, fake_nova):
    """One group needs the host, the other not: Bound at once, but Nova hears of both
    together, in the order of the PATCH, once the host reported."""
    cloud = cloud_factory(database)
    image = setup(cloud)
    instance, arqs_ = bind_waiting(cloud, fake_nova, [programmed(image), {"resources:FPGA": "1"}])
    assert [cloud.state(a) for a in arqs_] == ["BindStarted", "Bound"]
    assert resolved(cloud, instance).status_code == 423
    cloud.drain()
    assert fake_nova.requests == []
    [program] = desired(cloud)
    play_agent(cloud, program["uuid"])
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {
        "events": [event(instance, arqs_[0], "completed"), event(instance, arqs_[1], "completed")]
    }


def test_unbound_or_deleted_while_waiting_is_failed_at_once(
    sqlite_database, cloud_factory, fake_nova
):
    """Nova hears at once; the programs go on (the agent may be loading the devices),
    so the devices stay reserved until the host reports."""
    cloud = cloud_factory(sqlite_database)
    image = setup(cloud)
    instance, arqs_ = bind_waiting(cloud, fake_nova, [programmed(image), programmed(image)])
    r = cloud.nova.patch(
        ARQS,
        {
            arqs_[0]: [
                {"op": "remove", "path": "/hostname"},
                {"op": "remove", "path": "/device_rp_uuid"},
                {"op": "remove", "path": "/instance_uuid"},
            ]
        },
    )
    assert r.status_code == 202, r.text
    cloud.drain()
    assert fake_nova.requests == []  # the other one still waits
    assert cloud.nova.delete(f"{ARQS}?arqs={arqs_[1]}").status_code == 204
    assert handles_in_use(cloud) == 0
    cloud.drain()  # not at the deadline (60 s): now
    [request] = fake_nova.requests
    assert request.body == {
        "events": [event(instance, arqs_[0], "failed"), event(instance, arqs_[1], "failed")]
    }
    programs = desired(cloud)
    assert len(programs) == 2
    for program in programs:
        assert play_agent(cloud, program["uuid"])["state"] == "done"
    cloud.drain()
    assert len(fake_nova.requests) == 1


def test_reports_about_other_hosts_programs_are_not_found(
    sqlite_database, cloud_factory, fake_nova
):
    cloud = cloud_factory(sqlite_database)
    image = setup(cloud)
    _, [arq] = bind_waiting(cloud, fake_nova, [programmed(image)])
    [program] = desired(cloud)
    r = report_program(cloud, program["uuid"], "done", host="compute-2")
    assert r.status_code == 404, r.text
    r = report_program(cloud, "9b0e7a4c-1111-4c3e-8a58-2d7f6b1f0001", "done")
    assert r.status_code == 404, r.text
    r = report_program(cloud, program["uuid"], "maybe")
    assert r.status_code == 400, r.text
    r = cloud.api.as_(PERSONAS["member"]).put(
        f"/agent/v1/hosts/{HOST}/programs/{program['uuid']}", {"state": "done"}
    )
    assert r.status_code == 403, r.text
    # The ARQ's own report: it waits for its program, whose reports end it.
    r = cloud.agent.put(f"/agent/v1/hosts/{HOST}/accelerator_requests/{arq}", {"result": "done"})
    assert r.status_code == 409 and program["uuid"] in r.text
    assert cloud.state(arq) == "BindStarted"


def test_no_host_work_for_a_device_that_has_the_bitstream(
    sqlite_database, cloud_factory, fake_nova
):
    """As Cyborg skips programming a device that already has the bitstream (even one
    Exosuit cannot find: it is not loaded again)."""
    cloud = cloud_factory(sqlite_database)
    cloud.report(addresses=DEVICES, programmable=True)
    bitstream = "1e1b5b6c-6a3c-4a57-9c55-6b2f2c3c5d11"  # in no catalogue
    with cloud.db.engine.begin() as conn:
        conn.execute(sa.update(models.deployables).values(bitstream_id=bitstream))
    group = {"resources:FPGA": "1", "accel:bitstream_id": bitstream}
    instance, [arq] = bind_waiting(cloud, fake_nova, [group])
    assert cloud.state(arq) == "Bound"
    assert resolved(cloud, instance).status_code == 200
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "completed")]}
    assert desired(cloud) == []


def test_a_function_id_finds_its_image_and_programs_it(sqlite_database, cloud_factory, fake_nova):
    cloud = cloud_factory(sqlite_database)
    image = setup(cloud)
    group = {"resources:FPGA": "1", "accel:function_id": FUNCTION}
    _, [arq] = bind_waiting(cloud, fake_nova, [group])
    assert cloud.state(arq) == "BindStarted"
    [program] = desired(cloud)
    assert program["image"]["uuid"] == image["uuid"]


def test_a_bitstream_that_cannot_be_found_fails_the_bind(sqlite_database, cloud_factory, fake_nova):
    cloud = cloud_factory(sqlite_database)
    cloud.report(addresses=DEVICES, programmable=True)
    cloud.profile("unknown", [{"resources:FPGA": "1", "accel:bitstream_id": FUNCTION}])
    [arq] = cloud.create_arqs("unknown")
    instance = new_instance()
    r = cloud.bind([(arq["uuid"], cloud.providers()[DEVICES[0]], instance)])
    assert r.status_code == 409 and "could not be found" in r.text
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq["uuid"], "failed")]}


# -- host work without a program: the ARQ's own report ----------------------------------------


def bind_waiting_without_program(cloud: Cloud) -> tuple[str, str]:
    """A bind that waits for its host with no program (what the database layer keeps
    for host work to come: mdev creation): bound below the API, as no profile asks
    for such work yet."""
    rps = cloud.report()
    cloud.profile("work", [{"resources:FPGA": "1", "accel:function_id": "f-1"}])
    [arq] = cloud.create_arqs("work")
    instance = new_instance()
    binding = arqs.Binding(arq["uuid"], HOST, rps["0000:0c:00.0"], instance)
    cloud.db.write(
        arqs.bind, [binding], arqs.Scope(None), skip_locked=cloud.db.supports_skip_locked
    )
    assert cloud.state(arq["uuid"]) == "BindStarted"
    return instance, arq["uuid"]


def report_work(cloud: Cloud, arq: str, body: dict, host: str = HOST):
    return cloud.agent.put(f"/agent/v1/hosts/{host}/accelerator_requests/{arq}", body)


def test_the_arqs_own_report_ends_work_without_a_program(database, cloud_factory, fake_nova):
    cloud = cloud_factory(database)
    instance, arq = bind_waiting_without_program(cloud)
    assert report_work(cloud, arq, {"result": "done"}, host="compute-2").status_code == 404
    assert report_work(cloud, arq, {"result": "maybe"}).status_code == 400
    r = report_work(cloud, arq, {"result": "done"})
    assert r.status_code == 200, r.text
    assert r.json == {"uuid": arq, "hostname": HOST, "state": "Bound"}
    assert report_work(cloud, arq, {"result": "done"}).json["state"] == "Bound"
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "completed")]}


def test_the_arqs_own_failed_report_fails_the_bind(sqlite_database, cloud_factory, fake_nova):
    cloud = cloud_factory(sqlite_database)
    instance, arq = bind_waiting_without_program(cloud)
    r = report_work(cloud, arq, {"result": "failed", "reason": "mdev creation failed"})
    assert r.status_code == 200 and r.json["state"] == "BindFailed"
    assert handles_in_use(cloud) == 0
    with cloud.db.engine.connect() as conn:
        reason = conn.execute(sa.select(models.accelerator_requests.c.reason)).scalar()
    assert reason == f"host {HOST}: mdev creation failed"
    cloud.drain()
    [request] = fake_nova.requests
    assert request.body == {"events": [event(instance, arq, "failed")]}
