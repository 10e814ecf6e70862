"""The real clients against a real ``exosuit serve``, without Keystone.

* openstacksdk's accelerator proxy (``conn.accelerator``);
* ``openstack accelerator …``: python-openstackclient's in-tree commands (what the
  ``openstack`` command runs) and python-cyborgclient's own command classes (through
  the same shell, see ``CYBORGCLIENT_SHELL``), each parsed from ``-f json``.

The simulated host ``client-host-1`` has a fake FPGA (resource class FPGA, trait
CUSTOM_FAKE_DEVICE, 16 TEST_PCI handles) and an NVIDIA GPU (one PCI handle).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from types import SimpleNamespace

import openstack
import pytest
from openstack import exceptions as sdk_exceptions

from exosuit.api import microversion
from tests.helpers.serve_fixture import OpenStackCLI, client_env, serving

# openstacksdk warns about its own internals, not our calls: the three warnings these
# tests meet (RemovedInSDK50Warning: "The 'service_type' parameter is unnecesary", "The
# _compute_attributes method is deprecated for removal"; RemovedInSDK60Warning: "Support
# for InfluxDB requires the influxdb library") are tolerated by their message in
# pyproject.toml's filterwarnings; any other warning fails the test.
pytestmark = pytest.mark.slow

HOST = "client-host-1"
FPGA_DEPLOYABLE = f"{HOST}_FakeDevice"
FPGA_GROUPS = [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]
DOC = Path(__file__).parents[2] / "doc" / "clients.md"


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One ``exosuit serve`` for the whole module."""
    with serving(tmp_path_factory.mktemp("exosuit-serve"), host=HOST) as server:
        yield server


@pytest.fixture(scope="module")
def inventory(server):
    """What the simulated host reported, read over plain HTTP (the reference values)."""
    devices = server.get("/v2/devices", version="2.3").json()["devices"]
    deployables = server.get("/v2/deployables").json()["deployables"]
    attributes = server.get("/v2/attributes").json()["attributes"]
    assert len(devices) == 2 and len(deployables) == 2, (devices, deployables)
    fpga_deployable = next(d for d in deployables if d["name"] == FPGA_DEPLOYABLE)
    gpu_deployable = next(d for d in deployables if d["name"] != FPGA_DEPLOYABLE)
    return SimpleNamespace(
        fpga=next(d for d in devices if d["type"] == "FPGA"),
        gpu=next(d for d in devices if d["type"] == "GPU"),
        fpga_deployable=fpga_deployable,
        gpu_deployable=gpu_deployable,
        # The deployables' integer ids, which only attributes show.
        fpga_deployable_id=next(
            a["deployable_id"] for a in attributes if a["key"] == "rc" and a["value"] == "FPGA"
        ),
        gpu_deployable_id=next(
            a["deployable_id"] for a in attributes if a["key"] == "rc" and a["value"] == "PGPU"
        ),
    )


@pytest.fixture(scope="module")
def sdk(server):
    """openstacksdk with no Keystone: auth type none, the server's root as endpoint."""
    conn = openstack.connect(auth_type="none", endpoint=server.url)
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def sdk_2_3(server):
    conn = openstack.connect(
        auth_type="none", endpoint=server.url, accelerator_default_microversion="2.3"
    )
    yield conn
    conn.close()


@pytest.fixture(scope="module", params=["openstackclient", "cyborgclient"])
def cli(request, server):
    return OpenStackCLI(f"{server.url}/v2", request.param)


def _status(server, device_uuid: str) -> str:
    return server.get(f"/v2/devices/{device_uuid}", version="2.3").json()["status"]


def _bind_ops(rp_uuid: str, instance: str) -> list[dict]:
    return [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]


UNBIND_OPS = [
    {"op": "remove", "path": f"/{f}"} for f in ("hostname", "device_rp_uuid", "instance_uuid")
]


