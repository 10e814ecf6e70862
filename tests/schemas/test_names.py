"""The one grammar of names (issue 24, item 5; doc/names.md): host, device (deployable),
driver and image names. Checked at the API (the inventory schema, the request schemas,
path arguments: 400 ``exosuit.name.invalid`` naming the rule) and by the agent before it
makes a folder whose name came from outside."""

from __future__ import annotations

import json
import os

import fastjsonschema
import jsonschema
import pytest

from exosuit import schemas
from exosuit.agent.plugins import DriverSet
from exosuit.conf import make_conf
from exosuit.schemas import names
from tests.helpers.claims import fault, fpga, make_world
from tests.helpers.inventory import snapshot

GOOD = [
    "compute-1.example.org",  # dots inside
    "0000:3b:00.0",  # a PCI address
    "fake_0000:5e:00.0",
    "...",
    ".hidden",
    "a b",
    "gpu-ü",
    "x" * 255,
    "nvidia_gpu",
]
BAD = [
    "",
    ".",
    "..",
    "../x",
    "a/b",
    "/",
    "a\x00b",
    "a\n",
    "\ttab",
    "del\x7f",
    "x" * 256,
]


@pytest.mark.parametrize("value", GOOD)
def test_a_name(value):
    assert names.is_name(value)
    assert names.check("host name", value) == value


@pytest.mark.parametrize("value", BAD)
def test_not_a_name(value):
    assert not names.is_name(value)
    with pytest.raises(names.NameInvalid) as caught:
        names.check("host name", value)
    assert names.RULE in str(caught.value) and "host name" in str(caught.value)


@pytest.mark.parametrize("value", GOOD + BAD)
def test_both_json_schema_validators_agree_with_the_module(value):
    fast = fastjsonschema.compile(names.SCHEMA)
    try:
        fast(value)
        fast_ok = True
    except fastjsonschema.JsonSchemaValueException:
        fast_ok = False
    assert fast_ok == names.is_name(value)
    slow_ok = jsonschema.Draft202012Validator(names.SCHEMA).is_valid(value)
    # Python's "$" also matches before a final newline: the fast validator (the API's
    # first) and the module refuse "a\n"; jsonschema alone would not.
    if value != "a\n":
        assert slow_ok == names.is_name(value)


def test_the_inventory_schema_carries_the_module_pattern():
    schema = schemas.inventory_schema()
    assert schema["$defs"]["name"]["pattern"] == names.PATTERN


def test_file_name_stays_in_its_folder(tmp_path):
    folder = str(tmp_path / "drivers")
    assert names.file_name(folder, "driver name", "nvidia_gpu") == os.path.join(
        folder, "nvidia_gpu"
    )
    for bad in ("..", ".", "../../etc", "a/b", ""):
        with pytest.raises(names.NameInvalid):
            names.file_name(folder, "driver name", bad)


def test_the_agent_makes_no_driver_folder_for_a_driver_named_dot_dot(tmp_path):
    conf = make_conf(
        **{"agent.enabled_drivers": [".."], "agent.state_dir": str(tmp_path / "state")}
    )
    with pytest.raises(names.NameInvalid, match="driver name"):
        DriverSet.from_conf(conf, "host-1", str(tmp_path))
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*"))


# -- at the API ------------------------------------------------------------------------


@pytest.fixture
def world(sqlite_database, tmp_path):
    return make_world(sqlite_database, tmp_path)


def _refused(r, where: str = "") -> dict:
    assert r.status_code == 400, r.text
    error = fault(r)
    assert error["code"] == names.CODE, error
    assert names.RULE in error["faultstring"], error
    assert where in error["faultstring"], error
    return error


def _mutations():
    """(id, how a good snapshot is made bad, where the message says it is)."""

    def deployable_name(body, value):
        body["devices"][0]["deployables"][0]["name"] = value

    def driver_name(body, value):
        body["devices"][0]["driver_name"] = value

    def deployable_driver(body, value):
        body["devices"][0]["deployables"][0]["driver_name"] = value

    def plugin(body, value):
        body["devices"][0]["plugin"] = value

    def driver_error(body, value):
        body["driver_errors"] = [{"driver": value, "error": "it broke"}]

    def drivers(body, value):
        body["drivers"] = [{"name": value, "enabled": True}]

    return [
        ("deployable-name", deployable_name, "devices/0/deployables/0/name"),
        ("device-driver", driver_name, "devices/0/driver_name"),
        ("deployable-driver", deployable_driver, "devices/0/deployables/0/driver_name"),
        ("plugin", plugin, "devices/0/plugin"),
        ("driver-error", driver_error, "driver_errors/0/driver"),
        ("drivers", drivers, "drivers/0/name"),
    ]


