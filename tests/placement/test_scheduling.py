"""GET /allocation_candidates for a device profile, asked the way Nova asks.

Nova turns each group of the device profile into a numbered request group
``device_profile_<i>``: ``resources:RC=N`` into ``resources_device_profile_<i>``,
``trait:T=required|forbidden`` into ``required_device_profile_<i>`` (``!T`` when
forbidden); ``accel:`` keys are ignored. The flavor's own resources (VCPU …)
are the unnumbered group, on the compute node provider nova-compute created
(cloud mode here). See reference cyborg-v2.md §3.5 and nova-observed.md.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlencode

import pytest

from tests.placement.conftest import Stack, fpga, gpu, placement_conf


def nova_query(
    groups: list[dict[str, str]], *, flavor: str = "VCPU:1", group_policy: str = "none"
) -> str:
    """The query string of Nova's GET /allocation_candidates for a device profile."""
    params: list[tuple[str, str]] = [("resources", flavor)]
    for index, group in enumerate(groups):
        suffix = f"_device_profile_{index}"
        resources, required = [], []
        for key, value in group.items():
            if key.startswith("resources:"):
                resources.append(f"{key[len('resources:') :]}:{value}")
            elif key.startswith("trait:"):
                trait = key[len("trait:") :]
                required.append(trait if value == "required" else f"!{trait}")
        params.append((f"resources{suffix}", ",".join(resources)))
        if required:
            params.append((f"required{suffix}", ",".join(required)))
    params.append(("group_policy", group_policy))
    return urlencode(params)


@pytest.fixture
def cloud(placement, placement_api, sqlite_database):
    """Cloud mode: nova-compute has registered each host's compute node (with VCPU)."""
    stack = Stack(placement_conf(placement, standalone=False), sqlite_database)

    def compute_node(hostname: str) -> str:
        rp = str(uuid.uuid4())
        placement_api.request(
            "POST", "/resource_providers", {"uuid": rp, "name": hostname}, expect=200
        )
        placement_api.request(
            "PUT",
            f"/resource_providers/{rp}/inventories",
            {
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 65536}},
            },
            expect=200,
        )
        return rp

    stack.compute_node = compute_node
    return stack


def _profile(stack, groups) -> list[dict]:
    """Create the device profile through the API and read it back as Nova does."""
    name = f"dp-{uuid.uuid4().hex[:8]}"
    created = stack.api.post("/v2/device_profiles", [{"name": name, "groups": groups}])
    assert created.status_code == 201, created.text
    found = stack.api.get(f"/v2/device_profiles?name={name}").json["device_profiles"]
    return found[0]["groups"]


def _candidates(placement_api, query: str) -> list[dict]:
    found = placement_api.get(f"/allocation_candidates?{query}")
    return [
        {
            "mappings": {k: v[0] for k, v in request["mappings"].items()},
            "allocations": {rp: a["resources"] for rp, a in request["allocations"].items()},
        }
        for request in found["allocation_requests"]
    ]


def test_device_profile_groups_land_on_the_device_providers(cloud, placement_api):
    tag = uuid.uuid4().hex[:8].upper()
    fpga_trait, product = f"CUSTOM_FPGA_{tag}", tag
    both, only_fpga = f"host-{tag.lower()}-a", f"host-{tag.lower()}-b"
    computes = {both: cloud.compute_node(both), only_fpga: cloud.compute_node(only_fpga)}
    cloud.report(
        both, [fpga("0000:0c:00.0", traits=(fpga_trait,)), gpu("0000:3b:00.0", product=product)]
    )
    cloud.report(only_fpga, [fpga("0000:0c:00.0", traits=(fpga_trait,))])
    assert {o.state for o in cloud.run_jobs()} == {"succeeded"}
    rps = cloud.deployables(both)

    groups = _profile(
        cloud,
        [
            {
                "resources:FPGA": "1",
                f"trait:{fpga_trait}": "required",
                "accel:bitstream_id": str(uuid.uuid4()),
            },
            {"resources:PGPU": "1", f"trait:CUSTOM_NVIDIA_{product}": "required"},
        ],
    )
    candidates = _candidates(placement_api, nova_query(groups))
    # Only the host with both devices; each group on its device's provider.
    assert candidates == [
        {
            "mappings": {
                "": computes[both],
                "_device_profile_0": rps["fpga_0000:0c:00.0"],
                "_device_profile_1": rps["gpu_0000:3b:00.0"],
            },
            "allocations": {
                computes[both]: {"VCPU": 1},
                rps["fpga_0000:0c:00.0"]: {"FPGA": 1},
                rps["gpu_0000:3b:00.0"]: {"PGPU": 1},
            },
        }
    ]

    # One FPGA group: both hosts; asking for more than a device has: none.
    one = _profile(cloud, [{"resources:FPGA": "4", f"trait:{fpga_trait}": "required"}])
    found = {
        c["mappings"]["_device_profile_0"] for c in _candidates(placement_api, nova_query(one))
    }
    assert found == {rps["fpga_0000:0c:00.0"], cloud.deployables(only_fpga)["fpga_0000:0c:00.0"]}
    too_many = _profile(cloud, [{"resources:FPGA": "5", f"trait:{fpga_trait}": "required"}])
    assert _candidates(placement_api, nova_query(too_many)) == []

    # A forbidden trait excludes the devices that have it.
    forbidden = _profile(
        cloud,
        [
            {"resources:FPGA": "1", f"trait:{fpga_trait}": "forbidden"},
            {"resources:PGPU": "1", f"trait:CUSTOM_NVIDIA_{product}": "required"},
        ],
    )
    assert _candidates(placement_api, nova_query(forbidden)) == []

    # A disabled device is reserved: the other host's FPGA is then the only candidate.
    device = cloud.device_uuid(both, "0000:0c:00.0")
    cloud.api.post(f"/v2/devices/{device}/disable")
    cloud.run_jobs()
    found = {
        c["mappings"]["_device_profile_0"] for c in _candidates(placement_api, nova_query(one))
    }
    assert found == {cloud.deployables(only_fpga)["fpga_0000:0c:00.0"]}
    assert _candidates(placement_api, nova_query(groups)) == []


def test_group_policy_isolate_puts_groups_on_different_devices(cloud, placement_api):
    tag = uuid.uuid4().hex[:8].upper()
    trait = f"CUSTOM_FPGA_{tag}"
    hostname = f"host-{tag.lower()}"
    cloud.compute_node(hostname)
    cloud.report(
        hostname, [fpga("0000:0c:00.0", traits=(trait,)), fpga("0000:0d:00.0", traits=(trait,))]
    )
    cloud.run_jobs()
    rps = cloud.deployables(hostname)
    groups = _profile(
        cloud,
        [
            {"resources:FPGA": "1", f"trait:{trait}": "required"},
            {"resources:FPGA": "1", f"trait:{trait}": "required"},
        ],
    )

    isolated = _candidates(placement_api, nova_query(groups, group_policy="isolate"))
    pairs = {
        (c["mappings"]["_device_profile_0"], c["mappings"]["_device_profile_1"]) for c in isolated
    }
    first, second = rps["fpga_0000:0c:00.0"], rps["fpga_0000:0d:00.0"]
    assert pairs == {(first, second), (second, first)}

    shared = _candidates(placement_api, nova_query(groups, group_policy="none"))
    pairs = {
        (c["mappings"]["_device_profile_0"], c["mappings"]["_device_profile_1"]) for c in shared
    }
    assert (first, first) in pairs and (first, second) in pairs
