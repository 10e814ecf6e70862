"""``exosuit device health`` (API 2.9, doc/devices.md "Health") against a real
``exosuit serve``: a fault injected through the simulated driver's fault file makes its
GPU unhealthy at the next discovery, held back from every offer (a claim refused), then
healthy again but still held back until ``--clear``; ``--hold`` holds a device back by
hand."""

from __future__ import annotations

import json
import time
import uuid

from tests.cli.conftest import HOST

V = "2.9"
DEADLINE = 60.0


def _gpu(api) -> dict:
    """The simulated GPU of exosuit serve's host (its address is seeded by host name)."""
    return next(d for d in api.list("/v2/devices", "devices", version=V) if d["type"] == "GPU")


def _inject(server, faults: dict) -> None:
    """Write the simulated driver's fault file (``{}``: no fault)."""
    folder = server.data_dir / "agent" / "drivers" / "simulated"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "health.json").write_text(json.dumps(faults))


def _rediscover_until(cli, api, wanted) -> dict:
    """Ask the agent to discover now until the GPU's health is as ``wanted`` says."""
    deadline = time.monotonic() + DEADLINE
    while True:
        cli.run("discover-services", "--host", HOST, "--wait")
        found = _gpu(api)
        if wanted(found["health"]):
            return found
        assert time.monotonic() < deadline, found["health"]
        time.sleep(0.5)


def test_a_simulated_fault_holds_the_gpu_back_until_cleared(server, cli, api):
    gpu = _gpu(api)
    rows = cli.json("device", "health")
    assert {r["uuid"]: r["state"] for r in rows}[gpu["uuid"]] == "ok"
    assert all(r["offered"] for r in rows)

    _inject(server, {"nvidia_gpu": {"state": "unhealthy", "reason": "injected: XID 79"}})
    _rediscover_until(cli, api, lambda h: h["state"] == "unhealthy")
    (row,) = cli.json("device", "health", gpu["uuid"])
    assert (row["state"], row["reason"], row["offered"], row["held_by"]) == (
        "unhealthy",
        "injected: XID 79",
        False,
        "agent",
    )
    table = cli.run("device", "health", "--host", HOST).stdout
    assert "injected: XID 79" in table
    name = f"health-{uuid.uuid4().hex[:8]}"
    cli.run("profile", "create", name, "--group", "resources:PGPU=1")
    refused = cli.run("claim", "create", "--profile", name, "--host", HOST, check=False)
    assert refused.returncode == 1 and "exosuit.claim.unsatisfiable" in refused.stderr

    _inject(server, {})
    _rediscover_until(cli, api, lambda h: h["state"] == "ok")
    (row,) = cli.json("device", "health", gpu["uuid"])
    assert (row["offered"], row["held_by"]) == (False, "agent")  # recover_after: 600 s
    assert row["offered_at"]

    (row,) = cli.json("device", "health", gpu["uuid"], "--clear")
    assert (row["state"], row["offered"], row["held_by"]) == ("ok", True, None)

    (row,) = cli.json("device", "health", gpu["uuid"], "--hold", "burn-in")
    assert (row["offered"], row["held_by"]) == (False, "operator")
    assert row["reason"] == "held back by an operator: burn-in"
    (row,) = cli.json("device", "health", gpu["uuid"], "--clear")
    assert row["offered"] is True


def test_health_actions_name_one_device_and_need_2_9(cli):
    unnamed = cli.run("device", "health", "--clear", check=False)
    assert unnamed.returncode == 1 and "name it" in unnamed.stderr
    missing = cli.run("device", "health", str(uuid.uuid4()), "--clear", check=False)
    assert missing.returncode == 1 and "exosuit.device.not_found" in missing.stderr
    old = cli.run("--os-accelerator-api-version", "2.8", "device", "health", check=False)
    assert old.returncode == 1 and "2.9" in old.stderr