def _assert_bound(arq, rp_uuid: str, instance: str) -> None:
    """An ARQ (SDK resource or parsed JSON) bound to the simulated FPGA."""
    get = arq.get if isinstance(arq, dict) else lambda k: getattr(arq, k)
    assert get("state") == "Bound"
    assert get("hostname") == HOST
    assert get("device_rp_uuid") == rp_uuid
    assert get("instance_uuid") == instance
    assert get("attach_handle_type") == "TEST_PCI"
    info = get("attach_handle_info")
    assert info["domain"] == "0000" and info["bus"] == "0c"  # the FPGA at 0000:0c:00.0
    assert int(info["function"]) in range(8) and info["device"] in ("00", "01")


def _assert_unbound(arq) -> None:
    get = arq.get if isinstance(arq, dict) else lambda k: getattr(arq, k)
    assert get("state") == "Unbound"
    assert get("hostname") is None and get("device_rp_uuid") is None
    assert get("instance_uuid") is None
    assert get("attach_handle_type") == "" and get("attach_handle_info") == {}


# --- openstacksdk --------------------------------------------------------------------------


def test_sdk_discovers_v2_without_a_token(sdk, server):
    data = sdk.accelerator.get_endpoint_data()
    assert data.url == f"{server.url}/v2/"
    assert data.api_version == (2, 0)
    assert data.min_microversion == (2, 0)
    latest = tuple(int(p) for p in microversion.VERSIONS[-1].split("."))
    assert data.max_microversion == latest


def test_sdk_with_an_endpoint_override_instead_of_discovery(server, inventory):
    conn = openstack.connect(auth_type="none", accelerator_endpoint_override=f"{server.url}/v2")
    try:
        assert {d.id for d in conn.accelerator.devices()} == {
            inventory.fpga["uuid"],
            inventory.gpu["uuid"],
        }
    finally:
        conn.close()


def test_sdk_lists_and_shows_the_simulated_devices(sdk, sdk_2_3, inventory):
    devices = sorted(sdk.accelerator.devices(), key=lambda d: d.type)
    assert [(d.type, d.vendor, d.model) for d in devices] == [
        ("FPGA", "0xABCD", "Fake FPGA"),
        ("GPU", "10de", inventory.gpu["model"]),
    ]
    fpga, gpu = devices
    assert fpga.id == inventory.fpga["uuid"] and gpu.id == inventory.gpu["uuid"]
    assert {d.hostname for d in devices} == {HOST}
    assert json.loads(fpga.std_board_info) == {"device_id": "0xabcd", "class": "Fake class"}
    assert json.loads(gpu.std_board_info)["controller"] == "3D controller"
    assert gpu.model in ("Tesla T4", "A100-SXM4-40GB", "H100-SXM5-80GB", "L40S")

    shown = sdk.accelerator.get_device(gpu.id)
    assert (shown.type, shown.vendor, shown.model, shown.hostname) == (
        "GPU",
        "10de",
        gpu.model,
        HOST,
    )
    assert shown.vendor_board_info == inventory.gpu["vendor_board_info"]
    # No microversion is sent, so no status (2.3); with one, the status is there.
    assert shown.status is None
    assert sdk_2_3.accelerator.get_device(gpu.id).status == "enabled"
    assert {d.status for d in sdk_2_3.accelerator.devices()} == {"enabled"}

    missing = str(uuid.uuid4())
    with pytest.raises(sdk_exceptions.NotFoundException) as error:
        sdk.accelerator.get_device(missing)
    assert f"Device {missing} could not be found" in str(error.value)


