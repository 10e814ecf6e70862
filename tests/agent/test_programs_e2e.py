"""Programming end to end: a real ``exosuit serve`` (API, conductor and this host's agent
in one process), an image uploaded through the catalogue API, a program of the simulated
FPGA, the agent fetching, loading and verifying it, and the new function trait in the API;
a bind whose profile asks for the image (``accel:bitstream_id``), programmed by serve's own
agent before the ARQ is ``Bound``; and, with ``--placement-url``, the function trait in
the real Placement of the tests after an operator's program.

The agent polls its desired state every 0.5 s here; every wait below is for a condition,
with a generous deadline.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid

import pytest
import requests

from tests.helpers.serve_fixture import ExosuitServer
from tests.placement.conftest import PlacementAPI, inventory

pytestmark = pytest.mark.slow

HOST = "sim-prog-1"
DEPLOYABLE = f"{HOST}_FakeDevice"
FUNCTION_A = "a0a0a0a0-1111-4222-8333-444455556666"
FUNCTION_B = "b0b0b0b0-1111-4222-8333-444455556666"
TRAIT_A = "CUSTOM_FPGA_FUNCTION_ID_FAKE_A0A0A0A0111142228333444455556666"
DEADLINE = 60.0


class Api:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, version: str = "2.6", **kwargs) -> requests.Response:
        headers = {"OpenStack-API-Version": f"accelerator {version}", **kwargs.pop("headers", {})}
        return requests.request(method, self.url + path, headers=headers, timeout=180, **kwargs)

    def upload(self, name: str, data: bytes, function_id: str | None) -> str:
        body = {"name": name, "format": "simulated", "sha256": hashlib.sha256(data).hexdigest()}
        if function_id:
            body["function_id"] = function_id
        r = self.call("POST", "/v2/images", json=body)
        assert r.status_code == 201, r.text
        image = r.json()["uuid"]
        r = self.call(
            "PUT",
            f"/v2/images/{image}/file",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert r.status_code == 204, r.text
        return image

    def deployable(self, name: str = DEPLOYABLE) -> dict:
        deployables = self.call("GET", "/v2/deployables").json()["deployables"]
        return next(d for d in deployables if d["name"] == name)

    def program(self, deployable: str, image: str, version: str = "2.6") -> requests.Response:
        body = [{"path": "/program", "op": "replace", "value": [{"image_uuid": image}]}]
        return self.call("PATCH", f"/v2/deployables/{deployable}/program", version, json=body)

    def traits(self, deployable: str) -> list[str]:
        shown = self.call("GET", f"/v2/deployables/{deployable}").json()
        attributes = json.loads(shown["attributes_list"])  # Cyborg's form: a JSON string
        return [v for a in attributes for k, v in a.items() if k.startswith("trait")]

    def ended(self, deployable: str) -> dict:
        def program() -> dict | None:
            found = self.call("GET", f"/v2/deployables/{deployable}/program").json()
            return found if found["state"] in ("done", "failed") else None

        return wait_for(program, "the program to end")


def wait_for(condition, what: str):
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def served(tmp_path):
    config = tmp_path / "exosuit.conf"
    config.write_text(f"[DEFAULT]\nhost = {HOST}\n[agent]\ndesired_state_interval = 0.5\n")
    server = ExosuitServer(tmp_path / "data", [config])
    try:
        yield server.start(), tmp_path / "data"
    finally:
        server.kill()


def test_an_uploaded_image_is_programmed_verified_and_rolled_back_on_failure(served):
    server, data_dir = served
    api = Api(server.url)
    fpga = api.deployable()
    assert {"program_formats": "simulated"} in json.loads(fpga["attributes_list"])
    good = api.upload("sim-a", b"a simulated bitstream\n", FUNCTION_A)

    r = api.program(fpga["uuid"], good)
    assert r.status_code == 202, r.text
    program = api.ended(fpga["uuid"])
    assert program["state"] == "done", program
    # The agent reported its inventory at once: the function trait reaches the API.
    wait_for(lambda: TRAIT_A in api.traits(fpga["uuid"]), "the function trait")
    assert api.deployable()["bitstream_id"] == good
    state = json.loads((data_dir / "agent" / "drivers" / "simulated" / "loaded.json").read_text())
    assert state["loaded"][DEPLOYABLE]["image_uuid"] == good
    assert len(list((data_dir / "agent" / "images").iterdir())) == 1  # the image cache

    # An image the device refuses: the previous one is loaded again.
    bad = api.upload("sim-fails", b"#exosuit-simulated fail=load\n", FUNCTION_B)
    r = api.program(fpga["uuid"], bad)
    assert r.status_code == 202, r.text
    failed = api.ended(fpga["uuid"])
    assert failed["uuid"] != program["uuid"]
    assert (failed["state"], failed["restored"]) == ("failed", True), failed
    assert failed["previous_image_uuid"] == good
    assert "refused image" in failed["reason"]
    assert TRAIT_A in api.traits(fpga["uuid"])
    assert api.deployable()["bitstream_id"] == good
    state = json.loads((data_dir / "agent" / "drivers" / "simulated" / "loaded.json").read_text())
    assert state["loaded"][DEPLOYABLE]["function_id"] == FUNCTION_A


def test_cyborgs_clients_get_the_deployable_once_it_is_programmed(served):
    server, _ = served
    api = Api(server.url)
    fpga = api.deployable()
    image = api.upload(f"sim-{uuid.uuid4().hex[:6]}", b"another simulated bitstream\n", FUNCTION_A)
    # Below 2.6 the request waits for the agent, as Cyborg's clients expect.
    r = api.program(fpga["uuid"], image, version="2.0")
    assert r.status_code == 200, r.text
    assert r.json()["bitstream_id"] == image
    wait_for(lambda: TRAIT_A in api.traits(fpga["uuid"]), "the function trait")
    # The same image again: already loaded, nothing runs.
    again = api.program(fpga["uuid"], image, version="2.0")
    assert again.status_code == 200, again.text


def test_a_bind_with_a_bitstream_is_programmed_by_serves_agent_then_bound(served):
    server, data_dir = served
    api = Api(server.url)
    fpga = api.deployable()
    image = api.upload(f"sim-bind-{uuid.uuid4().hex[:6]}", b"a bitstream for a bind\n", FUNCTION_A)
    profile = f"programmed-{uuid.uuid4().hex[:6]}"
    group = {"resources:FPGA": "1", "accel:bitstream_id": image}
    r = api.call("POST", "/v2/device_profiles", "2.0", json=[{"name": profile, "groups": [group]}])
    assert r.status_code == 201, r.text
    r = api.call("POST", "/v2/accelerator_requests", "2.0", json={"device_profile_name": profile})
    assert r.status_code == 201, r.text
    [arq] = r.json()["arqs"]
    # Nova's bind (noauth: an admin with the service role, as Nova's service token).
    instance = str(uuid.uuid4())
    bind = [
        {"op": "add", "path": "/hostname", "value": server.host},
        {"op": "add", "path": "/device_rp_uuid", "value": fpga["rp_uuid"]},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]
    r = api.call("PATCH", "/v2/accelerator_requests", "2.0", json={arq["uuid"]: bind})
    assert r.status_code == 202, r.text

    def ended() -> dict | None:
        shown = api.call("GET", f"/v2/accelerator_requests/{arq['uuid']}", "2.0").json()
        return shown if shown["state"] in ("Bound", "BindFailed") else None

    shown = wait_for(ended, "the bind to end")
    assert (shown["state"], shown["instance_uuid"]) == ("Bound", instance), shown
    assert shown["device_rp_uuid"] == fpga["rp_uuid"]
    assert shown["attach_handle_type"] and shown["attach_handle_info"]
    program = api.call("GET", f"/v2/deployables/{fpga['uuid']}/program").json()
    assert (program["arq_uuid"], program["state"], program["image_uuid"]) == (
        arq["uuid"],
        "done",
        image,
    )
    assert api.deployable()["bitstream_id"] == image
    state = json.loads((data_dir / "agent" / "drivers" / "simulated" / "loaded.json").read_text())
    assert state["loaded"][DEPLOYABLE]["image_uuid"] == image
    wait_for(lambda: TRAIT_A in api.traits(fpga["uuid"]), "the function trait")


class PlacementServe(ExosuitServer):
    """``exosuit serve --placement-url URL``."""

    def __init__(self, data_dir, config_files, placement_url: str) -> None:
        super().__init__(data_dir, config_files)
        self.placement_url = placement_url

    def argv(self) -> list[str]:
        return [*super().argv(), "--placement-url", self.placement_url]


def test_serve_with_placement_puts_the_programmed_function_trait_in_placement(placement, tmp_path):
    host = f"sim-prog-{uuid.uuid4().hex[:8]}"  # Placement is shared by the whole run
    config = tmp_path / "exosuit.conf"
    config.write_text(
        f"[DEFAULT]\nhost = {host}\n[agent]\ndesired_state_interval = 0.5\n"
        "[conductor]\npoll_interval = 0.2\n"
    )
    server = PlacementServe(tmp_path / "data", [config], placement.url)
    try:
        server.start()
        assert f"placement: {placement.url}" in server.output
        placement_api = PlacementAPI(placement.url)
        api = Api(server.url)
        fpga = api.deployable(f"{host}_FakeDevice")
        rp = fpga["rp_uuid"]

        def synced() -> bool:
            return placement_api.provider(rp) is not None and "CUSTOM_FAKE_DEVICE" in set(
                placement_api.traits(rp)
            )

        wait_for(synced, "the FPGA's provider in Placement")
        assert TRAIT_A not in placement_api.traits(rp)

        image = api.upload("sim-placement", b"a bitstream for Placement\n", FUNCTION_A)
        r = api.program(fpga["uuid"], image)
        assert r.status_code == 202, r.text
        assert api.ended(fpga["uuid"])["state"] == "done"
        wait_for(lambda: TRAIT_A in placement_api.traits(rp), "the function trait in Placement")
        assert set(placement_api.traits(rp)) == {"CUSTOM_FAKE_DEVICE", TRAIT_A, "OWNER_CYBORG"}
        # The program's reservation is gone.
        wait_for(
            lambda: placement_api.inventories(rp) == {"FPGA": inventory(16)},
            "the FPGA's inventory free again",
        )
    finally:
        server.kill()
