"""The conductor's ``claim_expiry`` sweep (exosuit/conductor/claim_expiry.py), on every backend:
claims past their ``expires_at`` are released (their handles freed, their host's desired
state moved on), a renewed one is left alone, and released claims are purged after
``[claims] retention``. Run as the periodic job of a real conductor worker, and alone."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from exosuit.conductor import claim_expiry as sweep_job
from exosuit.conductor import kinds
from exosuit.conductor.worker import Worker, schedule_periodic
from exosuit.db import claims as claims_db
from exosuit.db import models
from exosuit.jobs import JobContext
from tests.conftest import make_test_conf
from tests.helpers.claims import CLAIMS, V, fpga, make_world

HOST = "expiry-host"


def backdate(database, uuid: str, seconds: float) -> None:
    """The claim's expiry, ``seconds`` in the past (as if that much time had passed)."""
    when = models.utcnow() - dt.timedelta(seconds=seconds)
    database.write(
        lambda conn: conn.execute(
            sa.update(models.claims).where(models.claims.c.uuid == uuid).values(expires_at=when)
        )
    )


def test_the_sweep_is_a_periodic_kind_of_every_conductor():
    conf = make_test_conf()
    registry = kinds.load(conf)
    assert registry.handlers[claims_db.EXPIRY] is sweep_job.sweep
    interval = registry.periodic[claims_db.EXPIRY]
    assert interval(conf) == 30
    assert interval(make_test_conf(**{"conductor.claim_sweep_interval": 0})) == 0


def test_expired_claims_are_released_by_the_conductor(database, tmp_path):
    world = make_world(database, tmp_path)
    world.report(HOST, [fpga("0000:5e:00.0", handles=4)])
    world.profile("fpga", {"resources:FPGA": "1"})
    body = {"device_profile_name": "fpga", "expires_in": 3600, "container": True}
    expiring, renewed = (world.claim(body) for _ in range(2))
    forever = world.claim({"device_profile_name": "fpga"})
    backdate(database, expiring["uuid"], 10)
    backdate(database, renewed["uuid"], 10)
    r = world.member.post(f"{CLAIMS}/{renewed['uuid']}/renew", {"expires_in": 3600}, version=V)
    assert r.status_code == 200, r.text
    generation = world.desired(HOST)["generation"]

    # The periodic job of a real worker, scheduled as every conductor schedules it.
    conf = make_test_conf()
    registry = kinds.load(conf)
    schedule_periodic(database, conf, registry.periodic, registry.handlers)
    worker = Worker(conf, database)
    outcomes = []
    while (outcome := worker.run_once()) is not None:
        outcomes.append(outcome)
    assert claims_db.EXPIRY in [o.kind for o in outcomes], outcomes

    gone = world.show(expiring["uuid"])
    assert gone["state"] == "released" and gone["reason"].startswith("expired at ")
    assert gone["devices"] == []
    assert world.show(renewed["uuid"])["state"] == "bound"
    assert world.show(forever["uuid"])["state"] == "bound"
    assert world.held() == 2
    state = world.desired(HOST)
    assert state["generation"] > generation  # the agent removes the expired one's spec
    assert [c["claim"] for c in state["containers"]] == [renewed["uuid"]]
    # Idempotent: nothing more to do.
    sweep_job.sweep(JobContext(conf, database), {})
    assert world.held() == 2


def test_released_claims_are_purged_after_their_retention(database, tmp_path):
    world = make_world(database, tmp_path)
    world.report(HOST, [fpga("0000:5e:00.0", handles=2)])
    world.profile("fpga", {"resources:FPGA": "1"})
    claim = world.claim({"device_profile_name": "fpga"})
    world.release(claim["uuid"])
    kept = make_test_conf()  # a day's retention
    sweep_job.sweep(JobContext(kept, database), {})
    assert world.show(claim["uuid"])["state"] == "released"
    sweep_job.sweep(JobContext(make_test_conf(**{"claims.retention": 0}), database), {})
    r = world.admin.get(f"{CLAIMS}/{claim['uuid']}", version=V)
    assert r.status_code == 404, r.text
    assert world.claim({"device_profile_name": "fpga"})["state"] == "bound"