def test_sdk_at_the_strict_microversion_sends_only_declared_parameters(server, inventory):
    """At 2.10 an unknown query parameter is a 400 (doc/compatibility.md): the SDK's lists
    and shows, asked at that microversion, send none."""
    conn = openstack.connect(
        auth_type="none", endpoint=server.url, accelerator_default_microversion="2.10"
    )
    try:
        assert {d.uuid for d in conn.accelerator.devices()} == {
            inventory.fpga["uuid"],
            inventory.gpu["uuid"],
        }
        assert len(list(conn.accelerator.deployables())) == 2
        list(conn.accelerator.device_profiles())
        list(conn.accelerator.accelerator_requests())
        assert conn.accelerator.get_device(inventory.gpu["uuid"]).uuid == inventory.gpu["uuid"]
    finally:
        conn.close()


def test_sdk_lists_and_shows_deployables(sdk, inventory):
    deployables = {d.name: d for d in sdk.accelerator.deployables()}
    assert set(deployables) == {FPGA_DEPLOYABLE, inventory.gpu_deployable["name"]}
    fpga = deployables[FPGA_DEPLOYABLE]
    assert fpga.id == inventory.fpga_deployable["uuid"]
    assert fpga.num_accelerators == 16
    gpu = deployables[inventory.gpu_deployable["name"]]
    assert re.fullmatch(rf"{HOST}_0000_[0-9a-f]{{2}}_00_0", gpu.name)
    assert gpu.num_accelerators == 1
    assert fpga.device_id != gpu.device_id

    shown = sdk.accelerator.get_deployable(fpga.id)
    assert (shown.name, shown.num_accelerators, shown.device_id) == (
        FPGA_DEPLOYABLE,
        16,
        fpga.device_id,
    )
    with pytest.raises(sdk_exceptions.NotFoundException):
        sdk.accelerator.get_deployable(str(uuid.uuid4()))


def test_sdk_device_profile_create_get_list_delete(sdk, sdk_2_3):
    name = _unique("sdk-profile")
    profile = sdk.accelerator.create_device_profile(
        name=name, groups=FPGA_GROUPS, description="one fake FPGA"
    )
    assert profile.name == name and profile.groups == FPGA_GROUPS
    assert profile.description == "one fake FPGA"
    assert uuid.UUID(profile.id)

    shown = sdk.accelerator.get_device_profile(profile.id)
    assert (shown.name, shown.groups, shown.description) == (name, FPGA_GROUPS, "one fake FPGA")
    assert name in [p.name for p in sdk.accelerator.device_profiles()]
    # By name needs 2.2: refused at the SDK's default (2.0), found with a microversion.
    with pytest.raises(sdk_exceptions.HttpException) as error:
        sdk.accelerator.get_device_profile(name)
    assert error.value.status_code == 406
    by_name = sdk_2_3.accelerator.get_device_profile(name)
    assert by_name.uuid == profile.id
    assert by_name.id == name  # an SDK quirk: the id is what was asked for

    sdk.accelerator.delete_device_profile(profile, ignore_missing=False)
    with pytest.raises(sdk_exceptions.NotFoundException):
        sdk.accelerator.get_device_profile(profile.id)
    assert name not in [p.name for p in sdk.accelerator.device_profiles()]


def test_sdk_arq_create_get_list_bind_unbind_delete(sdk, inventory):
    name = _unique("sdk-arq")
    sdk.accelerator.create_device_profile(name=name, groups=FPGA_GROUPS)
    arq = sdk.accelerator.create_accelerator_request(device_profile_name=name)
    assert arq.state == "Initial"
    assert arq.device_profile_name == name and arq.device_profile_group_id == 0
    assert arq.hostname is None and arq.attach_handle_type == ""

    assert sdk.accelerator.get_accelerator_request(arq.id).state == "Initial"
    assert arq.id in [a.id for a in sdk.accelerator.accelerator_requests()]

    rp_uuid = inventory.fpga_deployable["rp_uuid"]
    instance = str(uuid.uuid4())
    sdk.accelerator.patch_accelerator_request(arq, _bind_ops(rp_uuid, instance))
    _assert_bound(sdk.accelerator.get_accelerator_request(arq.id), rp_uuid, instance)
    # What Nova then reads, through the same SDK session.
    listed = sdk.accelerator.get(
        "/accelerator_requests", params={"instance": instance, "bind_state": "resolved"}
    )
    assert listed.status_code == 200
    assert [a["uuid"] for a in listed.json()["arqs"]] == [arq.id]

    sdk.accelerator.patch_accelerator_request(arq, UNBIND_OPS)
    _assert_unbound(sdk.accelerator.get_accelerator_request(arq.id))

    sdk.accelerator.delete_accelerator_request(arq, ignore_missing=False)
    with pytest.raises(sdk_exceptions.NotFoundException):
        sdk.accelerator.get_accelerator_request(arq.id)
    sdk.accelerator.delete_device_profile(name)


