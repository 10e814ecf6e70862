"""Device health (doc/devices.md, "Health") with a real Placement: a device its agent
reports unhealthy has its providers reserved whole after that one report (and its
conductor sync), while the claim that holds it keeps its allocation; it is offered again
once it has been healthy for [health] recover_after (the health_recovery job) or when an
operator clears it.

The API (in-process) and a real conductor worker share one database (tests/placement/
conftest.py); a standalone claim plays the holder.
"""

from __future__ import annotations

import time

import pytest

from exosuit import schemas
from exosuit.conductor import kinds
from exosuit.conductor.worker import schedule_periodic
from tests.helpers.inventory import snapshot
from tests.placement.conftest import Stack, fpga, inventory, placement_conf

V = "2.9"
A = "0000:5e:00.0"
B = "0000:5f:00.0"
SICK = {"state": "unhealthy", "reason": "FPGA port dfl-port.0 has errors latched (0x11)"}
DEADLINE = 60.0


@pytest.fixture
def stack(placement, placement_api, sqlite_database):
    """The stack of tests/placement with [health] recover_after = 1 s."""
    return Stack(placement_conf(placement, **{"health.recover_after": 1}), sqlite_database)


def _recovery_until(stack, done) -> None:
    """Run the conductor's periodic health_recovery job (as a conductor schedules it),
    and the syncs it queues, until ``done()``."""
    registry = kinds.load(stack.conf)
    assert "health_recovery" in registry.periodic
    deadline = time.monotonic() + DEADLINE
    while not done():
        assert time.monotonic() < deadline, "never recovered"
        schedule_periodic(stack.db, stack.conf, registry.periodic, registry.handlers)
        stack.run_jobs(due=True)
        time.sleep(0.2)


def _report(stack, hostname: str, health: dict | None = None) -> None:
    """A's and B's report, A with ``health`` (None: healthy, no health carried)."""
    body = snapshot(hostname, [fpga(A, functions=2), fpga(B, functions=2)])
    for device in body["devices"]:
        if device["pci_address"] == A and health is not None:
            device["health"] = health
    body["hash"] = schemas.snapshot_hash(body["devices"], body.get("driver_errors", []))
    r = stack.api.put(f"/agent/v1/hosts/{hostname}/inventory", body)
    assert r.status_code == 200, r.text


def _claim(stack, hostname: str, expect: int = 201) -> dict:
    r = stack.api.post("/v2/claims", {"device_profile_name": f"one-{hostname}"}, version=V)
    assert r.status_code == expect, r.text
    return r.json


def test_an_unhealthy_device_is_reserved_after_one_report_and_back_after_recovery_or_clear(
    stack, placement_api, hostname
):
    _report(stack, hostname)
    stack.run_jobs()
    r = stack.api.post(
        "/v2/device_profiles", [{"name": f"one-{hostname}", "groups": [{"resources:FPGA": "1"}]}]
    )
    assert r.status_code == 201, r.text
    providers = stack.deployables(hostname)
    rp_a, rp_b = (next(rp for name, rp in providers.items() if a in name) for a in (A, B))
    device_a, device_b = stack.device_uuid(hostname, A), stack.device_uuid(hostname, B)
    held = _claim(stack, hostname)
    assert held["devices"][0]["device_uuid"] == device_a
    assert placement_api.inventories(rp_a) == {"FPGA": inventory(2)}

    # One report: A unhealthy. Its sync reserves it whole; the claim keeps its allocation.
    _report(stack, hostname, SICK)
    stack.run_jobs()
    assert placement_api.inventories(rp_a) == {"FPGA": inventory(2, reserved=2)}
    assert placement_api.inventories(rp_b) == {"FPGA": inventory(2)}
    assert rp_a in placement_api.get(f"/allocations/{held['uuid']}")["allocations"]
    shown = stack.api.get(f"/v2/devices/{device_a}", version=V).json
    assert (shown["health"]["state"], shown["health"]["offered"]) == ("unhealthy", False)
    assert [h["claim_uuid"] for h in shown["holders"]] == [held["uuid"]]
    assert _claim(stack, hostname)["devices"][0]["device_uuid"] == device_b  # not A

    # Healthy again: still reserved until recover_after has passed.
    _report(stack, hostname)
    stack.run_jobs()
    assert placement_api.inventories(rp_a) == {"FPGA": inventory(2, reserved=2)}
    _recovery_until(stack, lambda: placement_api.inventories(rp_a) == {"FPGA": inventory(2)})
    shown = stack.api.get(f"/v2/devices/{device_a}", version=V).json
    assert (shown["health"]["state"], shown["health"]["offered"]) == ("ok", True)

    # Unhealthy again, then cleared by an operator: back at once.
    _report(stack, hostname, SICK)
    stack.run_jobs()
    assert placement_api.inventories(rp_a) == {"FPGA": inventory(2, reserved=2)}
    r = stack.api.post(f"/v2/devices/{device_a}/health", {"clear": True}, version=V)
    assert r.status_code == 200, r.text
    assert (r.json["state"], r.json["offered"]) == ("unhealthy", True)
    stack.run_jobs()
    assert placement_api.inventories(rp_a) == {"FPGA": inventory(2)}
    assert _claim(stack, hostname)["devices"][0]["device_uuid"] == device_a
