"""ARQs caught mid-bind (BindStarted) and Deleting, as Cyborg's objects left them
(tests/db/fill_cyborg.py), and what Nova sees of them after the import.

BindStarted: nothing in Exosuit finishes a bind Cyborg started, so the import fails
it: BindFailed with the reason, the attach handle Cyborg's ``bind`` had taken free
again (Nova starts a server only once its binds resolved: nothing uses it), and a
resolved ``nova_notify`` round for its instance, so Nova stops waiting at once.
Deleting: kept Deleting (Nova counts it resolved), still holding its handle until it
is deleted.
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from exosuit.api.deploy import loadapp
from exosuit.db import models
from tests.conftest import PERSONAS, ApiClient, make_test_conf
from tests.helpers.cyborg_import import NOVA, by_uuid, run, url_of

pytestmark = pytest.mark.slow

ARQS = "/v2/accelerator_requests"


def test_mid_bind_and_deleting_arqs(capsys, tmp_path, cyborg_source, database):
    filled = cyborg_source.filled
    arqs, instances = filled["arqs"], filled["instances"]
    # What Cyborg's objects left: both BindStarted, one holding a handle its bind took
    # (marked in use), the Deleting one holding its handle.
    assert filled["arq_states"][arqs["bind_started"]] == "BindStarted"
    assert filled["arq_states"][arqs["bind_started_early"]] == "BindStarted"
    assert filled["arq_states"][arqs["deleting"]] == "Deleting"
    taken = filled["arq_handles"][arqs["bind_started"]]
    held = filled["arq_handles"][arqs["deleting"]]
    assert arqs["bind_started_early"] not in filled["arq_handles"]
    assert filled["attach_handles"][taken]["in_use"] and filled["attach_handles"][held]["in_use"]

    code, out, err = run(capsys, tmp_path, url_of(database), "--from", cyborg_source.url, "--apply")
    assert code == 0, err
    assert (
        f"ARQ {arqs['bind_started']} was being bound when Cyborg stopped (BindStarted, "
        f"instance {instances['started']}): imported BindFailed, its attach handle released" in out
    )
    assert f"ARQ {arqs['bind_started_early']} was being bound" in out
    assert f"ARQ {arqs['deleting']} is Deleting in Cyborg" in out
    assert "still holding its attach handle" in out
    # A handle released by the import is not reported as one nobody holds.
    assert f"attach handle {taken}" not in out

    rows = by_uuid(database, "accelerator_requests")
    handles = by_uuid(database, "attach_handles")
    handle_ids = {h["id"]: u for u, h in handles.items()}
    for name, instance in (("bind_started", "started"), ("bind_started_early", "early")):
        row = rows[arqs[name]]
        assert row["state"] == "BindFailed"
        assert row["attach_handle_id"] is None and row["deployable_id"] is None
        assert row["instance_uuid"] == instances[instance]
        assert "Cyborg stopped" in row["reason"]
    # Never a handle lost: the one the failed bind took is free again.
    assert not handles[taken]["in_use"]
    # Never two holders: the Deleting ARQ still holds its own, in use.
    assert handle_ids[rows[arqs["deleting"]]["attach_handle_id"]] == held
    assert rows[arqs["deleting"]]["state"] == "Deleting"
    assert bool(handles[held]["in_use"])

    # Nova is told at once, one resolved round per instance whose bind was failed.
    with database.engine.connect() as conn:
        jobs = conn.execute(
            sa.select(models.jobs.c.payload, models.jobs.c.run_after, models.jobs.c.state).where(
                models.jobs.c.kind == "nova_notify"
            )
        ).all()
    rounds = {json.loads(j.payload)["instance_uuid"]: json.loads(j.payload) for j in jobs}
    assert set(rounds) == {instances["started"], instances["early"]}
    assert rounds[instances["started"]]["arqs"] == [
        {"uuid": arqs["bind_started"], "status": "failed"}
    ]
    assert rounds[instances["early"]]["arqs"] == [
        {"uuid": arqs["bind_started_early"], "status": "failed"}
    ]
    assert all(j.state == "pending" for j in jobs)
    assert all(json.loads(j.payload)["deadline"] is None for j in jobs)
    assert max(j.run_after for j in jobs) <= models.utcnow()

    # What Nova reads: the failed binds and the Deleting ARQ resolved (no 423).
    nova = ApiClient(loadapp(make_test_conf(), database)).as_(NOVA)
    for instance in ("started", "early", "deleting"):
        r = nova.get(f"{ARQS}?instance={instances[instance]}&bind_state=resolved")
        assert r.status_code == 200, r.text
    started = nova.get(f"{ARQS}/{arqs['bind_started']}").json
    assert started["state"] == "BindFailed" and started["attach_handle_uuid"] is None
    # Nova's clean-up of the failed build deletes its ARQs; deleting the server that held
    # the Deleting one releases its handle.
    for instance in ("started", "early", "deleting"):
        assert nova.delete(f"{ARQS}?instance={instances[instance]}").status_code == 204
    handles = by_uuid(database, "attach_handles")
    assert not handles[held]["in_use"] and not handles[taken]["in_use"]
    admin = ApiClient(loadapp(make_test_conf(), database)).as_(PERSONAS["admin"])
    left = {a["uuid"] for a in admin.get(ARQS).json["arqs"]}
    assert not left & {arqs["bind_started"], arqs["bind_started_early"], arqs["deleting"]}


def test_a_released_handle_can_be_bound_again(capsys, tmp_path, cyborg_source, sqlite_database):
    """The handle the failed bind had taken is offered again: fill every free handle of
    compute-a's fake FPGA through Nova's calls, and it is among those bound."""
    filled = cyborg_source.filled
    taken = filled["arq_handles"][filled["arqs"]["bind_started"]]
    assert (
        run(capsys, tmp_path, url_of(sqlite_database), "--from", cyborg_source.url, "--apply")[0]
        == 0
    )
    api = ApiClient(loadapp(make_test_conf(), sqlite_database))
    nova = api.as_(NOVA)
    [(fake, deployable)] = [
        (u, d) for u, d in filled["deployables"].items() if d["name"] == "compute-a_FakeDevice"
    ]
    handles = by_uuid(sqlite_database, "attach_handles")
    free = [
        u
        for u, h in filled["attach_handles"].items()
        if h["deployable"] == fake and not handles[u]["in_use"]
    ]
    # 16 handles: the Bound and the Deleting ARQ hold one each.
    assert taken in free and len(free) == 14
    bound = set()
    for n in range(len(free)):
        created = nova.post(ARQS, {"device_profile_name": "fpga-dp"})
        assert created.status_code == 201, created.text
        [arq] = created.json["arqs"]
        patch = [
            {"path": "/hostname", "op": "add", "value": "compute-a"},
            {"path": "/device_rp_uuid", "op": "add", "value": deployable["rp_uuid"]},
            {"path": "/instance_uuid", "op": "add", "value": f"00000000-0000-4000-8000-{n:012d}"},
        ]
        r = nova.patch(ARQS, {arq["uuid"]: patch})
        assert r.status_code == 202, r.text
        bound.add(nova.get(f"{ARQS}/{arq['uuid']}").json["attach_handle_uuid"])
    assert bound == set(free)