def test_sdk_create_accelerator_request_returns_only_the_first_arq(sdk):
    """A client quirk: the server creates one ARQ per unit, openstacksdk returns one."""
    name = _unique("sdk-two")
    sdk.accelerator.create_device_profile(name=name, groups=[{"resources:FPGA": "2"}])
    created = sdk.accelerator.create_accelerator_request(device_profile_name=name)
    mine = [a for a in sdk.accelerator.accelerator_requests() if a.device_profile_name == name]
    assert len(mine) == 2
    assert created.id in {a.id for a in mine}
    for arq in mine:
        sdk.accelerator.delete_accelerator_request(arq)
    sdk.accelerator.delete_device_profile(name)


def test_sdk_attributes_list_create_get_delete(sdk, inventory):
    listed = {(a.deployable_id, a.key, a.value) for a in sdk.accelerator.attributes()}
    assert {
        (inventory.fpga_deployable_id, "rc", "FPGA"),
        (inventory.fpga_deployable_id, "trait0", "CUSTOM_FAKE_DEVICE"),
        (inventory.gpu_deployable_id, "rc", "PGPU"),
        (inventory.gpu_deployable_id, "trait0", "OWNER_CYBORG"),
    } <= listed

    attribute = sdk.accelerator.create_attribute(
        deployable_id=inventory.fpga_deployable_id, key="sdk_note", value="blue"
    )
    assert (attribute.deployable_id, attribute.key, attribute.value) == (
        inventory.fpga_deployable_id,
        "sdk_note",
        "blue",
    )
    shown = sdk.accelerator.get_attribute(attribute.id)
    assert (shown.key, shown.value) == ("sdk_note", "blue")
    assert attribute.id in [a.id for a in sdk.accelerator.attributes()]

    sdk.accelerator.delete_attribute(attribute, ignore_missing=False)
    with pytest.raises(sdk_exceptions.NotFoundException):
        sdk.accelerator.get_attribute(attribute.id)


def test_sdk_disable_and_enable_a_device(sdk, server, inventory):
    device = inventory.fpga["uuid"]
    try:
        sdk.accelerator.disable_device(device)
        assert _status(server, device) == "maintaining"
    finally:
        sdk.accelerator.enable_device(device)
    assert _status(server, device) == "enabled"


def test_clouds_yaml_from_the_docs_works_for_sdk_and_cli(server, inventory, tmp_path, monkeypatch):
    (snippet,) = [
        block
        for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
        if "auth_type: none" in block
    ]
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(snippet.replace("http://127.0.0.1:6666", server.url))
    expected = {inventory.fpga["uuid"], inventory.gpu["uuid"]}

    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds))
    conn = openstack.connect(cloud="exosuit")
    try:
        assert {d.id for d in conn.accelerator.devices()} == expected
    finally:
        conn.close()

    cli = OpenStackCLI(f"{server.url}/v2")
    rows = cli.json(
        "accelerator",
        "device",
        "list",
        auth=("--os-cloud", "exosuit"),
        env=client_env(OS_CLIENT_CONFIG_FILE=str(clouds)),
    )
    assert {r["uuid"] for r in rows} == expected


# --- openstack accelerator … (both implementations) ----------------------------------------


