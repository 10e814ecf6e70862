"""End to end on a real ``exosuit serve``: a claim for a container (POST /v2/claims,
``"container": true``) → the in-process agent writes its CDI spec into serve's CDI
directory and reports ``written`` (the real PUT /agent/v1/hosts/{host}/claims/{uuid}) →
podman resolves the device ids the claim shows → release → the file is gone.

Needs the claims API (microversion 2.8) and the real agent; the podman part needs
podman and root (tests/agent/conftest.py), and serve's ``[cdi] spec_dir`` set to
/var/run/cdi (podman 4.3.1 reads no other directory). Without a configured spec_dir,
serve writes into ``<data dir>/cdi``.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.agent.conftest import CDI_DIR
from tests.helpers.serve_fixture import ExosuitServer

pytestmark = pytest.mark.slow

V2_8 = {"OpenStack-API-Version": "accelerator 2.8"}
DEADLINE = 90.0  # seconds: the agent looks at its desired state every 5 s


def start(tmp_path: Path, spec_dir: str | None) -> ExosuitServer:
    lines = ["[DEFAULT]", "host = cdi-serve"]
    if spec_dir is not None:
        lines += ["[cdi]", f"spec_dir = {spec_dir}"]
    config = tmp_path / "exosuit.conf"
    config.write_text("\n".join(lines) + "\n")
    return ExosuitServer(tmp_path / "data", [config]).start()


def api(server: ExosuitServer, method: str, path: str, body=None) -> requests.Response:
    return requests.request(method, server.url + path, json=body, headers=V2_8, timeout=30)


def wait_for(what: str, condition, deadline: float = DEADLINE):
    end = time.monotonic() + deadline
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > end:
            pytest.fail(f"not within {deadline:.0f} s: {what}")
        time.sleep(0.2)


def claim_fpga(server: ExosuitServer) -> dict:
    """A claim of one simulated FPGA handle, for a container."""
    profile = f"cdi-{uuid.uuid4().hex[:8]}"
    groups = [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]
    created = api(server, "POST", "/v2/device_profiles", [{"name": profile, "groups": groups}])
    assert created.status_code in (200, 201), created.text
    answer = api(server, "POST", "/v2/claims", {"device_profile_name": profile, "container": True})
    assert answer.status_code in (201, 202), answer.text
    return answer.json()


def written(server: ExosuitServer, claim_uuid: str) -> dict | None:
    claim = api(server, "GET", f"/v2/claims/{claim_uuid}").json()
    assert claim["cdi"]["state"] != "failed", claim
    return claim if claim["cdi"]["state"] == "written" else None


def test_a_container_claim_gets_its_spec_in_serves_data_dir_until_released(tmp_path):
    server = start(tmp_path, None)
    try:
        spec_dir = tmp_path / "data" / "cdi"
        assert f"CDI specs: {spec_dir}" in server.output
        claim = claim_fpga(server)
        claim = wait_for("the claim's CDI specs written", lambda: written(server, claim["uuid"]))
        (device,) = claim["devices"]
        assert device["cdi_device"] == f"exosuit.dev/fpga={claim['uuid']}-0"
        path = spec_dir / f"exosuit.dev-fpga_{claim['uuid']}.json"
        spec = json.loads(path.read_text())
        assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", "exosuit.dev/fpga")
        assert [d["name"] for d in spec["devices"]] == [f"{claim['uuid']}-0"]
        env = spec["devices"][0]["containerEdits"]["env"]
        info = device["attach_handle_info"]
        address = f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
        assert f"EXOSUIT_DEVICE_0_PCI_ADDRESS={address}" in env
        assert api(server, "DELETE", f"/v2/claims/{claim['uuid']}").status_code == 204
        wait_for("the spec removed after the release", lambda: not path.exists())
        assert os.listdir(spec_dir) == []
    finally:
        server.kill()


def test_podman_resolves_a_claim_made_on_serve_until_it_is_released(tmp_path, podman):
    server = start(tmp_path, CDI_DIR)
    path = None
    try:
        claim = claim_fpga(server)
        path = os.path.join(CDI_DIR, f"exosuit.dev-fpga_{claim['uuid']}.json")
        claim = wait_for("the claim's CDI specs written", lambda: written(server, claim["uuid"]))
        (device,) = claim["devices"]
        name = podman.create(device["cdi_device"])
        result = podman.init(name)
        assert "CDI" not in result.stderr, result.stderr
        config = podman.config(name)
        info = device["attach_handle_info"]
        address = f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
        node = f"/dev/exosuit-simulated/fpga-{address.replace(':', '-').replace('.', '-')}"
        assert node in [d["path"] for d in config["linux"]["devices"]]
        assert f"EXOSUIT_CLAIM={claim['uuid']}" in config["process"]["env"]
        assert api(server, "DELETE", f"/v2/claims/{claim['uuid']}").status_code == 204
        wait_for("the spec removed after the release", lambda: not os.path.exists(path))
        again = podman.init(podman.create(device["cdi_device"]))
        assert f"unresolvable CDI devices {device['cdi_device']}" in again.stderr
    finally:
        server.kill()
        if path is not None and os.path.exists(path):
            os.unlink(path)
