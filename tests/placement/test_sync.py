"""Placement sync against real OpenStack Placement, through the API and a real worker.

Agents report through the agent API (in-process WSGI app); a conductor worker
(exosuit.conductor.worker.Worker, its Placement service built from [placement])
runs the jobs; Placement is the openstack-placement server of conftest.py,
checked through its own REST API.
"""

from __future__ import annotations

import uuid

import pytest

from tests.placement.conftest import fpga, gpu, inventory, qat


def _outcomes(outcomes, kind="placement_sync"):
    return [o.state for o in outcomes if o.kind == kind]


def test_a_report_builds_the_provider_tree(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0"), gpu("0000:3b:00.0"), qat("0000:5e:00.0")])
    assert len(stack.pending()) == 1, "one job for the host's report"
    assert _outcomes(stack.run_jobs()) == ["succeeded"]

    tree = placement_api.tree(hostname)
    compute = tree["root"]
    assert compute["parent_provider_uuid"] is None
    rp_uuids = stack.deployables(hostname)
    assert set(tree["children"]) == set(rp_uuids.values())
    fpga_rp = tree["children"][rp_uuids["fpga_0000:0c:00.0"]]
    assert fpga_rp == {
        "name": f"{hostname}_fpga_0000:0c:00.0",
        "parent": compute["uuid"],
        "inventories": {"FPGA": inventory(4)},
        "traits": {"CUSTOM_FAKE_DEVICE", "OWNER_CYBORG"},
    }
    gpu_rp = tree["children"][rp_uuids["gpu_0000:3b:00.0"]]
    assert gpu_rp["inventories"] == {"PGPU": inventory(1)}
    assert gpu_rp["traits"] == {"OWNER_CYBORG", "CUSTOM_NVIDIA_20B0"}
    qat_rp = tree["children"][rp_uuids["qat_0000:5e:00.0"]]
    assert qat_rp["inventories"] == {"CUSTOM_QAT": inventory(2)}
    assert qat_rp["traits"] == {"OWNER_CYBORG", "CUSTOM_QAT_SYM", "CUSTOM_QAT_ASYM"}
    # Custom names were created in Placement.
    placement_api.request("GET", "/resource_classes/CUSTOM_QAT", expect=200)
    placement_api.request("GET", "/traits/CUSTOM_QAT_SYM", expect=204)
    assert stack.counter("exosuit_placement_syncs", job="sync", result="succeeded") == 1
    assert stack.counter("exosuit_placement_provider_writes", action="create") == 3


def test_provider_uuids_survive_restarts_and_rediscovery(stack, placement_api, hostname):
    devices = [fpga("0000:0c:00.0")]
    stack.report(hostname, devices)
    stack.run_jobs()
    first = stack.deployables(hostname)
    # The device disappears for good, then is discovered again: new rows, same uuid.
    stack.report(hostname, [])
    stack.run_jobs()
    assert placement_api.provider(first["fpga_0000:0c:00.0"]) is None
    stack.report(hostname, devices)
    stack.run_jobs()
    assert stack.deployables(hostname) == first
    assert placement_api.provider(first["fpga_0000:0c:00.0"])["name"] == (
        f"{hostname}_fpga_0000:0c:00.0"
    )


def test_cloud_mode_waits_for_nova_compute(placement, placement_api, sqlite_database, hostname):
    from tests.placement.conftest import Stack, placement_conf

    stack = Stack(placement_conf(placement, standalone=False), sqlite_database)
    stack.report(hostname, [fpga("0000:0c:00.0")])
    assert _outcomes(stack.run_jobs()) == ["pending"], "retried later, not failed"
    assert placement_api.providers(name=hostname) == []
    assert stack.counter("exosuit_placement_syncs", job="sync", result="retry") == 1
    metrics = stack.api.get("/metrics").text
    assert "exosuit_placement_hosts_pending 1.0" in metrics

    # nova-compute registers the compute node (its own uuid); the sync then nests under it.
    compute = str(uuid.uuid4())
    placement_api.request(
        "POST", "/resource_providers", {"uuid": compute, "name": hostname}, expect=200
    )
    assert _outcomes(stack.run_jobs(due=True)) == ["succeeded"]
    tree = placement_api.tree(hostname)
    assert tree["root"]["uuid"] == compute
    assert [c["parent"] for c in tree["children"].values()] == [compute]
    assert "exosuit_placement_hosts_pending 0.0" in stack.api.get("/metrics").text


def test_a_change_reaches_placement_as_one_job(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0", functions=4)])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    calls = stack.calls()

    # A trait added and the VF count changed in one report: one job, two writes
    # (plus the new custom trait).
    stack.report(
        hostname,
        [fpga("0000:0c:00.0", functions=8, traits=("CUSTOM_FAKE_DEVICE", "CUSTOM_REGION_42"))],
    )
    assert len(stack.pending()) == 1
    assert _outcomes(stack.run_jobs()) == ["succeeded"]
    assert placement_api.inventories(rp) == {"FPGA": inventory(8)}
    assert set(placement_api.traits(rp)) == {
        "CUSTOM_FAKE_DEVICE",
        "CUSTOM_REGION_42",
        "OWNER_CYBORG",
    }
    assert stack.calls() - calls == 3  # PUT trait, PUT inventories, PUT traits

    # Disabling the device reserves all of it; enabling gives it back: a job each.
    device = stack.device_uuid(hostname, "0000:0c:00.0")
    calls = stack.calls()
    assert stack.api.post(f"/v2/devices/{device}/disable").status_code == 200
    assert len(stack.pending()) == 1
    stack.run_jobs()
    assert placement_api.inventories(rp) == {"FPGA": inventory(8, reserved=8)}
    assert stack.calls() - calls == 1
    assert stack.api.post(f"/v2/devices/{device}/enable").status_code == 200
    stack.run_jobs()
    assert placement_api.inventories(rp) == {"FPGA": inventory(8)}


def test_missing_device_is_reserved_until_it_returns(stack, placement_api, hostname):
    from tests.helpers.inventory import rehash
    from tests.helpers.inventory import snapshot as make_snapshot

    stack.report(hostname, [fpga("0000:0c:00.0")])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    body = make_snapshot(hostname, [fpga("0000:0c:00.0")])
    body["devices"][0]["missing_since"] = "2026-01-01T00:00:00Z"
    assert stack.api.put(f"/agent/v1/hosts/{hostname}/inventory", rehash(body)).status_code == 200
    stack.run_jobs()
    assert placement_api.inventories(rp) == {"FPGA": inventory(4, reserved=4)}
    stack.report(hostname, [fpga("0000:0c:00.0")])
    stack.run_jobs()
    assert placement_api.inventories(rp) == {"FPGA": inventory(4)}


def test_unhealthy_deployable_is_reserved(stack, placement_api, hostname):
    import dataclasses

    device = fpga("0000:0c:00.0")
    sick = dataclasses.replace(
        device,
        deployables=(
            dataclasses.replace(device.deployables[0], extra_attributes=(("health", "critical"),)),
        ),
    )
    stack.report(hostname, [sick])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    assert placement_api.inventories(rp) == {"FPGA": inventory(4, reserved=4)}


def test_an_unchanged_host_costs_no_placement_call(stack, placement_api, hostname):
    devices = [fpga("0000:0c:00.0"), gpu("0000:3b:00.0")]
    stack.report(hostname, devices)
    stack.run_jobs()
    calls = stack.calls()
    # The same report again: no job at all.
    stack.report(hostname, devices)
    assert stack.pending() == []
    # A report that changes nothing Placement sees (firmware version): a job, no call.
    import dataclasses

    stack.report(hostname, [dataclasses.replace(devices[0], firmware_version="2.0"), devices[1]])
    assert _outcomes(stack.run_jobs()) == ["succeeded"]
    assert stack.calls() == calls
    assert stack.counter("exosuit_placement_syncs", job="sync", result="succeeded") == 2


def test_a_new_deployable_costs_at_most_four_calls(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0")])
    stack.run_jobs()
    calls = stack.calls()
    # Known names: POST provider, PUT inventories, PUT traits.
    stack.report(hostname, [fpga("0000:0c:00.0"), fpga("0000:0d:00.0")])
    stack.run_jobs()
    assert stack.calls() - calls == 3
    # A custom trait Placement does not have yet: one more.
    calls = stack.calls()
    new_trait = f"CUSTOM_T_{uuid.uuid4().hex[:8].upper()}"
    stack.report(
        hostname,
        [fpga("0000:0c:00.0"), fpga("0000:0d:00.0"), fpga("0000:0e:00.0", traits=(new_trait,))],
    )
    stack.run_jobs()
    assert stack.calls() - calls == 4
    rp = stack.deployables(hostname)["fpga_0000:0e:00.0"]
    assert set(placement_api.traits(rp)) == {new_trait, "OWNER_CYBORG"}


def test_removal_without_allocations_deletes_the_provider(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0"), gpu("0000:3b:00.0")])
    stack.run_jobs()
    rps = stack.deployables(hostname)
    stack.report(hostname, [gpu("0000:3b:00.0")])
    assert _outcomes(stack.run_jobs()) == ["succeeded"]
    assert placement_api.provider(rps["fpga_0000:0c:00.0"]) is None
    assert placement_api.provider(rps["gpu_0000:3b:00.0"]) is not None
    assert stack.counter("exosuit_placement_provider_writes", action="delete") == 1


def test_removal_with_allocations_waits_for_them(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0", functions=4)])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    instance = str(uuid.uuid4())
    placement_api.allocate(instance, rp, {"FPGA": 1})

    stack.report(hostname, [])
    assert _outcomes(stack.run_jobs()) == ["pending"], "waits for the allocation to go"
    assert placement_api.provider(rp) is not None
    assert placement_api.inventories(rp) == {"FPGA": inventory(4, reserved=4)}
    assert 'exosuit_placement_providers{state="removing"} 1.0' in stack.api.get("/metrics").text
    # Nothing new lands on it meanwhile.
    candidates = placement_api.get(
        "/allocation_candidates?resources=FPGA:1"
        f"&in_tree={placement_api.tree(hostname)['root']['uuid']}"
    )
    assert candidates["allocation_requests"] == []
    # Still allocated: the retry changes nothing (one DELETE refused).
    calls = stack.calls()
    assert _outcomes(stack.run_jobs(due=True)) == ["pending"]
    assert stack.calls() - calls == 1

    placement_api.deallocate(instance)
    assert _outcomes(stack.run_jobs(due=True)) == ["succeeded"]
    assert placement_api.provider(rp) is None
    assert 'exosuit_placement_providers{state="removing"} 0.0' in stack.api.get("/metrics").text


def test_a_device_that_comes_back_before_its_allocations_go(stack, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0", functions=4)])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    instance = str(uuid.uuid4())
    placement_api.allocate(instance, rp, {"FPGA": 1})
    stack.report(hostname, [])
    stack.run_jobs()
    stack.report(hostname, [fpga("0000:0c:00.0", functions=4)])
    assert _outcomes(stack.run_jobs(due=True)) == ["succeeded"]
    assert placement_api.inventories(rp) == {"FPGA": inventory(4)}
    placement_api.deallocate(instance)


@pytest.mark.parametrize("standalone", [True, False], ids=["standalone", "cloud"])
def test_placement_not_configured_costs_nothing(sqlite_database, hostname, standalone):
    from exosuit.conductor.worker import Services, Worker
    from tests.conftest import ApiClient, make_test_conf
    from tests.helpers.inventory import snapshot

    conf = make_test_conf(**{"placement.manage_compute_providers": standalone})
    from exosuit.api.deploy import loadapp

    api = ApiClient(loadapp(conf, sqlite_database))
    api.put(f"/agent/v1/hosts/{hostname}/inventory", snapshot(hostname, [fpga("0000:0c:00.0")]))
    worker = Worker(conf, sqlite_database, services=Services(conf))
    outcome = worker.run_once()
    assert outcome is not None and outcome.state == "succeeded"


def test_operator_attributes_reach_placement(stack, placement_api, hostname):
    import sqlalchemy as sa

    from exosuit.db import models

    stack.report(hostname, [fpga("0000:0c:00.0")])
    stack.run_jobs()
    rp = stack.deployables(hostname)["fpga_0000:0c:00.0"]
    dep = models.deployables
    deployable_id = stack.db.read(
        lambda conn: conn.execute(sa.select(dep.c.id).where(dep.c.rp_uuid == rp)).scalar_one()
    )
    created = stack.api.post(
        "/v2/attributes", {"deployable_id": deployable_id, "key": "trait9", "value": "CUSTOM_GOLD"}
    )
    assert created.status_code == 201, created.text
    assert len(stack.pending()) == 1
    stack.run_jobs()
    assert set(placement_api.traits(rp)) == {"CUSTOM_FAKE_DEVICE", "CUSTOM_GOLD", "OWNER_CYBORG"}
    # Kept across the agent's reports, and gone with the attribute.
    stack.report(hostname, [fpga("0000:0c:00.0", functions=2)])
    stack.run_jobs()
    assert "CUSTOM_GOLD" in placement_api.traits(rp)
    assert stack.api.delete(f"/v2/attributes/{created.json['uuid']}").status_code == 204
    stack.run_jobs()
    assert set(placement_api.traits(rp)) == {"CUSTOM_FAKE_DEVICE", "OWNER_CYBORG"}


def test_a_host_without_accelerators_needs_no_compute_node(
    placement, placement_api, sqlite_database, hostname
):
    from tests.placement.conftest import Stack, placement_conf

    stack = Stack(placement_conf(placement, standalone=False), sqlite_database)
    stack.report(hostname, [])
    assert _outcomes(stack.run_jobs()) == ["succeeded"]
    assert stack.calls() == 0
    assert "exosuit_placement_hosts_pending 0.0" in stack.api.get("/metrics").text