def test_cli_device_list_and_show(cli, inventory):
    result = cli.run("--debug", "accelerator", "device", "list", "-f", "json")
    rows = {r["uuid"]: r for r in json.loads(result.stdout)}
    # Which code ran: see serve_fixture.CYBORGCLIENT_SHELL.
    module = {
        "openstackclient": "openstackclient.accelerator.v2",
        "cyborgclient": "cyborgclient.osc.v2",
    }[cli.implementation]
    assert f"accelerator device list -> {module}.device.ListDevice" in result.stderr
    assert set(rows) == {inventory.fpga["uuid"], inventory.gpu["uuid"]}
    fpga, gpu = rows[inventory.fpga["uuid"]], rows[inventory.gpu["uuid"]]
    assert (fpga["type"], fpga["vendor"], fpga["hostname"]) == ("FPGA", "0xABCD", HOST)
    assert (gpu["type"], gpu["vendor"], gpu["hostname"]) == ("GPU", "10de", HOST)
    assert json.loads(fpga["std_board_info"]) == {"device_id": "0xabcd", "class": "Fake class"}

    # --long shows status only when a microversion >= 2.3 is asked for.
    long = {
        r["uuid"]: r for r in cli.json("accelerator", "device", "list", "--long", version="2.3")
    }
    assert long[inventory.fpga["uuid"]]["model"] == "Fake FPGA"
    assert long[inventory.gpu["uuid"]]["model"] == inventory.gpu["model"]
    assert {r["status"] for r in long.values()} == {"enabled"}

    shown = cli.json("accelerator", "device", "show", inventory.gpu["uuid"])
    assert (shown["uuid"], shown["type"], shown["model"], shown["hostname"]) == (
        inventory.gpu["uuid"],
        "GPU",
        inventory.gpu["model"],
        HOST,
    )
    assert shown["vendor_board_info"] == inventory.gpu["vendor_board_info"]
    assert shown.get("status") is None  # no microversion by default: 2.0


def test_cli_deployable_list_and_show(cli, inventory):
    rows = {r["name"]: r for r in cli.json("accelerator", "deployable", "list", "--long")}
    assert set(rows) == {FPGA_DEPLOYABLE, inventory.gpu_deployable["name"]}
    assert rows[FPGA_DEPLOYABLE]["uuid"] == inventory.fpga_deployable["uuid"]
    assert rows[FPGA_DEPLOYABLE]["num_accelerators"] == 16
    assert rows[inventory.gpu_deployable["name"]]["num_accelerators"] == 1

    shown = cli.json("accelerator", "deployable", "show", inventory.fpga_deployable["uuid"])
    assert (shown["uuid"], shown["name"]) == (inventory.fpga_deployable["uuid"], FPGA_DEPLOYABLE)


def test_cli_device_profile_create_list_show_delete(cli, sdk):
    name = _unique(f"{cli.implementation}-profile")
    if cli.implementation == "openstackclient":
        groups = ["--group", "resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required"]
    else:
        groups = [json.dumps(FPGA_GROUPS)]
    created = cli.json(
        "accelerator", "device", "profile", "create", name, *groups, "--description", "from the CLI"
    )
    assert created["name"] == name and created["groups"] == FPGA_GROUPS
    assert created["description"] == "from the CLI"

    listed = {r["name"]: r for r in cli.json("accelerator", "device", "profile", "list")}
    assert listed[name]["uuid"] == created["uuid"]
    assert listed[name]["groups"] == FPGA_GROUPS

    shown = cli.json("accelerator", "device", "profile", "show", created["uuid"])
    assert (shown["uuid"], shown["name"]) == (created["uuid"], name)
    # By name: 406 at the default microversion (the commands send none), found from 2.2.
    if cli.implementation == "openstackclient":
        refused = cli.run("accelerator", "device", "profile", "show", name, check=False)
        assert refused.returncode == 1
        assert "needs microversion 2.2 or later" in refused.stderr, refused.stderr
    assert (
        cli.json("accelerator", "device", "profile", "show", name, version="2.2")["uuid"]
        == created["uuid"]
    )

    cli.run("accelerator", "device", "profile", "delete", name)
    with pytest.raises(sdk_exceptions.NotFoundException):
        sdk.accelerator.get_device_profile(created["uuid"])


