"""Drain (doc/devices.md, "Drain") with a real Placement: a drained device's providers
are reserved whole, so neither Nova's scheduler nor a claim gets it, while the claim
that holds it keeps its attach handle and its Placement allocation; once released the
device is drained, still reserved; undrained, it is offered again.

The API (in-process) and a real conductor worker share one database (tests/placement/
conftest.py); a standalone claim plays the holder.
"""

from __future__ import annotations

import json

from tests.placement.conftest import fpga, inventory

V = "2.9"
A = "0000:5e:00.0"
B = "0000:5f:00.0"


def _claim(stack, hostname: str, expect: int = 201) -> dict:
    r = stack.api.post("/v2/claims", {"device_profile_name": f"one-{hostname}"}, version=V)
    assert r.status_code == expect, r.text
    return r.json


def _drain(stack, uuid: str, action: str = "drain") -> dict:
    r = stack.api.post(f"/v2/devices/{uuid}/{action}", None, version=V)
    assert r.status_code == 200, r.text
    return r.json


def test_a_drained_device_is_reserved_in_placement_and_refused_while_its_holder_keeps_it(
    stack, placement_api, hostname
):
    stack.report(hostname, [fpga(A, functions=2), fpga(B, functions=2)])
    stack.run_jobs()
    r = stack.api.post(
        "/v2/device_profiles", [{"name": f"one-{hostname}", "groups": [{"resources:FPGA": "1"}]}]
    )
    assert r.status_code == 201, r.text
    providers = stack.deployables(hostname)
    rp_a, rp_b = (next(rp for name, rp in providers.items() if a in name) for a in (A, B))
    device_a, device_b = stack.device_uuid(hostname, A), stack.device_uuid(hostname, B)

    held = _claim(stack, hostname)
    (taken,) = held["devices"]
    assert taken["device_uuid"] == device_a
    assert placement_api.get(f"/allocations/{held['uuid']}")["allocations"] == {
        rp_a: {"resources": {"FPGA": 1}, "generation": placement_api.provider(rp_a)["generation"]}
    }

    answer = _drain(stack, device_a)
    assert (answer["status"], answer["maintenance"]) == ("maintaining", "draining")
    assert [h["claim_uuid"] for h in answer["holders"]] == [held["uuid"]]
    stack.run_jobs()
    # The whole inventory reserved; the holder's allocation untouched.
    assert placement_api.inventories(rp_a) == {"FPGA": inventory(2, reserved=2)}
    assert placement_api.inventories(rp_b) == {"FPGA": inventory(2)}
    assert rp_a in placement_api.get(f"/allocations/{held['uuid']}")["allocations"]
    assert _claim(stack, hostname)["devices"][0]["device_uuid"] == device_b  # not A

    # With B drained too nothing is offered: the next claim is refused and holds nothing.
    _drain(stack, device_b)
    stack.run_jobs()
    assert placement_api.inventories(rp_b) == {"FPGA": inventory(2, reserved=2)}
    refused = stack.api.post("/v2/claims", {"device_profile_name": f"one-{hostname}"}, version=V)
    assert refused.status_code == 409, refused.text
    assert "exosuit." in json.loads(refused.json["error_message"])["code"]

    r = stack.api.delete(f"/v2/claims/{held['uuid']}", version=V)
    assert r.status_code == 204, r.text
    stack.run_jobs()
    shown = stack.api.get(f"/v2/devices/{device_a}", version=V).json
    assert (shown["maintenance"], shown["holders"]) == ("drained", [])
    assert placement_api.get(f"/allocations/{held['uuid']}")["allocations"] == {}
    assert placement_api.inventories(rp_a) == {"FPGA": inventory(2, reserved=2)}  # still

    assert _drain(stack, device_a, "undrain")["maintenance"] is None
    stack.run_jobs()
    assert placement_api.inventories(rp_a) == {"FPGA": inventory(2)}
    assert _claim(stack, hostname)["devices"][0]["device_uuid"] == device_a
