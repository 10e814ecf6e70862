"""A bind checks the ARQ's device profile group against the deployable it names.

Regression (issue 14): an ARQ whose group asks for ``resources:FPGA`` bound to a GPU's
provider, and required or forbidden traits were not looked at. Nova's allocation
normally guarantees the match; a caller that names another provider gets a failed bind
(409, the ARQ BindFailed with the reason, no attach handle taken), never a device the
group did not ask for. The deployable's resource class and traits are those its
provider in Placement gets (exosuit/db/offers.py), an operator's ``rc`` attribute
included. Three databases.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest

from tests.helpers.inventory import fpga, snapshot

HOST = "bind-host"
FPGA_ADDRESS = "0000:0c:00.0"
GPU_ADDRESS = "0000:3b:00.0"


def gpu(address: str):
    """A whole GPU (rc PGPU, trait CUSTOM_NVIDIA_1EB8) with one attach handle."""
    device = fpga(address, handles=1, name=f"gpu_{address}", traits=("CUSTOM_NVIDIA_1EB8",))
    (deployable,) = device.deployables
    return dataclasses.replace(
        device, type="GPU", deployables=(dataclasses.replace(deployable, resource_class="PGPU"),)
    )


@pytest.fixture
def host(api) -> dict[str, str]:
    """The host's deployables' rp_uuids by kind (fpga: rc FPGA, trait CUSTOM_FAKE_DEVICE)."""
    r = api.put(
        f"/agent/v1/hosts/{HOST}/inventory",
        snapshot(HOST, [fpga(FPGA_ADDRESS, handles=4), gpu(GPU_ADDRESS)]),
    )
    assert r.status_code == 200, r.text
    found = {}
    for deployable in api.get("/v2/deployables").json["deployables"]:
        found["gpu" if deployable["name"].startswith("gpu_") else "fpga"] = deployable
    return found


def bind(api, group: dict, rp_uuid: str):
    """One ARQ of a new profile holding ``group``, bound to ``rp_uuid``: (response, ARQ)."""
    name = f"p{uuid.uuid4().hex[:8]}"
    r = api.post("/v2/device_profiles", [{"name": name, "groups": [group]}])
    assert r.status_code == 201, r.text
    r = api.post("/v2/accelerator_requests", {"device_profile_name": name})
    assert r.status_code == 201, r.text
    arq = r.json["arqs"][0]  # a group of two resources makes two: the first is bound
    ops = [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    response = api.patch("/v2/accelerator_requests", {arq["uuid"]: ops})
    return response, api.get(f"/v2/accelerator_requests/{arq['uuid']}").json


def handles_in_use(api) -> int:
    return sum(
        h["in_use"] for h in api.get("/v2/attach_handles", version="2.5").json["attach_handles"]
    )


@pytest.mark.parametrize(
    ("target", "group", "reason"),
    [
        ("gpu", {"resources:FPGA": "1"}, "offers resource class PGPU, not FPGA"),
        (
            "fpga",
            {"resources:FPGA": "1", "trait:CUSTOM_ABSENT": "required"},
            "lacks required trait(s) CUSTOM_ABSENT",
        ),
        (
            "fpga",
            {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "forbidden"},
            "has forbidden trait(s) CUSTOM_FAKE_DEVICE",
        ),
        # Every provider of Exosuit's has OWNER_CYBORG, as Placement shows it.
        ("gpu", {"resources:PGPU": "1", "trait:OWNER_CYBORG": "forbidden"}, "OWNER_CYBORG"),
        (
            "gpu",
            {"resources:PGPU": "1", "trait:CUSTOM_FAKE_DEVICE": "required"},
            "lacks required trait(s) CUSTOM_FAKE_DEVICE",
        ),
    ],
    ids=["resource class", "required trait", "forbidden trait", "owner trait", "other's trait"],
)
def test_a_bind_to_a_deployable_the_group_does_not_match_fails(api, host, target, group, reason):
    deployable = host[target]
    r, arq = bind(api, group, deployable["rp_uuid"])
    assert r.status_code == 409, r.text
    fault = json.loads(r.json["error_message"])
    assert fault["code"] == "exosuit.arq.bind_failed"
    assert (
        f"deployable {deployable['name']} (resource provider {deployable['rp_uuid']})"
        in (fault["faultstring"])
    )
    assert reason in fault["faultstring"]
    assert arq["state"] == "BindFailed"
    assert arq["attach_handle_uuid"] is None
    assert handles_in_use(api) == 0


@pytest.mark.parametrize(
    ("target", "group"),
    [
        ("fpga", {"resources:FPGA": "1"}),
        ("fpga", {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}),
        ("fpga", {"resources:FPGA": "1", "trait:CUSTOM_NVIDIA_1EB8": "forbidden"}),
        ("gpu", {"resources:PGPU": "1", "trait:CUSTOM_NVIDIA_1EB8": "required"}),
        # A group asking for one of two classes binds to either.
        ("gpu", {"resources:FPGA": "1", "resources:PGPU": "1"}),
        # An accel: key that asks nothing of the deployable.
        ("fpga", {"resources:FPGA": "1", "accel:same_numa_node": "false"}),
    ],
)
def test_a_bind_to_a_deployable_the_group_matches_is_bound(api, host, target, group):
    r, arq = bind(api, group, host[target]["rp_uuid"])
    assert r.status_code == 202, r.text
    assert arq["state"] == "Bound"
    assert handles_in_use(api) == 1


def test_an_operators_rc_attribute_is_what_the_bind_checks(api, host):
    """As in Placement, an operator's ``rc`` attribute wins over the agent's."""
    attributes = api.get("/v2/attributes?key=rc").json["attributes"]
    (deployable_id,) = [a["deployable_id"] for a in attributes if a["value"] == "FPGA"]
    r = api.post(
        "/v2/attributes", {"deployable_id": deployable_id, "key": "rc", "value": "CUSTOM_X"}
    )
    assert r.status_code == 201, r.text
    r, arq = bind(api, {"resources:FPGA": "1"}, host["fpga"]["rp_uuid"])
    assert (r.status_code, arq["state"]) == (409, "BindFailed")
    assert "offers resource class CUSTOM_X, not FPGA" in r.text
    r, arq = bind(api, {"resources:CUSTOM_X": "1"}, host["fpga"]["rp_uuid"])
    assert (r.status_code, arq["state"]) == (202, "Bound"), r.text
