"""No two ARQs ever hold one attach handle: bind storms over real HTTP, on every backend.

The API runs in a threaded HTTP server (cheroot, as ``exosuit serve`` runs it)
on a free loopback port; 64 client threads, released together by a barrier,
each send one PATCH bind for 16 free attach handles. Exactly 16 must win, the
other 48 must get a 409 that says why, and the database must show each handle
held at most once. Further storms race binds against each other on one ARQ,
against unbinds and deletes of the current holders, and against an agent
report that removes the device or some of its handles, and an operator's program
(or binds that program the device) against binds of the same device: never both a
held handle and a running program.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from collections import Counter

import pytest
import sqlalchemy as sa
from cheroot import wsgi as cheroot_wsgi

from exosuit.api.deploy import loadapp
from exosuit.db import images as images_db
from exosuit.db import models
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.programs import programmable_fpga

HOST = "storm-host"
HANDLES = 16
CLIENTS = 64
ROUNDS = 3
NO_FREE_HANDLE = "no free attach handle on deployable"
# When the agent's report starts, per round, after the binds start (seconds): early
# enough to land among them, at different points.
REPORT_DELAYS = (0.02, 0.05)


class HttpApi:
    """A tiny HTTP client for the API at 127.0.0.1:port: one connection per call."""

    def __init__(self, port: int) -> None:
        self.port = port

    def call(
        self, method: str, path: str, body=None, version: str | None = None
    ) -> tuple[int, object]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            headers = {"Accept": "application/json"}
            if version is not None:
                headers["OpenStack-API-Version"] = f"accelerator {version}"
            payload = None
            if body is not None:
                payload = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
        finally:
            conn.close()

    def ok(self, method: str, path: str, body=None, expect: int = 200):
        status, data = self.call(method, path, body)
        assert status == expect, (method, path, status, data)
        return data


def fault(body) -> dict:
    """The inner fault of Cyborg's error envelope."""
    return json.loads(body["error_message"])


@pytest.fixture
def http_api(conf, database):
    """The API served over real HTTP by cheroot with enough threads for the storm."""
    app = loadapp(conf, database)
    server = cheroot_wsgi.Server(
        ("127.0.0.1", 0),
        app,
        numthreads=CLIENTS + 8,
        server_name="exosuit-test",
        request_queue_size=CLIENTS * 2,
    )
    server.prepare()
    thread = threading.Thread(target=server.serve, name="cheroot", daemon=True)
    thread.start()
    try:
        yield HttpApi(server.bind_addr[1])
    finally:
        server.stop()
        thread.join(timeout=10)


def seed(api: HttpApi, arqs: int) -> tuple[str, list[str]]:
    """One host, one FPGA deployable with 16 handles, ``arqs`` ARQs in state Initial."""
    api.ok(
        "PUT",
        f"/agent/v1/hosts/{HOST}/inventory",
        snapshot(HOST, [fpga("0000:5e:00.0", handles=HANDLES)]),
    )
    (deployable,) = api.ok("GET", "/v2/deployables")["deployables"]
    # One group asking for ``arqs`` units: one POST makes that many ARQs.
    api.ok(
        "POST",
        "/v2/device_profiles",
        [{"name": "storm", "groups": [{"resources:FPGA": str(arqs)}]}],
        expect=201,
    )
    created = api.ok(
        "POST", "/v2/accelerator_requests", {"device_profile_name": "storm"}, expect=201
    )["arqs"]
    assert len(created) == arqs and {a["state"] for a in created} == {"Initial"}
    return deployable["rp_uuid"], [a["uuid"] for a in created]