def test_cli_arq_create_list_show_bind_unbind_delete(cli, sdk, inventory):
    profile = _unique(f"{cli.implementation}-arq")
    sdk.accelerator.create_device_profile(name=profile, groups=FPGA_GROUPS)
    created = cli.json("accelerator", "arq", "create", profile)
    arq = created["uuid"]
    assert created["state"] == "Initial" and created["device_profile_name"] == profile

    listed = {r["uuid"]: r for r in cli.json("accelerator", "arq", "list", "--long")}
    assert listed[arq]["state"] == "Initial" and listed[arq]["hostname"] is None
    assert cli.json("accelerator", "arq", "show", arq)["device_profile_name"] == profile

    rp_uuid = inventory.fpga_deployable["rp_uuid"]
    instance = str(uuid.uuid4())
    if cli.implementation == "cyborgclient":
        # Answers with the ARQ as `arq show` shows it.
        bound = cli.json(
            "accelerator", "arq", "bind", arq, HOST, instance, rp_uuid, "ignored-project"
        )
    else:
        # python-openstackclient resolves <server> through Nova first; there is none here.
        refused = cli.run("accelerator", "arq", "bind", arq, HOST, instance, rp_uuid, check=False)
        assert refused.returncode == 1
        assert "/servers" in refused.stderr
        assert sdk.accelerator.get_accelerator_request(arq).state == "Initial"
        sdk.accelerator.patch_accelerator_request(arq, _bind_ops(rp_uuid, instance))
        bound = cli.json("accelerator", "arq", "show", arq)
    _assert_bound(bound, rp_uuid, instance)

    _assert_unbound(cli.json("accelerator", "arq", "unbind", arq))
    _assert_unbound(sdk.accelerator.get_accelerator_request(arq))

    cli.run("accelerator", "arq", "delete", arq)
    gone = cli.run("accelerator", "arq", "show", arq, check=False)
    assert gone.returncode == 1 and arq in gone.stderr
    assert re.search("not (be )?found", gone.stderr), gone.stderr
    sdk.accelerator.delete_device_profile(profile)


def test_cli_device_attribute_list_create_show_delete(cli, sdk, inventory):
    listed = {
        (r["deployable_id"], r["key"], r["value"])
        for r in cli.json("accelerator", "device", "attribute", "list")
    }
    assert (inventory.fpga_deployable_id, "rc", "FPGA") in listed
    assert (inventory.gpu_deployable_id, "rc", "PGPU") in listed

    key = f"{cli.implementation}_note"
    created = cli.json(
        "accelerator",
        "device",
        "attribute",
        "create",
        str(inventory.fpga_deployable_id),
        key,
        "red",
    )
    assert (created["deployable_id"], created["key"], created["value"]) == (
        inventory.fpga_deployable_id,
        key,
        "red",
    )
    shown = cli.json("accelerator", "device", "attribute", "show", created["uuid"])
    assert (shown["uuid"], shown["key"], shown["value"]) == (created["uuid"], key, "red")

    cli.run("accelerator", "device", "attribute", "delete", created["uuid"])
    with pytest.raises(sdk_exceptions.NotFoundException):
        sdk.accelerator.get_attribute(created["uuid"])


def test_cli_device_disable_and_enable(cli, server, inventory):
    device = inventory.gpu["uuid"]
    try:
        result = cli.run("accelerator", "device", "disable", device)
        assert result.stdout == ""
        assert _status(server, device) == "maintaining"
    finally:
        cli.run("accelerator", "device", "enable", device)
    assert _status(server, device) == "enabled"
