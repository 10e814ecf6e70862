"""Cyborg's clients programming an FPGA through ``PATCH /v2/deployables/{uuid}/program``
of a real ``exosuit serve`` (below 2.6, where the request waits for the host's agent),
whose own agent loads the image onto the simulated FPGA.

* openstacksdk (the installed one): its proxy's PATCH of Cyborg's address, and
  ``patch_deployable``, which sends the UUID twice (…/program/{uuid}: Exosuit serves
  that address too), program the FPGA: the deployable once loaded, refusals as
  openstacksdk's HTTP errors. Its deprecated ``update_deployable`` (openstacksdk 4.x)
  calls itself instead of ``patch_deployable``: ``RecursionError``, and nothing is sent.
* ``openstack accelerator deployable program``: python-cyborgclient's command calls
  ``update_deployable`` and so cannot work; python-openstackclient's own (what the
  ``openstack`` command runs since 10.x) calls ``patch_deployable`` after looking the
  image up in Glance: run here against the tests' real Keystone and Glance.
"""

from __future__ import annotations

import hashlib
import json
import uuid

import openstack
import pytest
import requests

from tests.helpers.keystone_fixture import REGION
from tests.helpers.serve_fixture import ExosuitServer, OpenStackCLI, client_env

pytestmark = pytest.mark.slow

HOST = "sdk-prog-1"
DEPLOYABLE = f"{HOST}_FakeDevice"
FUNCTION = "5d5d5d5d-1111-4222-8333-444455556666"
V2_6 = {"OpenStack-API-Version": "accelerator 2.6"}
DEADLINE = 60.0


def _program_patch(image: str) -> list[dict]:
    return [{"path": "/program", "op": "replace", "value": [{"image_uuid": image}]}]


def start(base, text: str = "") -> ExosuitServer:
    config = base / "exosuit.conf"
    config.write_text(f"[DEFAULT]\nhost = {HOST}\n[agent]\ndesired_state_interval = 0.5\n{text}")
    return ExosuitServer(base / "data", [config]).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = start(tmp_path_factory.mktemp("sdk-program"))
    try:
        yield started
    finally:
        started.kill()


@pytest.fixture(scope="module")
def sdk(server):
    """openstacksdk with no Keystone, as tests/api/test_openstack_clients.py makes it: no
    microversion asked for, so the API answers as 2.0."""
    conn = openstack.connect(auth_type="none", endpoint=server.url)
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def sdk_2_5(server):
    conn = openstack.connect(
        auth_type="none", endpoint=server.url, accelerator_default_microversion="2.5"
    )
    yield conn
    conn.close()


