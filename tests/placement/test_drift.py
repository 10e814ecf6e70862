"""Drift repair: what is changed by hand in Placement is put back, logged and counted."""

from __future__ import annotations

import logging
import time
import uuid

from exosuit.conductor.worker import Conductor
from exosuit.db import jobs
from tests.placement.conftest import Stack, fpga, gpu, inventory, placement_conf


def _reconcile(stack) -> list:
    """What the periodic placement_reconcile job does, run by the worker now."""
    stack.db.write(lambda conn: jobs.enqueue(conn, "placement_reconcile", {}))
    return stack.run_jobs()


def test_drift_is_repaired_logged_and_counted(stack, placement_api, hostname, caplog):
    stack.report(hostname, [fpga("0000:0c:00.0"), fpga("0000:0d:00.0"), gpu("0000:3b:00.0")])
    stack.run_jobs()
    rps = stack.deployables(hostname)
    first, second, third = (
        rps["fpga_0000:0c:00.0"],
        rps["fpga_0000:0d:00.0"],
        rps["gpu_0000:3b:00.0"],
    )
    expected = placement_api.tree(hostname)
    compute = expected["root"]["uuid"]

    # By hand: a provider deleted, a trait removed, an inventory changed, and a
    # provider of Exosuit's kind (OWNER_CYBORG) that no deployable has.
    placement_api.request("DELETE", f"/resource_providers/{first}", expect=204)
    generation = placement_api.provider(second)["generation"]
    placement_api.request(
        "PUT",
        f"/resource_providers/{second}/traits",
        {"resource_provider_generation": generation, "traits": ["OWNER_CYBORG"]},
        expect=200,
    )
    generation = placement_api.provider(third)["generation"]
    placement_api.request(
        "PUT",
        f"/resource_providers/{third}/inventories",
        {"resource_provider_generation": generation, "inventories": {"PGPU": inventory(7)}},
        expect=200,
    )
    extra = str(uuid.uuid4())
    placement_api.request(
        "POST",
        "/resource_providers",
        {"uuid": extra, "name": f"{hostname}_leftover", "parent_provider_uuid": compute},
        expect=200,
    )
    placement_api.request(
        "PUT",
        f"/resource_providers/{extra}/traits",
        {"resource_provider_generation": 0, "traits": ["OWNER_CYBORG"]},
        expect=200,
    )

    with caplog.at_level(logging.WARNING, logger="exosuit.placement.sync"):
        outcomes = _reconcile(stack)
    assert [o.kind for o in outcomes] == ["placement_reconcile", "placement_sync"]
    assert all(o.state == "succeeded" for o in outcomes)

    assert placement_api.tree(hostname) == expected
    assert placement_api.provider(extra) is None
    for kind in ("provider_missing", "traits", "inventory", "provider_extra"):
        assert stack.counter("exosuit_placement_repairs", kind=kind) == 1, kind
    drift_logs = [r.getMessage() for r in caplog.records if "Placement drift" in r.getMessage()]
    assert len(drift_logs) == 4, drift_logs
    metrics = stack.api.get("/metrics").text
    assert 'exosuit_placement_repairs_total{kind="provider_missing"} 1.0' in metrics

    # Nothing left to repair: one request for the host (its providers and generations).
    calls = stack.calls("verify")
    _reconcile(stack)
    assert stack.calls("verify") - calls == 1
    assert stack.counter("exosuit_placement_repairs", kind="traits") == 1