@pytest.mark.parametrize("value", ["..", ".", "../x", "a/b", "tab\t"])
@pytest.mark.parametrize(("field", "mutate", "where"), _mutations(), ids=lambda v: str(v)[:20])
def test_an_agent_snapshot_with_a_bad_name_is_refused_and_nothing_stored(
    world, field, mutate, where, value
):
    body = snapshot("host-1", [fpga("0000:5e:00.0")])
    mutate(body, value)
    r = world.agent.put("/agent/v1/hosts/host-1/inventory", body)
    _refused(r, where)
    assert world.admin.get("/v2/devices").json["devices"] == []


@pytest.mark.parametrize("hostname", ["..", "%2E%2E", "a%00b", "tab%09"])
def test_a_host_name_in_the_path_is_checked(world, hostname):
    body = snapshot("x", [fpga("0000:5e:00.0")])
    del body["hostname"]
    r = world.agent.put(f"/agent/v1/hosts/{hostname}/inventory", body)
    assert r.status_code in (400, 404), r.text
    if r.status_code == 400 and fault(r)["code"] != "exosuit.request.nul":  # NUL: refused first
        _refused(r)
    assert world.admin.get("/v2/devices").json["devices"] == []


def test_good_names_with_dots_are_stored(world):
    body = snapshot("compute-1.example.org", [fpga("0000:5e:00.0", name="fake.0000:5e:00.0")])
    r = world.agent.put("/agent/v1/hosts/compute-1.example.org/inventory", body)
    assert r.status_code == 200, r.text
    (device,) = world.admin.get("/v2/devices").json["devices"]
    assert device["hostname"] == "compute-1.example.org"


@pytest.mark.parametrize("value", ["..", ".", "../x", "a/b"])
def test_an_image_name_is_a_name(world, value):
    r = world.admin.post("/v2/images", {"name": value, "format": "gbs"}, version="2.6")
    _refused(r, "name")


@pytest.mark.parametrize("value", ["..", "../x", "a\x01"])
def test_a_driver_request_names_hosts_by_names(world, value):
    r = world.admin.post("/v2/drivers/fake/install", {"hostnames": [value]}, version="2.7")
    _refused(r, "hostnames/0")


@pytest.mark.parametrize("name", ["..", "."])
def test_a_driver_is_named_by_a_name(world, name):
    # The router keeps "." and ".." as path segments only when escaped.
    escaped = name.replace(".", "%2E")
    r = world.admin.post(f"/v2/drivers/{escaped}/install", {}, version="2.7")
    assert r.status_code in (400, 404), r.text
    if r.status_code == 400:
        _refused(r)
    r = world.admin.get("/v2/drivers", version="2.7")
    assert all(d["name"] not in (".", "..") for d in r.json["drivers"])


@pytest.mark.parametrize("value", ["..", "../x"])
def test_a_claim_names_its_host_by_a_name(world, value):
    r = world.member.post(
        "/v2/claims", {"device_profile_name": "p", "hostname": value}, version="2.8"
    )
    _refused(r, "hostname")


def test_the_doc_states_the_rule_and_the_code():
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "doc", "names.md")
    with open(doc) as f:
        text = f.read()
    assert names.CODE in text
    assert json.dumps(names.PATTERN)[1:-1].replace("\\\\", "\\") in text


# -- the recorded hosts' names are names -----------------------------------------------

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures")


@pytest.mark.parametrize("tree", sorted(os.listdir(FIXTURES)))
def test_every_recorded_host_reports_only_names(tree, tmp_path):
    """What every installed driver finds in each recorded sysfs tree passes the
    inventory schema, names included (a grammar that refused them would refuse a real
    host's whole report)."""
    from exosuit.agent import snapshot as snapshot_module
    from exosuit.agent.plugins import installed_plugins

    root = os.path.join(FIXTURES, tree)
    conf = make_conf(
        **{
            "agent.enabled_drivers": sorted(installed_plugins()),
            "agent.state_dir": str(tmp_path / "state"),
        }
    )
    plugins = DriverSet.from_conf(conf, "compute-1.example.org", root)
    found = snapshot_module.discover(plugins.drivers)
    body = snapshot_module.make_snapshot(
        "compute-1.example.org", found, plugins.report(found.found, found.failed)
    )
    assert body["devices"], f"{tree}: no device found"
    jsonschema.validate(body, schemas.inventory_schema())
    for device in body["devices"]:
        for deployable in device["deployables"]:
            assert names.is_name(deployable["name"])