def get(server, path: str, headers=None) -> dict:
    r = requests.get(server.url + path, headers=headers or V2_6, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def deployable(server, driver: str = "fake") -> dict:
    [found] = [
        d for d in get(server, "/v2/deployables")["deployables"] if d["driver_name"] == driver
    ]
    return found


def upload(server, data: bytes, headers=None) -> str:
    """A catalogue image of format ``simulated`` (POST /v2/images, PUT …/file at 2.6)."""
    headers = headers or {}
    body = {
        "name": f"sdk-{uuid.uuid4().hex[:6]}",
        "format": "simulated",
        "function_id": FUNCTION,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    r = requests.post(f"{server.url}/v2/images", json=body, headers={**V2_6, **headers}, timeout=10)
    assert r.status_code == 201, r.text
    image = r.json()["uuid"]
    r = requests.put(
        f"{server.url}/v2/images/{image}/file",
        data=data,
        headers={**V2_6, **headers, "Content-Type": "application/octet-stream"},
        timeout=30,
    )
    assert r.status_code == 204, r.text
    return image


def latest_program(server, deployable_uuid: str) -> dict | None:
    r = requests.get(
        f"{server.url}/v2/deployables/{deployable_uuid}/program", headers=V2_6, timeout=10
    )
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json()


def traits(shown: dict) -> set[str]:
    attributes = json.loads(shown["attributes_list"])  # Cyborg's form: a JSON string
    return {v for a in attributes for k, v in a.items() if k.startswith("trait")}


# -- openstacksdk ------------------------------------------------------------------------------


def program_through_the_proxy(conn, deployable_uuid: str, image: str):
    """Cyborg's request sent by openstacksdk's accelerator proxy (a keystoneauth Adapter
    on the catalog's, or the override's, endpoint, with the connection's microversion):
    what works while ``patch_deployable`` does not."""
    return conn.accelerator.patch(
        f"/deployables/{deployable_uuid}/program", json=_program_patch(image)
    )


@pytest.mark.parametrize("connection", ["sdk", "sdk_2_5"])
def test_the_sdks_proxy_programs_the_fpga_and_gets_the_deployable(request, server, connection):
    conn = request.getfixturevalue(connection)
    fpga = deployable(server)
    image = upload(server, f"bitstream for {connection}\n".encode())

    r = program_through_the_proxy(conn, fpga["uuid"], image)

    # Below 2.6 the request waited for the agent: 200, the deployable itself.
    assert r.status_code == 200, r.text
    shown = r.json()
    assert (shown["uuid"], shown["name"], shown["bitstream_id"]) == (
        fpga["uuid"],
        DEPLOYABLE,
        image,
    )
    program = latest_program(server, fpga["uuid"])
    assert (program["state"], program["image_uuid"]) == ("done", image)
    # The SDK reads the answer as its Deployable resource.
    assert conn.accelerator.get_deployable(fpga["uuid"]).name == DEPLOYABLE
    # The same again: already loaded, nothing runs, the deployable again.
    again = program_through_the_proxy(conn, fpga["uuid"], image)
    assert again.status_code == 200 and again.json()["uuid"] == fpga["uuid"]
    assert latest_program(server, fpga["uuid"])["reason"] == "already loaded"


def test_refusals_through_the_sdks_proxy_are_409_and_404_with_the_reason(sdk, server):
    fpga, gpu = deployable(server), deployable(server, "nvidia_gpu")
    loaded = fpga["bitstream_id"]
    image = upload(server, b"a bitstream for the wrong device\n")
    r = program_through_the_proxy(sdk, gpu["uuid"], image)
    assert r.status_code == 409 and "cannot program" in r.text, r.text
    r = program_through_the_proxy(sdk, fpga["uuid"], str(uuid.uuid4()))
    assert r.status_code == 404, r.text

    # A program that fails on the host: 409 with the reason, the previous image restored.
    bad = upload(server, b"#exosuit-simulated fail=load\n" + uuid.uuid4().bytes)
    r = program_through_the_proxy(sdk, fpga["uuid"], bad)
    assert r.status_code == 409, r.text
    fault = json.loads(r.json()["error_message"])
    assert fault["code"] == "exosuit.program.failed" and "fail=load" in fault["faultstring"]
    program = latest_program(server, fpga["uuid"])
    assert (program["state"], program["image_uuid"]) == ("failed", bad)
    assert deployable(server)["bitstream_id"] == loaded


def test_patch_deployable_programs_at_the_address_it_uses(sdk, server):
    """openstacksdk 4.x's ``patch_deployable`` PATCHes ``/v2/deployables/{uuid}/program/
    {uuid}`` (the resource's base path ``/deployables/%(id)s/program``, and the id that
    ``Resource.patch`` always appends). Cyborg has no such resource (405); Exosuit takes
    it as ``…/program`` so the SDK's call programs the FPGA (doc/compatibility.md)."""
    fpga = deployable(server)
    image = upload(server, b"sent to the SDK's address\n")
    shown = sdk.accelerator.patch_deployable(fpga["uuid"], _program_patch(image))
    assert (shown.id, shown.name) == (fpga["uuid"], DEPLOYABLE)
    program = latest_program(server, fpga["uuid"])
    assert (program["state"], program["image_uuid"]) == ("done", image)
    assert deployable(server)["bitstream_id"] == image


def test_the_sdks_address_with_another_uuid_is_not_found(server):
    fpga = deployable(server)
    before = latest_program(server, fpga["uuid"])
    image = upload(server, b"a second uuid that is not the deployable's\n")
    r = requests.patch(
        f"{server.url}/v2/deployables/{fpga['uuid']}/program/{uuid.uuid4()}",
        json=_program_patch(image),
        timeout=30,
    )
    assert r.status_code == 404, r.text
    assert latest_program(server, fpga["uuid"]) == before


@pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK50Warning")
def test_update_deployable_recurses_and_sends_nothing(sdk, server):
    """openstacksdk 4.x's deprecated ``update_deployable`` calls itself, not
    ``patch_deployable``: doc/compatibility.md says so; this fails once it is fixed."""
    fpga = deployable(server)
    before = latest_program(server, fpga["uuid"])
    image = upload(server, b"never sent\n")
    with pytest.raises(RecursionError):
        sdk.accelerator.update_deployable(fpga["uuid"], _program_patch(image))
    assert latest_program(server, fpga["uuid"]) == before


# -- openstack accelerator deployable program --------------------------------------------------


def test_cyborgclients_program_command_fails_on_that_recursion(server):
    fpga = deployable(server)
    before = latest_program(server, fpga["uuid"])
    image = upload(server, b"never sent either\n")
    cli = OpenStackCLI(f"{server.url}/v2", "cyborgclient")
    result = cli.run("accelerator", "deployable", "program", fpga["uuid"], image, check=False)
    assert result.returncode == 1, result
    assert "maximum recursion depth exceeded" in result.stderr
    assert latest_program(server, fpga["uuid"]) == before


@pytest.fixture(scope="module")
def glance_served(tmp_path_factory, keystone, glance):
    """``exosuit serve`` (noauth: it ignores the client's token) that also reads images
    from the tests' Glance, as its service user."""
    user = glance.users["exosuit-glance"]
    started = start(
        tmp_path_factory.mktemp("osc-program"),
        "[images]\nsources = exosuit, glance\n"
        f"[glance]\nauth_type = password\nauth_url = {keystone.url}\nusername = {user.name}\n"
        f"password = {user.password}\nproject_name = service\nuser_domain_name = Default\n"
        f"project_domain_name = Default\nregion_name = {REGION}\n",
    )
    try:
        yield started
    finally:
        started.kill()


def test_openstackclients_program_command_programs_the_fpga_from_glance(
    glance_served, keystone, glance
):
    """python-openstackclient's own ``openstack accelerator deployable program`` (the
    ``openstack`` command's since 10.x), as p1's admin of the tests' Keystone: it finds
    the image in Glance, then calls ``patch_deployable`` (…/program/{uuid}), which
    Exosuit serves: the FPGA is programmed with the Glance image."""
    server = glance_served
    admin = keystone.users["p1-admin"]
    session = keystone.session(keystone.password("p1-admin"))
    image = session.post(
        f"{glance.url}/v2/images",
        json={
            "name": "osc-bitstream",
            "disk_format": "raw",
            "container_format": "bare",
            "format": "simulated",
            "accel:function_id": FUNCTION,
        },
    ).json()["id"]
    session.put(
        f"{glance.url}/v2/images/{image}/file",
        data=b"a simulated bitstream in Glance\n",
        headers={"Content-Type": "application/octet-stream"},
    )
    fpga = deployable(server)
    before = latest_program(server, fpga["uuid"])
    auth = (
        "--os-auth-type", "password", "--os-auth-url", keystone.auth_url,
        "--os-username", admin.name, "--os-password", admin.password,
        "--os-project-id", admin.project_id, "--os-user-domain-id", "default",
        "--os-region-name", REGION,
    )  # fmt: skip
    # The accelerator's address is the override's (the catalog's Glance is the real one).
    env = client_env(OS_ACCELERATOR_ENDPOINT_OVERRIDE=f"{server.url}/v2")
    cli = OpenStackCLI(f"{server.url}/v2", "openstackclient")

    unknown = str(uuid.uuid4())
    result = cli.run(
        "accelerator", "deployable", "program", fpga["uuid"], unknown,
        auth=auth, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 1 and f"image not found: {unknown}" in result.stderr, result

    result = cli.run(
        "accelerator", "deployable", "program", fpga["uuid"], image,
        auth=auth, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result
    program = latest_program(server, fpga["uuid"])
    assert program != before
    assert (program["state"], program["image_uuid"]) == ("done", image)
    assert deployable(server)["bitstream_id"] == image
