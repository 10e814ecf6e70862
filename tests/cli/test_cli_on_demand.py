"""Partitions on demand on a real ``exosuit serve`` (doc/devices.md, "Partitions"): the
simulated GPU given an on-demand vGPU layout offers its slots with none made; a bind of
one is BindStarted until the in-process agent (polling its desired state) has made the
slice, then Bound; deleting the ARQ has the agent remove it. No clock is assumed: each
step is waited for with a generous deadline."""

from __future__ import annotations

import json
import uuid

import pytest
import requests

from tests.cli.conftest import API
from tests.helpers.agent_processes import wait_for
from tests.helpers.serve_fixture import ExosuitServer, write_config

# Its simulated GPU is an A100 (the model follows the host name), which has vGPU types.
HOST = "od-host"
DEADLINE = 120.0
V2_9 = {"OpenStack-API-Version": "accelerator 2.9"}


def _call(server, method: str, path: str, body=None, expect: int = 200, headers=None):
    r = requests.request(
        method, f"{server.url}{path}", json=body, headers=headers or V2_9, timeout=30
    )
    assert r.status_code == expect, r.text
    return r.json() if r.content else None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("exosuit-on-demand")
    started = ExosuitServer(base / "data", [write_config(base / "exosuit.conf", host=HOST)])
    try:
        yield started.start()
    finally:
        started.kill()


def test_a_bind_gets_its_slice_made_and_the_release_removes_it(server):
    api = API(server.url)
    (gpu,) = [d for d in api.list("/v2/devices", "devices", version="2.9") if d["type"] == "GPU"]
    services = api.list("/v2/services", "services", version="2.9", kind="vgpu", hostname=HOST)
    vgpu_type = next(s["name"] for s in services if s["device_uuid"] == gpu["uuid"])
    layout = {"mdev": {vgpu_type: 2}, "on_demand": True}
    _call(server, "PUT", f"/v2/devices/{gpu['uuid']}/partitions", layout, expect=202)
    wait_for(
        lambda: _call(server, "GET", f"/v2/devices/{gpu['uuid']}/partitions")["state"] == "applied",
        timeout=DEADLINE,
        what="the on-demand layout applied",
    )

    mark = gpu["pci_address"].replace(":", "_").replace(".", "_")

    def gpu_deployable() -> dict | None:
        found = [
            d
            for d in api.list("/v2/deployables", "deployables", version="2.9")
            if d["name"].endswith(mark) and d["num_accelerators"] == 2
        ]
        return found[0] if found else None

    deployable = wait_for(gpu_deployable, timeout=DEADLINE, what="the two slots offered")
    state_file = server.data_dir / "agent" / "drivers" / "simulated" / "partitions.json"

    def made() -> list[str]:
        return json.loads(state_file.read_text()).get("made", {}).get(gpu["pci_address"], [])

    assert made() == []

    name = f"od-{uuid.uuid4().hex[:8]}"
    profile = [{"name": name, "groups": [{"resources:VGPU": "1"}]}]
    _call(server, "POST", "/v2/device_profiles", profile, expect=201)
    arqs = _call(server, "POST", "/v2/accelerator_requests", {"device_profile_name": name}, 201)
    arq = arqs["arqs"][0]["uuid"]
    ops = [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": deployable["rp_uuid"]},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    _call(server, "PATCH", "/v2/accelerator_requests", {arq: ops}, expect=202)

    bound = wait_for(
        lambda: (
            (a := _call(server, "GET", f"/v2/accelerator_requests/{arq}"))["state"] == "Bound" and a
        ),
        timeout=DEADLINE,
        what="the bind Bound once its slice is made",
    )
    assert made() == [bound["attach_handle_info"]["mdev_uuid"]]

    _call(server, "DELETE", f"/v2/accelerator_requests?arqs={arq}", expect=204)
    wait_for(lambda: made() == [], timeout=DEADLINE, what="the released slice removed")
