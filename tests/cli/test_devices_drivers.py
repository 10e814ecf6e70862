"""``exosuit device ready|inactive``, ``driver list|install|uninstall|update``, ``service
list`` and ``discover-services`` (API 2.7, doc/devices.md) against a real ``exosuit serve``,
whose own agent runs the steps: the issue's "done when" on the embedded default. The
simulated devices start ready (serve's [inventory] ready_drivers); a GPU not set up for
partitions still lists its MIG profiles (or vGPU types) as services, not enabled."""

from __future__ import annotations

import json
import time
import uuid

import requests

from exosuit.cli.services import ServiceList
from tests.cli.conftest import HOST, pick

V2_7 = "2.7"
DEADLINE = 60.0


def _fpga(api) -> dict:
    return next(
        d
        for d in api.list("/v2/devices", "devices", version=V2_7)
        if d["type"] == "FPGA" and d["pci_address"] == "0000:0c:00.0"
    )


def _device(api, uuid_: str) -> dict:
    return api.get(f"/v2/devices/{uuid_}", version=V2_7)


def _eventually(check, what: str):
    deadline = time.monotonic() + DEADLINE
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {DEADLINE} s: {what}"
        time.sleep(0.2)


def test_services_and_drivers_are_listed(cli, api):
    _eventually(lambda: api.list("/v2/services", "services", version=V2_7), "services")
    listed = cli.json("service", "list")
    assert listed == pick(api.list("/v2/services", "services", version=V2_7), ServiceList.columns)
    gpu = cli.json("service", "list", "--type", "GPU", "--enabled", "false")
    assert gpu and {s["kind"] for s in gpu} <= {"vgpu", "mig"}
    assert all(s["enabled"] is False and s["device_type"] == "GPU" for s in gpu)
    assert cli.json("service", "list", "--type", "GPU", "--enabled", "true") == []

    drivers = {d["name"]: d for d in cli.json("driver", "list", "--host", HOST)}
    assert drivers["simulated"]["enabled"] is True and drivers["simulated"]["found"] > 0
    table = cli.run("driver", "list", "--host", HOST).stdout
    assert "simulated" in table and "observed" in table


def test_a_driver_is_disabled_and_enabled_again_without_a_restart(cli, api):
    result = cli.run("driver", "uninstall", "nvme", "--host", HOST, "--wait", "-f", "json")
    (row,) = json.loads(result.stdout)
    assert (row["hostname"], row["observed"]) == (HOST, True)
    (nvme,) = [d for d in api.list("/v2/drivers", "drivers", V2_7, name="nvme")]
    assert nvme["desired"]["enabled"] is False
    _eventually(
        lambda: api.list("/v2/drivers", "drivers", V2_7, name="nvme")[0]["enabled"] is False,
        "the agent reports nvme disabled",
    )
    (row,) = cli.json("driver", "install", "nvme", "--host", HOST, "--wait")
    assert row["observed"] is True
    _eventually(
        lambda: api.list("/v2/drivers", "drivers", V2_7, name="nvme")[0]["enabled"] is True,
        "the agent reports nvme enabled",
    )
    bad = cli.run("driver", "update", "nvme", "--config", "novalue", check=False)
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


def test_discover_now_waits_until_the_new_inventory_arrived(cli):
    result = cli.run("discover-services", "--host", HOST, "--wait", "-f", "json")
    (row,) = json.loads(result.stdout)
    assert row["hostname"] == HOST and row["received_at"]
    assert "1 host(s) asked" in result.stderr
    unknown = cli.run("discover-services", "--host", "nowhere", check=False)
    assert unknown.returncode == 1 and "exosuit.host.not_found" in unknown.stderr


def _bind(api, device: dict) -> str:
    """An ARQ of a one-FPGA profile bound to the device's deployable, as Nova does."""
    (deployable,) = [
        d for d in api.list("/v2/deployables", "deployables") if d["name"] == f"{HOST}_FakeDevice"
    ]
    name = f"p{uuid.uuid4().hex[:8]}"
    api.post("/v2/device_profiles", [{"name": name, "groups": [{"resources:FPGA": "1"}]}])
    (arq,) = api.post("/v2/accelerator_requests", {"device_profile_name": name})["arqs"]
    ops = [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": deployable["rp_uuid"]},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    r = requests.patch(f"{api.url}/v2/accelerator_requests", json={arq["uuid"]: ops}, timeout=10)
    assert r.status_code == 202, r.text
    return arq["uuid"]


def test_a_device_goes_inactive_ready_held_refused_released_inactive(cli, api):
    fpga = _fpga(api)
    assert fpga["activation"] == "ready"  # serve offers its simulated FPGAs at once

    (row,) = cli.json("device", "inactive", fpga["uuid"], "--wait")
    assert (row["activation"], row["outcome"]) == ("inactive", "changed")
    assert _device(api, fpga["uuid"])["activation"] == "inactive"

    result = cli.run("device", "ready", fpga["uuid"], "--wait")
    assert fpga["uuid"] in result.stdout and "ready" in result.stdout
    assert _device(api, fpga["uuid"])["activation"] == "ready"

    arq = _bind(api, fpga)
    refused = cli.run("device", "inactive", fpga["uuid"], check=False)
    assert refused.returncode == 1
    assert "exosuit.device.in_use" in refused.stderr and arq in refused.stderr
    assert _device(api, fpga["uuid"])["activation"] == "ready"

    r = requests.delete(f"{api.url}/v2/accelerator_requests/{arq}", timeout=10)
    assert r.status_code == 204, r.text
    (row,) = cli.json("device", "inactive", fpga["uuid"], "--wait")
    assert row["activation"] == "inactive"


def test_devices_of_a_type_are_made_ready_by_their_agent(cli, api):
    gpus = [d for d in api.list("/v2/devices", "devices", V2_7, type="GPU")]
    assert gpus and {g["activation"] for g in gpus} == {"ready"}  # serve's simulated GPUs
    rows = cli.json("device", "inactive", "--type", "GPU", "--host", HOST, "--wait")
    assert {(r["uuid"], r["activation"]) for r in rows} == {(g["uuid"], "inactive") for g in gpus}
    listed = cli.json("device", "list", "--activation", "inactive", "--type", "GPU")
    assert {d["uuid"] for d in listed} == {g["uuid"] for g in gpus}
    rows = cli.json("device", "ready", "--type", "GPU", "--host", HOST, "--wait")
    assert {r["uuid"] for r in rows} == {g["uuid"] for g in gpus}
    assert {r["activation"] for r in rows} == {"ready"}
    listed = cli.json("device", "list", "--activation", "ready", "--type", "GPU")
    assert {d["uuid"] for d in listed} == {g["uuid"] for g in gpus}
    usage = cli.run("device", "ready", check=False)
    assert usage.returncode == 2 and "--host/--type/--driver" in usage.stderr
