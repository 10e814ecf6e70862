"""No attach handle is ever given to two holders: claim storms over real HTTP (cheroot, as
``exosuit serve`` runs the API), on SQLite, PostgreSQL and MariaDB.

64 clients, released together by a barrier, each POST one claim of a one-device profile
while 16 attach handles are free (on two FPGAs, so that a claim that loses a handle on
one tries the other): exactly 16 claims are made, the 48 others get 409
``exosuit.claim.unsatisfiable`` and hold nothing. Then every claim is released twice at
once: every DELETE answers 204, and nothing is held any more. A storm of two-device
claims checks all or nothing: a claim holds both its devices or none.
"""

from __future__ import annotations

from collections import Counter

import sqlalchemy as sa

from exosuit.db import models
from tests.db.test_bind_concurrency import (  # noqa: F401 (http_api: a fixture)
    HttpApi,
    fault,
    held_handles,
    http_api,
    storm,
)
from tests.helpers.inventory import fpga, snapshot

HOST = "claim-storm-host"
CLIENTS = 64
HANDLES_PER_FPGA = 8
ROUNDS = 2
V = "2.8"


def seed(api: HttpApi) -> None:
    """One host, two FPGAs of 8 attach handles; profiles of one and two FPGAs."""
    devices = [
        fpga("0000:5e:00.0", handles=HANDLES_PER_FPGA),
        fpga("0000:5f:00.0", handles=HANDLES_PER_FPGA),
    ]
    api.ok("PUT", f"/agent/v1/hosts/{HOST}/inventory", snapshot(HOST, devices))
    for name, units in (("one", "1"), ("two", "2")):
        body = [{"name": name, "groups": [{"resources:FPGA": units}]}]
        api.ok("POST", "/v2/device_profiles", body, expect=201)


def claim(api: HttpApi, profile: str):
    return lambda: api.call("POST", "/v2/claims", {"device_profile_name": profile}, version=V)


def release(api: HttpApi, uuid: str):
    return lambda: api.call("DELETE", f"/v2/claims/{uuid}", version=V)


def live_claims(api: HttpApi) -> list[dict]:
    status, body = api.call("GET", "/v2/claims?state=pending,bound,failed&limit=1000", version=V)
    assert status == 200, body
    return body["claims"]


def claimed_arqs(database) -> list[tuple[int, int | None]]:
    """(claim_id, attach_handle_id) of every ARQ in the database."""
    arq = models.accelerator_requests
    with database.reader() as conn:
        return [tuple(r) for r in conn.execute(sa.select(arq.c.claim_id, arq.c.attach_handle_id))]


def assert_held_by(api: HttpApi, database, claims: list[dict], per_claim: int) -> None:
    """Exactly the handles of ``claims`` are held, each by one of their ARQs, each claim
    holding ``per_claim`` handles (all or nothing)."""
    handles = [d["attach_handle_uuid"] for c in claims for d in c["devices"]]
    assert None not in handles
    assert len(set(handles)) == len(handles), Counter(handles).most_common(3)
    assert all(len(c["devices"]) == per_claim for c in claims), claims
    assert {c["state"] for c in claims} <= {"bound"}
    in_use, ids = held_handles(database)
    assert in_use == len(ids) == len(set(ids)) == len(handles)
    arqs = claimed_arqs(database)
    assert len(arqs) == len(handles)  # no ARQ left behind by a claim that lost
    assert all(claim_id is not None and handle is not None for claim_id, handle in arqs)


def test_claim_storm_64_clients_16_handles(http_api, database):  # noqa: F811 (the fixture)
    """64 concurrent claims for 16 handles: 16 x 201, 48 x 409 holding nothing; then
    concurrent double releases all 204, and nothing held."""
    api = http_api
    seed(api)
    handles = 2 * HANDLES_PER_FPGA
    for _ in range(ROUNDS):
        results = storm([claim(api, "one") for _ in range(CLIENTS)])
        statuses = Counter(status for status, _ in results)
        assert statuses == {201: handles, 409: CLIENTS - handles}, results
        for status, body in results:
            if status == 409:
                error = fault(body)
                assert error["code"] == "exosuit.claim.unsatisfiable", error
                assert "nothing is held" in error["faultstring"], error
        made = [body for status, body in results if status == 201]
        claims = live_claims(api)
        assert sorted(c["uuid"] for c in claims) == sorted(c["uuid"] for c in made)
        assert_held_by(api, database, claims, per_claim=1)

        released = storm([release(api, c["uuid"]) for c in made for _ in range(2)])
        assert {status for status, _ in released} == {204}, released
        assert live_claims(api) == []
        assert held_handles(database) == (0, [])
        assert claimed_arqs(database) == []
        for c in made:
            status, body = api.call("GET", f"/v2/claims/{c['uuid']}", version=V)
            assert (status, body["state"], body["devices"]) == (200, "released", [])


def test_two_device_claims_hold_both_or_nothing(http_api, database):  # noqa: F811
    """64 concurrent claims of two devices each for 16 handles: no handle held twice, every
    claim made holds two, the others hold none (at most 8 are made)."""
    api = http_api
    seed(api)
    results = storm([claim(api, "two") for _ in range(CLIENTS)])
    statuses = Counter(status for status, _ in results)
    assert set(statuses) <= {201, 409}, results
    assert 1 <= statuses[201] <= HANDLES_PER_FPGA
    claims = live_claims(api)
    assert len(claims) == statuses[201]
    assert_held_by(api, database, claims, per_claim=2)
    # What the losers left is free: claims made now get it, up to the 16 handles.
    while True:
        status, body = api.call("POST", "/v2/claims", {"device_profile_name": "two"}, version=V)
        if status != 201:
            assert status == 409, body
            break
    assert_held_by(api, database, live_claims(api), per_claim=2)
    assert held_handles(database)[0] == 2 * HANDLES_PER_FPGA


def test_concurrent_claims_of_one_consumer_make_one_claim(http_api, database):  # noqa: F811
    """16 clients claim for the same consumer at once: one claim is made, every answer
    is that claim, one handle is held."""
    api = http_api
    seed(api)
    body = {"device_profile_name": "one", "consumer": "k8s:ns/pod/uid"}
    results = storm([lambda: api.call("POST", "/v2/claims", body, version=V) for _ in range(16)])
    assert {status for status, _ in results} == {201}, results
    assert len({body["uuid"] for _, body in results}) == 1
    claims = live_claims(api)
    assert len(claims) == 1
    assert_held_by(api, database, claims, per_claim=1)