def bind_ops(rp_uuid: str, instance: str, hostname: str = HOST) -> list[dict]:
    return [
        {"op": "add", "path": "/hostname", "value": hostname},
        {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]


def storm(calls: list) -> list[tuple[int, object]]:
    """Run every ``call()`` in its own thread, released together; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(index: int, call) -> None:
        barrier.wait()
        try:
            results[index] = call()
        except Exception as error:  # reported by the assertions below
            results[index] = (None, repr(error))

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not any(t.is_alive() for t in threads), "a client thread hung"
    return results


def later(delay: float, call):
    """``call`` that first sleeps ``delay`` seconds (after the barrier releases it)."""

    def run():
        time.sleep(delay)
        return call()

    return run


def arqs_by_uuid(api: HttpApi) -> dict[str, dict]:
    return {a["uuid"]: a for a in api.ok("GET", "/v2/accelerator_requests")["arqs"]}


def held_handles(database) -> tuple[int, list[int]]:
    """(attach handles in use, attach_handle_id of every ARQ that has one)."""
    ah, arq = models.attach_handles, models.accelerator_requests
    with database.reader() as conn:
        in_use = conn.execute(
            sa.select(sa.func.count()).select_from(ah).where(ah.c.in_use.is_(True))
        ).scalar()
        ids = list(
            conn.execute(
                sa.select(arq.c.attach_handle_id).where(arq.c.attach_handle_id.is_not(None))
            ).scalars()
        )
    return in_use, ids


def assert_consistent(api: HttpApi, database, expect_bound: int | None = None) -> dict:
    """Every Bound ARQ holds its own handle, and the handles in use are exactly those."""
    arqs = arqs_by_uuid(api)
    bound = [a for a in arqs.values() if a["state"] == "Bound"]
    if expect_bound is not None:
        assert len(bound) == expect_bound
    handles = [a["attach_handle_uuid"] for a in bound]
    assert None not in handles
    assert len(set(handles)) == len(handles), Counter(handles).most_common(3)
    in_use, ids = held_handles(database)
    assert len(ids) == len(set(ids)) == len(bound)
    assert in_use == len(bound)
    return arqs


def test_bind_storm_64_clients_16_handles(http_api, database):
    """64 concurrent binds for 16 handles: 16 x 202, 48 x 409 saying why, no double hold."""
    rp_uuid, uuids = seed(http_api, CLIENTS)
    for round_number in range(ROUNDS):
        instances = {u: str(uuid.uuid4()) for u in uuids}
        results = storm(
            [
                (
                    lambda u=u, i=instances[u]: http_api.call(
                        "PATCH", "/v2/accelerator_requests", {u: bind_ops(rp_uuid, i)}
                    )
                )
                for u in uuids
            ]
        )
        statuses = Counter(status for status, _ in results)
        assert statuses == {202: HANDLES, 409: CLIENTS - HANDLES}, (round_number, results)
        won = {u for u, (status, _) in zip(uuids, results, strict=True) if status == 202}
        for u, (status, body) in zip(uuids, results, strict=True):
            if status == 409:
                error = fault(body)
                assert error["code"] == "exosuit.arq.bind_failed"
                assert u in error["faultstring"]
                assert NO_FREE_HANDLE in error["faultstring"]

        arqs = assert_consistent(http_api, database, expect_bound=HANDLES)
        assert Counter(a["state"] for a in arqs.values()) == {
            "Bound": HANDLES,
            "BindFailed": CLIENTS - HANDLES,
        }
        assert {u for u, a in arqs.items() if a["state"] == "Bound"} == won
        for u in won:
            assert arqs[u]["instance_uuid"] == instances[u]
            assert arqs[u]["device_rp_uuid"] == rp_uuid
            assert arqs[u]["attach_handle_type"] == "TEST_PCI"

        # Unbind everything for the next round: every handle comes back.
        http_api.ok(
            "PATCH",
            "/v2/accelerator_requests",
            {u: [{"op": "remove", "path": "/hostname"}] for u in uuids},
            expect=202,
        )
        arqs = assert_consistent(http_api, database, expect_bound=0)
        assert {a["state"] for a in arqs.values()} == {"Unbound"}


def test_one_arq_64_binders(http_api, database):
    """64 clients bind the same ARQ for different instances: one wins, 63 get a 409."""
    rp_uuid, (target,) = seed(http_api, 1)
    instances = [str(uuid.uuid4()) for _ in range(CLIENTS)]
    results = storm(
        [
            (
                lambda i=i: http_api.call(
                    "PATCH", "/v2/accelerator_requests", {target: bind_ops(rp_uuid, i)}
                )
            )
            for i in instances
        ]
    )
    statuses = Counter(status for status, _ in results)
    assert statuses == {202: 1, 409: CLIENTS - 1}, results
    for status, body in results:
        if status == 409:
            assert fault(body)["code"] == "exosuit.arq.bad_state"
    winner = next(i for i, (s, _) in zip(instances, results, strict=True) if s == 202)
    arqs = assert_consistent(http_api, database, expect_bound=1)
    assert arqs[target]["instance_uuid"] == winner


def test_mixed_storm_bind_unbind_delete(http_api, database):
    """Binds race against unbinds and deletes of the current holders.

    16 ARQs hold the 16 handles; concurrently 8 of them are deleted, 8 unbound,
    and 48 other ARQs try to bind. Which binds win depends on timing, so the
    assertions are the invariants: every request gets its expected answer, the
    winners hold distinct handles, and afterwards the free handles are exactly
    those nobody holds (a sequential refill binds exactly 16 ARQs in all).
    """
    rp_uuid, uuids = seed(http_api, CLIENTS)
    holders, binders = uuids[:HANDLES], uuids[HANDLES:]
    http_api.ok(
        "PATCH",
        "/v2/accelerator_requests",
        {u: bind_ops(rp_uuid, str(uuid.uuid4())) for u in holders},
        expect=202,
    )
    assert_consistent(http_api, database, expect_bound=HANDLES)
    to_delete, to_unbind = holders[:8], holders[8:]

    calls = [
        (lambda u=u: http_api.call("DELETE", f"/v2/accelerator_requests/{u}")) for u in to_delete
    ]
    calls += [
        (
            lambda u=u: http_api.call(
                "PATCH",
                "/v2/accelerator_requests",
                {u: [{"op": "remove", "path": "/instance_uuid"}]},
            )
        )
        for u in to_unbind
    ]
    calls += [
        (
            lambda u=u: http_api.call(
                "PATCH", "/v2/accelerator_requests", {u: bind_ops(rp_uuid, str(uuid.uuid4()))}
            )
        )
        for u in binders
    ]
    results = storm(calls)
    delete_results = results[:8]
    unbind_results = results[8:HANDLES]
    bind_results = results[HANDLES:]
    assert [s for s, _ in delete_results] == [204] * 8, delete_results
    assert [s for s, _ in unbind_results] == [202] * 8, unbind_results
    assert {s for s, _ in bind_results} <= {202, 409}, bind_results
    for status, body in bind_results:
        if status == 409:
            assert NO_FREE_HANDLE in fault(body)["faultstring"]
    won = [u for u, (s, _) in zip(binders, bind_results, strict=True) if s == 202]
    assert len(won) <= HANDLES

    arqs = assert_consistent(http_api, database, expect_bound=len(won))
    assert not set(to_delete) & set(arqs)
    assert all(arqs[u]["state"] == "Unbound" for u in to_unbind)
    assert {u for u, a in arqs.items() if a["state"] == "Bound"} == set(won)

    # Refill: one PATCH binds every other ARQ; exactly the free handles are taken and
    # the 409 names each bind that found none.
    rest = [u for u in arqs if arqs[u]["state"] != "Bound"]
    http_api.ok(
        "PATCH",
        "/v2/accelerator_requests",
        {u: [{"op": "remove", "path": "/hostname"}] for u in rest},
        expect=202,
    )
    status, body = http_api.call(
        "PATCH", "/v2/accelerator_requests", {u: bind_ops(rp_uuid, str(uuid.uuid4())) for u in rest}
    )
    assert status == 409, body
    free = HANDLES - len(won)
    arqs = assert_consistent(http_api, database, expect_bound=HANDLES)
    failed = [u for u in rest if arqs[u]["state"] == "BindFailed"]
    assert len(failed) == len(rest) - free
    message = fault(body)["faultstring"]
    assert all(u in message for u in failed)
    assert message.count(NO_FREE_HANDLE) == len(failed)


def _device(api: HttpApi) -> dict | None:
    status, body = api.call("GET", f"/v2/devices?hostname={HOST}", None, version="2.4")
    assert status == 200, body
    devices = body["devices"]
    assert len(devices) <= 1
    return devices[0] if devices else None


@pytest.mark.parametrize("handles_left", [0, 8], ids=["device-removed", "handles-removed"])
def test_agent_snapshot_races_bind_storm(http_api, database, handles_left):
    """An agent report that removes the device (or half its handles) races 48 binds.

    Whatever the order, the report is applied (200, never a 500), every bind
    gets 202 or a 409 that says why, no handle is held twice, a held handle is
    never deleted, and a removed device with held handles is kept as ``lost``.
    """
    rp_uuid, uuids = seed(http_api, 48)
    for attempt, delay in enumerate(REPORT_DELAYS):
        if attempt:  # the device comes back whole; every ARQ starts over
            http_api.ok(
                "PATCH",
                "/v2/accelerator_requests",
                {u: [{"op": "remove", "path": "/hostname"}] for u in uuids},
                expect=202,
            )
            http_api.ok(
                "PUT",
                f"/agent/v1/hosts/{HOST}/inventory",
                snapshot(HOST, [fpga("0000:5e:00.0", handles=HANDLES)]),
            )
            assert_consistent(http_api, database, expect_bound=0)
        devices = [fpga("0000:5e:00.0", handles=handles_left)] if handles_left else []
        report = snapshot(HOST, devices)
        # Binds spread over 0.4 s, the report sent at a different moment each round, so
        # that it lands among them.
        calls = [
            later(
                delay,
                lambda report=report: http_api.call(
                    "PUT", f"/agent/v1/hosts/{HOST}/inventory", report
                ),
            )
        ]
        calls += [
            later(
                i * 0.4 / len(uuids),
                lambda u=u: http_api.call(
                    "PATCH", "/v2/accelerator_requests", {u: bind_ops(rp_uuid, str(uuid.uuid4()))}
                ),
            )
            for i, u in enumerate(uuids)
        ]
        results = storm(calls)
        assert results[0][0] == 200, results[0]
        binds = results[1:]
        assert {s for s, _ in binds} <= {202, 409}, binds
        for status, body in binds:
            if status == 409:
                assert fault(body)["code"] == "exosuit.arq.bind_failed", body
        won = {u for u, (s, _) in zip(uuids, binds, strict=True) if s == 202}
        arqs = assert_consistent(http_api, database, expect_bound=len(won))
        assert len(won) <= HANDLES

        with database.reader() as conn:
            ah = models.attach_handles
            rows = conn.execute(sa.select(ah.c.uuid, ah.c.in_use, ah.c.attach_info)).all()
        held = {arqs[u]["attach_handle_uuid"] for u in won}
        assert {r.uuid for r in rows if r.in_use} == held
        device = _device(http_api)
        if handles_left:
            # The reported handles, plus those removed from the report but still held.
            reported = {
                json.dumps(h.attach_info, sort_keys=True, separators=(",", ":"))
                for d in devices
                for dp in d.deployables
                for h in dp.attach_handles
            }
            assert {r.uuid for r in rows if r.attach_info not in reported} <= held
            assert len([r for r in rows if r.attach_info in reported]) == handles_left
            assert device["presence"] == "present"
        elif won:
            # Gone from the host while held: kept as lost, naming every holder.
            assert device["presence"] == "lost"
            for u in won:
                assert u in device["presence_reason"]
        else:
            assert device is None and rows == []


def test_binds_race_unbinds_and_deletes_of_the_same_arqs(http_api, database):
    """Each ARQ is bound while, at the same moment, it is unbound or deleted.

    Whichever wins, no handle may leak: when everything is deleted, no attach
    handle is still in use.
    """
    rp_uuid, _ = seed(http_api, 1)
    for _round in range(2):
        created = http_api.ok(
            "POST", "/v2/accelerator_requests", {"device_profile_name": "storm"}, expect=201
        )["arqs"]
        uuids = [a["uuid"] for a in created]
        while len(uuids) < HANDLES:
            uuids += [
                a["uuid"]
                for a in http_api.ok(
                    "POST", "/v2/accelerator_requests", {"device_profile_name": "storm"}, expect=201
                )["arqs"]
            ]
        calls = []
        for i, u in enumerate(uuids):
            calls.append(
                lambda u=u: http_api.call(
                    "PATCH", "/v2/accelerator_requests", {u: bind_ops(rp_uuid, str(uuid.uuid4()))}
                )
            )
            if i % 2:
                calls.append(lambda u=u: http_api.call("DELETE", f"/v2/accelerator_requests/{u}"))
            else:
                calls.append(
                    lambda u=u: http_api.call(
                        "PATCH",
                        "/v2/accelerator_requests",
                        {u: [{"op": "remove", "path": "/hostname"}]},
                    )
                )
        results = storm(calls)
        for i in range(len(uuids)):
            bind_status, other_status = results[2 * i][0], results[2 * i + 1][0]
            if i % 2:
                assert other_status == 204, results[2 * i + 1]
                assert bind_status in (202, 404), results[2 * i]
            else:
                assert other_status == 202, results[2 * i + 1]
                assert bind_status == 202, results[2 * i]
        assert_consistent(http_api, database)
        http_api.ok(
            "DELETE",
            "/v2/accelerator_requests?arqs="
            + ",".join(u for i, u in enumerate(uuids) if not i % 2),
            expect=204,
        )
        assert_consistent(http_api, database, expect_bound=0)


# -- programs racing binds (doc/programming.md) -----------------------------------------------

# (when the program is sent, when the binds start), per round, after the barrier: the
# program ahead of the binds, then landing among them at different points.
PROGRAM_ROUNDS = ((0.0, 0.1), (0.0, 0.0), (0.02, 0.0), (0.05, 0.0), (0.1, 0.0))
PROGRAM_BINDS = 24


def program_path(deployable: str) -> str:
    return f"/v2/deployables/{deployable}/program"


def program_body(image: str) -> list:
    return [{"path": "/program", "op": "replace", "value": [{"image_uuid": image}]}]


def public_image(database) -> str:
    """An active public image of the catalogue (its rows; no data needed to queue it)."""
    row = database.write(
        images_db.create, name="storm", format="simulated", owner="admin", visibility="public"
    )
    database.write(images_db.activate, row["uuid"], size=4, sha256="0" * 64)
    return row["uuid"]


def seed_programmable(api: HttpApi, database, arqs: int, groups=None) -> tuple[dict, list[str]]:
    """One programmable FPGA (16 handles), ``arqs`` ARQs of a profile (``groups``)."""
    api.ok(
        "PUT",
        f"/agent/v1/hosts/{HOST}/inventory",
        snapshot(HOST, [programmable_fpga("0000:5e:00.0", handles=HANDLES, hostname=HOST)]),
    )
    (deployable,) = api.ok("GET", "/v2/deployables")["deployables"]
    groups = groups or [{"resources:FPGA": str(arqs)}]
    api.ok("POST", "/v2/device_profiles", [{"name": "storm", "groups": groups}], expect=201)
    created = api.ok(
        "POST", "/v2/accelerator_requests", {"device_profile_name": "storm"}, expect=201
    )["arqs"]
    return deployable, [a["uuid"] for a in created]


def programs_running(database) -> list[str]:
    dep = models.deployables
    with database.reader() as conn:
        return list(
            conn.execute(sa.select(dep.c.program_uuid).where(dep.c.program_uuid.is_not(None)))
            .scalars()
            .all()
        )


def end_program(api: HttpApi, program: str) -> None:
    """The agent fails it, the previous (no) image kept: the device is as before."""
    body = {"state": "failed", "reason": "storm", "restored": True}
    api.ok("PUT", f"/agent/v1/hosts/{HOST}/programs/{program}", body)


def test_an_operator_program_races_binds_never_both(http_api, database):
    """An operator's program lands among 24 binds of the device's handles, at a
    different moment each round: either the program runs and no handle is held, or it
    is refused in use (409 naming a holder) and binds won. Never both, never a 500."""
    deployable, uuids = seed_programmable(http_api, database, PROGRAM_BINDS)
    image = public_image(database)
    for delay, binds_after in PROGRAM_ROUNDS:
        calls = [
            later(
                delay,
                lambda: http_api.call(
                    "PATCH", program_path(deployable["uuid"]), program_body(image), version="2.6"
                ),
            )
        ]
        calls += [
            later(
                binds_after + i * 0.2 / len(uuids),
                lambda u=u: http_api.call(
                    "PATCH",
                    "/v2/accelerator_requests",
                    {u: bind_ops(deployable["rp_uuid"], str(uuid.uuid4()))},
                ),
            )
            for i, u in enumerate(uuids)
        ]
        results = storm(calls)
        (program_status, program_answer), binds = results[0], results[1:]
        assert program_status in (202, 409), results[0]
        assert {s for s, _ in binds} <= {202, 409}, binds
        for status, body in binds:
            if status == 409:
                assert fault(body)["code"] == "exosuit.arq.bind_failed", body
        won = {u for u, (s, _) in zip(uuids, binds, strict=True) if s == 202}
        assert_consistent(http_api, database, expect_bound=len(won))
        in_use, _ = held_handles(database)
        running = programs_running(database)
        if program_status == 202:
            program = program_answer["program"]
            assert running == [program["uuid"]] and in_use == 0 and not won, results
            end_program(http_api, program["uuid"])
        else:
            error = fault(program_answer)
            assert error["code"] == "exosuit.program.in_use", error
            assert running == [] and won and in_use == len(won)
            assert any(u in error["faultstring"] for u in won)
        assert programs_running(database) == []
        http_api.ok(
            "PATCH",
            "/v2/accelerator_requests",
            {u: [{"op": "remove", "path": "/hostname"}] for u in uuids},
            expect=202,
        )


def test_binds_that_program_race_plain_binds(http_api, database):
    """Binds whose group asks for an image race binds that ask for none, on one
    device: at most one program runs, and then its ARQ holds the only handle held."""
    image = public_image(database)
    groups = [{"resources:FPGA": "1", "accel:bitstream_id": image}, {"resources:FPGA": "1"}]
    deployable, _ = seed_programmable(http_api, database, 2, groups)
    for _round in range(2):
        pairs = [
            http_api.ok(
                "POST", "/v2/accelerator_requests", {"device_profile_name": "storm"}, expect=201
            )["arqs"]
            for _ in range(8)
        ]
        uuids = [a["uuid"] for pair in pairs for a in pair]
        results = storm(
            [
                lambda u=u: http_api.call(
                    "PATCH",
                    "/v2/accelerator_requests",
                    {u: bind_ops(deployable["rp_uuid"], str(uuid.uuid4()))},
                )
                for u in uuids
            ]
        )
        assert {s for s, _ in results} <= {202, 409}, results
        arqs = arqs_by_uuid(http_api)
        running = programs_running(database)
        assert len(running) <= 1
        in_use, holders = held_handles(database)
        if running:
            waiting = [u for u in uuids if arqs[u]["state"] == "BindStarted"]
            assert len(waiting) == 1 and in_use == 1 and len(holders) == 1
            assert not [u for u in uuids if arqs[u]["state"] == "Bound"]
            end_program(http_api, running[0])
        else:
            assert_consistent(http_api, database)
        assert programs_running(database) == []
        http_api.ok("DELETE", "/v2/accelerator_requests?arqs=" + ",".join(uuids), expect=204)
        assert held_handles(database) == (0, [])
