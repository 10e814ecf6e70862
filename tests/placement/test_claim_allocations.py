"""Standalone claims with a real Placement (tests/placement/conftest.py): a claim is also
allocated there (consumer: the claim), so Nova's scheduler and claims never get the same
device; a claim that Placement refuses (Nova's allocation took the provider meanwhile)
tries another device, and one it cannot place holds nothing; Placement away is a 503
holding nothing; a release deletes the allocation through a conductor job.

The API (in-process) and a real conductor worker share one database; Nova's part is
played by its calls to Placement (PUT /allocations/{instance}) and to the ARQ API.
"""

from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa

from exosuit.db import models
from exosuit.placement.client import use_placement_url
from tests.conftest import PERSONAS, ApiClient, make_test_conf
from tests.helpers.agent_processes import free_port
from tests.placement.conftest import Stack, fpga, placement_conf

V = "2.8"
CLAIMS = "/v2/claims"
ARQS = "/v2/accelerator_requests"


@pytest.fixture
def stack(placement, placement_api, sqlite_database) -> Stack:
    """The API and a conductor worker on one database, with the real Placement."""
    return Stack(placement_conf(placement), sqlite_database)


def fault(response) -> dict:
    return json.loads(response.json["error_message"])


def setup(stack: Stack, hostname: str, functions: int = 1) -> list[str]:
    """Two FPGAs of ``functions`` handles on the host, synced to Placement; a profile of
    one FPGA. The deployables' providers, in the order a claim tries them."""
    stack.report(
        hostname,
        [fpga("0000:5e:00.0", functions=functions), fpga("0000:5f:00.0", functions=functions)],
    )
    stack.run_jobs()
    r = stack.api.post(
        "/v2/device_profiles", [{"name": f"one-{hostname}", "groups": [{"resources:FPGA": "1"}]}]
    )
    assert r.status_code == 201, r.text
    dep, dev = models.deployables, models.devices
    return list(
        stack.db.read(
            lambda conn: conn.execute(
                sa.select(dep.c.rp_uuid)
                .join(dev, dev.c.id == dep.c.device_id)
                .where(dev.c.hostname == hostname)
                .order_by(dep.c.id)
            ).scalars()
        )
    )


def allocations(placement_api, consumer: str) -> dict:
    return placement_api.get(f"/allocations/{consumer}")["allocations"]


def claim(stack: Stack, hostname: str, expect: int = 201):
    r = stack.api.post(CLAIMS, {"device_profile_name": f"one-{hostname}"}, version=V)
    assert r.status_code == expect, r.text
    return r


def test_a_claim_is_allocated_in_placement_and_its_release_deletes_it(
    stack, placement_api, hostname
):
    first, _ = setup(stack, hostname, functions=2)
    made = claim(stack, hostname).json
    (device,) = made["devices"]
    assert device["rp_uuid"] == first
    found = placement_api.get(f"/allocations/{made['uuid']}")
    assert found["allocations"] == {
        first: {"generation": found["allocations"][first]["generation"], "resources": {"FPGA": 1}}
    }
    assert found["project_id"] == made["project_id"] and found["user_id"] == made["user_id"]
    usages = placement_api.get(f"/resource_providers/{first}/usages")["usages"]
    assert usages == {"FPGA": 1}

    r = stack.api.delete(f"{CLAIMS}/{made['uuid']}", version=V)
    assert r.status_code == 204, r.text
    assert [j["payload"] for j in stack.pending("placement_claim_release")] == [
        json.dumps({"consumer": made["uuid"]})
    ]
    assert allocations(placement_api, made["uuid"]) != {}  # not yet: the conductor does it
    stack.run_jobs()
    assert allocations(placement_api, made["uuid"]) == {}
    assert placement_api.get(f"/resource_providers/{first}/usages")["usages"] == {"FPGA": 0}
    # Again (the job ran twice, or the allocation was gone already): still fine.
    r = stack.api.delete(f"{CLAIMS}/{made['uuid']}", version=V)
    assert r.status_code == 204 and stack.pending("placement_claim_release") == []


