"""A deployable the host's driver renames keeps its uuid and rp_uuid when it holds the same
attach handles (exosuit/db/inventory.py): what makes imported Cyborg names harmless."""

from __future__ import annotations

import dataclasses

from tests.conftest import PERSONAS
from tests.helpers.inventory import fpga, snapshot

HOST = "rename-host"


def report(api, devices) -> None:
    r = api.as_(PERSONAS["service"]).put(
        f"/agent/v1/hosts/{HOST}/inventory", snapshot(HOST, devices)
    )
    assert r.status_code == 200, r.text


def deployables(api) -> dict[str, dict]:
    found = api.as_(PERSONAS["admin"]).get("/v2/deployables").json["deployables"]
    return {d["name"]: d for d in found}


def renamed(device, name: str):
    [deployable] = device.deployables
    return dataclasses.replace(device, deployables=(dataclasses.replace(deployable, name=name),))


def test_same_handles_under_a_new_name_is_the_same_deployable(api):
    device = fpga("0000:0c:00.0", handles=4, name="old-name")
    report(api, [device])
    [old] = deployables(api).values()
    report(api, [renamed(device, f"{HOST}_0000:0c:00.0")])
    [new] = deployables(api).values()
    assert new["name"] == f"{HOST}_0000:0c:00.0"
    assert (new["uuid"], new["rp_uuid"]) == (old["uuid"], old["rp_uuid"])


def test_other_handles_under_a_new_name_is_a_new_deployable(api):
    report(api, [fpga("0000:0c:00.0", handles=4, name="old-name")])
    [old] = deployables(api).values()
    other = fpga("0000:0d:00.0", handles=2, name="new-name")
    moved = dataclasses.replace(other, controlpath_id=fpga("0000:0c:00.0").controlpath_id)
    report(api, [moved])
    [new] = deployables(api).values()
    assert new["name"] == "new-name"
    assert new["uuid"] != old["uuid"] and new["rp_uuid"] != old["rp_uuid"]
