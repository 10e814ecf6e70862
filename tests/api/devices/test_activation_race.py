"""Marking a device inactive races binds of its attach handles (doc/devices.md): either
the device goes deactivating and no handle of it is held, or the request is refused in
use (409 naming a holder) and the binds that won hold their handles. Never both, never a
500. Over real HTTP (cheroot, as exosuit serve runs the API), on SQLite, PostgreSQL and
MariaDB."""

from __future__ import annotations

import uuid

from tests.db.test_bind_concurrency import (  # noqa: F401 (http_api: a fixture)
    HttpApi,
    assert_consistent,
    bind_ops,
    fault,
    held_handles,
    http_api,
    later,
    storm,
)
from tests.helpers.inventory import fpga, snapshot

HOST = "race-host"
PCI = "0000:5e:00.0"
BINDS = 16
# (when the inactive request starts, when the first bind starts), per round (seconds).
ROUNDS = ((0.0, 0.05), (0.05, 0.0), (0.02, 0.01), (0.1, 0.0))


def _desired(api: HttpApi) -> dict:
    return api.ok("GET", f"/agent/v1/hosts/{HOST}/desired_state")


def _activation(api: HttpApi, device: str) -> str:
    status, body = api.call("GET", f"/v2/devices/{device}", version="2.7")
    assert status == 200, body
    return body["activation"]


def _step(api: HttpApi, device: str, action: str) -> None:
    """The agent's outcome of the step its desired state asks for the device: done."""
    (step,) = [a for a in _desired(api)["activations"] if a["device"] == device]
    assert step["action"] == action
    body = {"action": action, "generation": step["generation"], "state": "done"}
    api.ok("PUT", f"/agent/v1/hosts/{HOST}/activations/{device}", body)


def _activate(api: HttpApi, device: str, state: str) -> tuple[int, object]:
    body = {"state": state, "uuids": [device]}
    return api.call("POST", "/v2/device_activations", body, version="2.7")


def test_inactive_races_binds_never_both(http_api, database):  # noqa: F811 (the fixture)
    api = http_api
    api.ok("PUT", f"/agent/v1/hosts/{HOST}/inventory", snapshot(HOST, [fpga(PCI, handles=BINDS)]))
    (device,) = api.ok("GET", "/v2/devices")["devices"]
    (deployable,) = api.ok("GET", "/v2/deployables")["deployables"]
    api.ok(
        "POST",
        "/v2/device_profiles",
        [{"name": "race", "groups": [{"resources:FPGA": str(BINDS)}]}],
        expect=201,
    )
    arqs = [
        a["uuid"]
        for a in api.ok(
            "POST", "/v2/accelerator_requests", {"device_profile_name": "race"}, expect=201
        )["arqs"]
    ]
    for inactive_at, binds_at in ROUNDS:
        assert _activate(api, device["uuid"], "ready")[0] == 202
        _step(api, device["uuid"], "install")
        calls = [later(inactive_at, lambda: _activate(api, device["uuid"], "inactive"))]
        calls += [
            later(
                binds_at + i * 0.1 / BINDS,
                lambda u=u: api.call(
                    "PATCH",
                    "/v2/accelerator_requests",
                    {u: bind_ops(deployable["rp_uuid"], str(uuid.uuid4()), HOST)},
                ),
            )
            for i, u in enumerate(arqs)
        ]
        results = storm(calls)
        (status, answer), binds = results[0], results[1:]
        assert status in (202, 409), results[0]
        assert {s for s, _ in binds} <= {202, 409}, binds
        won = {u for u, (s, _) in zip(arqs, binds, strict=True) if s == 202}
        assert_consistent(api, database, expect_bound=len(won))
        in_use, _ = held_handles(database)
        if status == 202:
            assert answer["devices"][0]["activation"] == "deactivating", answer
            assert not won and in_use == 0, results
            assert _activation(api, device["uuid"]) == "deactivating"
            _step(api, device["uuid"], "uninstall")
        else:
            error = fault(answer)
            assert error["code"] == "exosuit.device.in_use", error
            assert won and in_use == len(won)
            assert any(u in error["faultstring"] for u in won)
            assert _activation(api, device["uuid"]) == "ready"
            unbind = {u: [{"op": "remove", "path": "/hostname"}] for u in arqs}
            api.ok("PATCH", "/v2/accelerator_requests", unbind, expect=202)
            assert _activate(api, device["uuid"], "inactive")[0] == 202
            _step(api, device["uuid"], "uninstall")
        assert _activation(api, device["uuid"]) == "inactive"