def test_a_provider_without_its_owner_trait_is_found_and_repaired(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0")])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    generation = placement_api.provider(rp)["generation"]
    placement_api.request(
        "PUT",
        f"/resource_providers/{rp}/traits",
        {"resource_provider_generation": generation, "traits": []},
        expect=200,
    )
    _reconcile(stack)
    assert set(placement_api.traits(rp)) == {"CUSTOM_FAKE_DEVICE", "OWNER_CYBORG"}
    assert stack.counter("exosuit_placement_repairs", kind="traits") == 1
    assert stack.counter("exosuit_placement_repairs", kind="provider_missing") == 0


def test_allocations_move_generations_without_drift(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0")])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    consumer = str(uuid.uuid4())
    placement_api.allocate(consumer, rp, {"FPGA": 2})
    calls = stack.calls("verify")
    _reconcile(stack)
    # The generation moved: the provider is read (inventories, traits), nothing repaired.
    assert stack.calls("verify") - calls == 3
    assert (
        sum(v for (name, _), v in stack.counters().items() if name == "exosuit_placement_repairs")
        == 0
    )
    # ... and a disable still lands, at the new generation.
    device = stack.device_uuid(hostname, "0000:0c:00.0")
    stack.api.post(f"/v2/devices/{device}/disable")
    stack.run_jobs()
    assert placement_api.inventories(rp) == {"FPGA": inventory(4, reserved=4)}
    placement_api.deallocate(consumer)


def test_a_custom_trait_deleted_from_placement_is_created_again(stack, placement_api, hostname):
    trait = f"CUSTOM_GONE_{uuid.uuid4().hex[:6].upper()}"
    stack.report(hostname, [fpga("0000:0c:00.0", traits=(trait,))])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    generation = placement_api.provider(rp)["generation"]
    placement_api.request(
        "PUT",
        f"/resource_providers/{rp}/traits",
        {"resource_provider_generation": generation, "traits": ["OWNER_CYBORG"]},
        expect=200,
    )
    placement_api.request("DELETE", f"/traits/{trait}", expect=204)
    outcomes = _reconcile(stack)
    assert all(o.state == "succeeded" for o in outcomes)
    assert set(placement_api.traits(rp)) == {trait, "OWNER_CYBORG"}


def test_a_deleted_compute_node_provider_is_created_again(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0")])
    stack.run_jobs()
    before = placement_api.tree(hostname)
    for child in before["children"]:
        placement_api.request("DELETE", f"/resource_providers/{child}", expect=204)
    placement_api.request("DELETE", f"/resource_providers/{before['root']['uuid']}", expect=204)
    _reconcile(stack)
    after = placement_api.tree(hostname)
    assert after["root"]["uuid"] == before["root"]["uuid"]  # standalone: a stable uuid
    assert after["children"] == before["children"]
    assert stack.counter("exosuit_placement_repairs", kind="compute_provider") == 1
    assert stack.counter("exosuit_placement_repairs", kind="provider_missing") == 1


def test_a_provider_deleted_by_hand_is_put_back_by_the_next_change(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0")])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    placement_api.request("DELETE", f"/resource_providers/{rp}", expect=204)
    device = stack.device_uuid(hostname, "0000:0c:00.0")
    stack.api.post(f"/v2/devices/{device}/disable")
    assert [o.state for o in stack.run_jobs()] == ["succeeded"]
    assert placement_api.inventories(rp) == {"FPGA": inventory(4, reserved=4)}
    assert stack.counter("exosuit_placement_repairs", kind="provider_missing") == 1


def test_the_conductor_repairs_drift_every_reconcile_interval(
    placement, placement_api, sqlite_database, hostname
):
    conf = placement_conf(placement, **{"conductor.reconcile_interval": 1})
    stack = Stack(conf, sqlite_database)
    stack.report(hostname, [fpga("0000:0c:00.0")])
    conductor = Conductor(conf, sqlite_database, workers=1)
    conductor.start()
    try:
        rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
        _wait(lambda: _inventories(placement_api, rp) == {"FPGA": inventory(4)})
        placement_api.request("DELETE", f"/resource_providers/{rp}", expect=204)
        _wait(lambda: _inventories(placement_api, rp) == {"FPGA": inventory(4)})
        assert set(placement_api.traits(rp)) == {"CUSTOM_FAKE_DEVICE", "OWNER_CYBORG"}
    finally:
        assert conductor.stop(timeout=30)
    assert stack.counter("exosuit_placement_repairs", kind="provider_missing") == 1


def _wait(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _inventories(placement_api, rp: str) -> dict | None:
    found = placement_api.request("GET", f"/resource_providers/{rp}/inventories")
    return found.json()["inventories"] if found.status_code == 200 else None
