"""Say no to what cannot be honoured (issue 21): each refusal through the API, on SQLite,
PostgreSQL and MariaDB.

* From microversion 2.10 a GET with a query parameter its handler does not declare (its
  ``OPERATIONS`` entry, the one /openapi.json shows) is a 400 ``exosuit.query.unknown``
  naming it and the accepted ones; 2.0–2.9 stay as lenient as Cyborg.
* At every microversion: an unknown ``accel:`` key, a resource class or trait neither
  standard nor ``CUSTOM_``, a group with traits and no resources (400); installing or
  updating a driver no host reports (404, naming the drivers that exist); a partition
  layout the device's reported services cannot make (400, naming what it can make).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from exosuit.api import microversion, openapi, router
from exosuit.cli import base as cli_base
from exosuit.cli.app import COMMANDS
from tests.helpers.devices import HOST, OTHER, V2_7, device, drivers, report, service

STRICT = "2.10"
LENIENT = ("2.0", "2.3", "2.9")
V2_9 = "2.9"
DASHBOARD = Path(__file__).parents[2] / "exosuit" / "api" / "dashboard" / "static"


def _fault(response) -> dict:
    return json.loads(response.json["error_message"])


def _routes() -> list[router.Route]:
    return router.Router().routes


def _path(template: str) -> str:
    """A concrete path of a route template (path arguments that find nothing)."""
    values = {"hostname": "no-such-host", "name": "nope", "project_id": "p", "id": "1"}
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], str(uuid.uuid4())), template)


def _get_routes() -> list[router.Route]:
    return [r for r in _routes() if r.versioned and "GET" in r.methods]


# -- strict queries (2.10) ---------------------------------------------------------------


def test_a_typo_in_a_filter_is_refused_at_2_10_and_ignored_below(api):
    report(api, HOST, [device()])
    for version in LENIENT:
        r = api.get("/v2/devices?host=h2", version=version)
        assert r.status_code == 200, (version, r.text)
        assert len(r.json["devices"]) == 1  # the typo filtered nothing, as Cyborg does
    r = api.get("/v2/devices?host=h2", version=STRICT)
    assert r.status_code == 400, r.text
    fault = _fault(r)
    assert fault["code"] == "exosuit.query.unknown"
    assert "'host'" in fault["faultstring"]
    for accepted in ("hostname", "type", "vendor", "status", "activation", "limit", "marker"):
        assert accepted in fault["faultstring"]
    # Nova sends no microversion: 2.0, lenient.
    assert api.get("/v2/devices?host=h2").status_code == 200
    assert api.get(f"/v2/devices?hostname={HOST}", version=STRICT).status_code == 200


def _strict(route: router.Route) -> str:
    """2.10, or the later microversion the route exists from."""
    since = route.since_for("GET")
    return STRICT if since is None or since <= (2, 10) else f"{since[0]}.{since[1]}"


def test_every_get_refuses_an_unknown_parameter_at_2_10(api):
    """Lists and single resources alike; a GET that takes no parameter says so."""
    for route in _get_routes():
        path = _path(route.template) + "?bogus_param=1"
        r = api.get(path, version=_strict(route))
        assert r.status_code == 400, (route.template, r.text)
        fault = _fault(r)
        assert fault["code"] == "exosuit.query.unknown", (route.template, fault)
        assert "'bogus_param'" in fault["faultstring"]
        if not route.accepted["GET"]:
            assert "takes no query parameters" in fault["faultstring"], route.template
        for name in route.accepted["GET"]:
            assert name in fault["faultstring"], (route.template, name)


def test_every_declared_parameter_is_accepted_at_2_10(api):
    """A parameter the declaration names is never refused as unknown (a bad value may be
    refused for what it is, with its own code)."""
    report(api, HOST, [device()])
    for route in _get_routes():
        names = sorted(route.accepted["GET"])
        if not names:
            continue
        query = "&".join(f"{name}=x" for name in names)
        r = api.get(f"{_path(route.template)}?{query}", version=_strict(route))
        if r.status_code >= 400:
            assert _fault(r)["code"] != "exosuit.query.unknown", (route.template, r.text)


def test_other_methods_and_unversioned_paths_are_not_judged(api):
    r = api.get("/healthz?probe=1", version=STRICT)
    assert r.status_code == 200, r.text
    r = api.get("/v2?x=1", version=STRICT)
    assert r.status_code == 400  # /v2 is versioned and takes none
    r = api.get("/?x=1", version=STRICT)
    assert r.status_code == 200  # the root document carries no microversion
    r = api.post(
        "/v2/device_profiles?x=1",
        [{"name": "p-strict", "groups": [{"resources:FPGA": "1"}]}],
        version=STRICT,
    )
    assert r.status_code == 201, r.text


def test_the_arq_list_declares_its_filters_and_paging(api):
    for query in (
        f"instance={uuid.uuid4()}&bind_state=resolved",
        "state=Bound&hostname=h&device_profile_name=p",
        "limit=1&sort_key=created_at&sort_dir=asc",
    ):
        r = api.get(f"/v2/accelerator_requests?{query}", version=STRICT)
        assert r.status_code in (200, 423), (query, r.text)


# -- the clients never send what a handler does not declare ------------------------------


def _list_commands() -> list[type[cli_base.ListCommand]]:
    return [c for c in COMMANDS.values() if issubclass(c, cli_base.ListCommand)]


def test_the_cli_sends_only_declared_parameters():
    table = router.Router()
    commands = _list_commands()
    assert commands, "no list command found"
    for command in commands:
        found = table.match(router.normalize_path(command.path))
        assert found is not None, command.path
        route, _ = found
        sent = {f.field for f in command.filters if not f.local}
        if command.sort_keys:
            sent |= {"sort_key", "sort_dir"}
        sent.add("limit")
        assert route.unknown_query("GET", sent) is None, (command.__name__, sent)


_DASHBOARD_LIST = re.compile(r'api\.(?:list|listAll)\("(v2/\w+)",\s*"\w+",\s*\{([^}]*)\}')


def test_the_dashboard_sends_only_declared_parameters():
    table = router.Router()
    calls = 0
    for script in sorted(DASHBOARD.glob("*.js")):
        for path, query in _DASHBOARD_LIST.findall(script.read_text()):
            calls += 1
            names = {part.split(":")[0].strip() for part in query.split(",") if part.strip()}
            names.add("limit")  # listAll adds it
            found = table.match("/" + path)
            assert found is not None, path
            assert found[0].unknown_query("GET", names) is None, (script.name, path, names)
    assert calls >= 5, "the dashboard's list calls were not found"


def test_the_strict_microversion_is_a_known_one():
    assert "{}.{}".format(*router.STRICT_QUERIES) in microversion.VERSIONS


# -- device profile groups (every microversion) ------------------------------------------


@pytest.mark.parametrize(
    ("group", "said"),
    [
        ({"resources:FPGA": "1", "accel:colour": "red"}, "unknown key 'accel:colour'"),
        ({"resources:FPGA_THING": "1"}, "unsupported resource class 'FPGA_THING'"),
        ({"resources:FPGA": "1", "trait:FAST": "required"}, "unsupported trait name 'FAST'"),
        (
            {"trait:CUSTOM_FAKE_DEVICE": "required"},
            "trait:CUSTOM_FAKE_DEVICE without a resources: key: Placement needs a resource class",
        ),
    ],
    ids=["accel-key", "resource-class", "trait", "trait-without-resources"],
)
def test_a_group_that_cannot_be_honoured_is_refused_at_every_version(api, group, said):
    for version in ("2.0", STRICT):
        name = f"p-{uuid.uuid4().hex[:8]}"
        r = api.post("/v2/device_profiles", [{"name": name, "groups": [group]}], version=version)
        assert r.status_code == 400, (version, r.text)
        fault = _fault(r)
        assert fault["code"] == "exosuit.device_profile.invalid"
        assert said in fault["faultstring"], fault
        if said.startswith("unknown key"):
            assert "accel:bitstream_id" in fault["faultstring"]  # the known ones named
        assert api.get(f"/v2/device_profiles/{name}", version="2.2").status_code == 404


# -- drivers (every microversion that has them) ------------------------------------------


def test_installing_a_driver_no_host_reports_is_404_and_writes_nothing(api):
    report(api, HOST, [device()], drivers=drivers("fake", "nvme"))
    report(api, OTHER, drivers=drivers("pci"))
    for action in ("install", "update"):
        for body in ({}, {"hostnames": [HOST]}):
            r = api.post(f"/v2/drivers/nope/{action}", body, version=V2_7)
            assert r.status_code == 404, r.text
            fault = _fault(r)
            assert fault["code"] == "exosuit.driver.not_found"
            assert "nope" in fault["faultstring"]
            assert "fake, nvme" in fault["faultstring"]
            if "hostnames" not in body:
                assert "fake, nvme, pci" in fault["faultstring"]
    # A driver another host reports is not one this host has.
    r = api.post("/v2/drivers/pci/install", {"hostnames": [HOST]}, version=V2_7)
    assert r.status_code == 404, r.text
    listed = api.get("/v2/drivers?name=nope", version=V2_7).json["drivers"]
    assert listed == []
    assert api.get(f"/agent/v1/hosts/{HOST}/desired_state").json["drivers"] == {}
    r = api.post("/v2/drivers/nvme/install", {"hostnames": [HOST]}, version=V2_7)
    assert r.status_code == 202, r.text
    r = api.post("/v2/drivers/pci/update", {}, version=V2_7)
    assert r.status_code == 202, r.text


# -- partition layouts -------------------------------------------------------------------

GPU_SERVICES = (
    service("vgpu", "nvidia-222", False, available_instances="16", instances="0"),
    service("vgpu", "nvidia-223", False, available_instances="8", instances="0"),
    service("mig", "1g.5gb", False, max_instances="7", instances="0"),
    service("mig", "3g.20gb", False, max_instances="2", instances="0"),
)
NIC_SERVICES = (service("sriov", "vf", False, current="0", total="8"),)


def _uuids(api) -> dict[str, str]:
    found = api.get(f"/v2/devices?hostname={HOST}", version=V2_9).json["devices"]
    return {d["pci_address"]: d["uuid"] for d in found}


@pytest.mark.parametrize(
    ("layout", "said"),
    [
        ({"mig": {"2g.10gb": 1}}, "mig '2g.10gb' is not one of its MIG profiles: 1g.5gb, 3g.20gb"),
        ({"mig": {"3g.20gb": 3}}, "it makes at most 2 of mig '3g.20gb', not 3"),
        ({"mdev": {"nvidia-999": 1}}, "not one of its vGPU (mdev) types: nvidia-222, nvidia-223"),
    ],
    ids=["mig-profile", "mig-count", "mdev-type"],
)
def test_a_layout_the_gpu_cannot_make_is_refused(api, layout, said):
    report(api, HOST, [device("0000:0c:00.0", services=GPU_SERVICES)])
    uuid_ = _uuids(api)["0000:0c:00.0"]
    r = api.put(f"/v2/devices/{uuid_}/partitions", layout, version=V2_9)
    assert r.status_code == 400, r.text
    fault = _fault(r)
    assert fault["code"] == "exosuit.partition.unsupported"
    assert said in fault["faultstring"], fault
    shown = api.get(f"/v2/devices/{uuid_}/partitions", version=V2_9).json
    assert (shown["layout"], shown["state"]) == (None, None)
    assert api.get(f"/agent/v1/hosts/{HOST}/desired_state").json["partitions"] == []
    ok = api.put(f"/v2/devices/{uuid_}/partitions", {"mig": {"1g.5gb": 7}}, version=V2_9)
    assert ok.status_code == 202, ok.text


def test_vfs_beyond_the_reported_total_and_kinds_not_reported_are_refused(api):
    nic, bare = "0000:0c:00.0", "0000:0d:00.0"
    report(api, HOST, [device(nic, services=NIC_SERVICES), device(bare)])
    uuids = _uuids(api)
    r = api.put(f"/v2/devices/{uuids[nic]}/partitions", {"vfs": 9}, version=V2_9)
    assert r.status_code == 400, r.text
    assert "it reports at most 8 SR-IOV VFs, not 9" in _fault(r)["faultstring"]
    r = api.put(f"/v2/devices/{uuids[nic]}/partitions", {"mig": {"1g.5gb": 1}}, version=V2_9)
    assert r.status_code == 400, r.text
    assert "is not one of its MIG profiles: none" in _fault(r)["faultstring"]
    r = api.put(f"/v2/devices/{uuids[nic]}/partitions", {"vfs": 8}, version=V2_9)
    assert r.status_code == 202, r.text
    # A device that reports no VF total leaves the count to its driver.
    r = api.put(f"/v2/devices/{uuids[bare]}/partitions", {"vfs": 4}, version=V2_9)
    assert r.status_code == 202, r.text


# What a handler module reads of the query, named as a literal: req.GET.get("x"),
# req.GET["x"], text_param(req, "x"), query_list(req, "x"), _uuid_param(req, "x"), and
# the names of a loop over a literal tuple.
_READS = re.compile(
    r'(?:req\.GET\.get\(|req\.GET\[|(?:text_param|query_list|_uuid_param)\(req, )"(\w+)"'
)
_LOOPS = re.compile(r"for \w+ in \(((?:\"\w+\",?\s*)+)\):\n(?:.*\n){0,2}.*(?:text_param|GET)")


def test_every_parameter_a_handler_reads_is_declared():
    """The declaration the strict check reads is complete: a handler that reads a query
    parameter its module's OPERATIONS do not declare would refuse it at 2.10."""
    read_somewhere = 0
    for module in openapi.DESCRIBED:
        source = Path(module.__file__).read_text()
        read = set(_READS.findall(source))
        for names in _LOOPS.findall(source):
            read |= set(re.findall(r'"(\w+)"', names))
        declared = {
            q["name"] for handler, operation in module.OPERATIONS.items() for q in operation.query
        }
        assert read <= declared, (module.__name__, sorted(read - declared))
        read_somewhere += len(read)
    assert read_somewhere >= 20, "the handlers' reads were not found"