def test_nova_and_a_claim_never_get_the_same_device(stack, placement_api, hostname):
    """Nova's scheduler allocated the first FPGA (its ARQ not bound yet, so the database
    sees the handle free): the claim is refused there by Placement, gives the handle back
    and takes the second FPGA; Nova's bind then gets the first. A further claim finds
    nothing, and a Nova allocation on the claim's FPGA is refused by Placement."""
    first, second = setup(stack, hostname)
    instance = str(uuid.uuid4())
    placement_api.allocate(instance, first, {"FPGA": 1})

    made = claim(stack, hostname).json
    assert [d["rp_uuid"] for d in made["devices"]] == [second]
    assert set(allocations(placement_api, made["uuid"])) == {second}

    nova = stack.api.as_(PERSONAS["nova"])
    (arq,) = nova.post(ARQS, {"device_profile_name": f"one-{hostname}"}).json["arqs"]
    ops = [
        {"op": "add", "path": "/hostname", "value": hostname},
        {"op": "add", "path": "/device_rp_uuid", "value": first},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]
    r = nova.patch(ARQS, {arq["uuid"]: ops})
    assert r.status_code == 202, r.text
    bound = stack.api.get(f"{ARQS}/{arq['uuid']}", version=V).json
    assert bound["state"] == "Bound"
    assert bound["attach_handle_uuid"] != made["devices"][0]["attach_handle_uuid"]

    r = claim(stack, hostname, expect=409)
    assert fault(r)["code"] == "exosuit.claim.unsatisfiable"
    r = placement_api.request(
        "PUT",
        f"/allocations/{uuid.uuid4()}",
        {
            "allocations": {second: {"resources": {"FPGA": 1}}},
            "project_id": uuid.uuid4().hex,
            "user_id": uuid.uuid4().hex,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    assert r.status_code == 409, r.text
    assert "capacity" in r.text


def test_a_claim_placement_refuses_everywhere_holds_nothing(stack, placement_api, hostname):
    first, second = setup(stack, hostname)
    for rp in (first, second):
        placement_api.allocate(str(uuid.uuid4()), rp, {"FPGA": 1})
    r = claim(stack, hostname, expect=409)
    error = fault(r)
    assert error["code"] == "exosuit.claim.unsatisfiable"
    assert "Placement refused" in error["faultstring"]
    assert first in error["faultstring"] and second in error["faultstring"]
    assert stack.api.get(CLAIMS, version=V).json["claims"] == []
    assert stack.api.get(ARQS, version=V).json["arqs"] == []
    handles = stack.api.get(f"/v2/attach_handles?hostname={hostname}", version=V).json
    assert [h["in_use"] for h in handles["attach_handles"]] == [False, False]


def test_placement_away_is_a_503_holding_nothing(sqlite_database, hostname):
    """Placement configured but not answering: 503, no claim, no handle held, and the
    (unknown) allocation's deletion queued for when it answers."""
    conf = make_test_conf()
    use_placement_url(conf, f"http://127.0.0.1:{free_port()}")
    stack = Stack(conf, sqlite_database)
    stack.report(hostname, [fpga("0000:5e:00.0", functions=1)])
    r = stack.api.post(
        "/v2/device_profiles", [{"name": "one", "groups": [{"resources:FPGA": "1"}]}]
    )
    assert r.status_code == 201
    r = stack.api.post(CLAIMS, {"device_profile_name": "one"}, version=V)
    assert r.status_code == 503, r.text
    assert fault(r)["code"] == "exosuit.placement.unavailable"
    assert "nothing is held" in fault(r)["faultstring"]
    assert r.headers["Retry-After"] == "2"
    assert stack.api.get(CLAIMS, version=V).json["claims"] == []
    handles = stack.api.get(f"/v2/attach_handles?hostname={hostname}", version=V).json
    assert [h["in_use"] for h in handles["attach_handles"]] == [False]
    assert len(stack.pending("placement_claim_release")) == 1
    # The deletion waits for Placement however long it is away: never failed for good.
    for _ in range(8):
        stack.run_jobs(due=True)
    (waiting,) = stack.pending("placement_claim_release")
    assert waiting["attempts"] == 0 and "Placement" in waiting["last_error"]


def test_without_placement_claims_are_in_the_database_only(sqlite_database, hostname):
    stack = Stack(make_test_conf(), sqlite_database)
    stack.report(hostname, [fpga("0000:5e:00.0", functions=1)])
    api = ApiClient(stack.api.app)
    api.post("/v2/device_profiles", [{"name": "one", "groups": [{"resources:FPGA": "1"}]}])
    made = api.post(CLAIMS, {"device_profile_name": "one"}, version=V).json
    assert api.delete(f"{CLAIMS}/{made['uuid']}", version=V).status_code == 204
    assert stack.pending("placement_claim_release") == []
