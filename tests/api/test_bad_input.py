"""Bad input gets a 4xx in the API's error envelope, never a 500 (issue 14's findings).

Each test is named after the finding it guards; they run in-process on SQLite,
PostgreSQL and MariaDB (PostgreSQL refuses NUL and over-long strings, which made
several of them 500s there only).
"""

from __future__ import annotations

import json
import urllib.parse
import uuid

import pytest
import webob

from exosuit.api.deploy import loadapp
from exosuit.db import device_profiles as device_profiles_db
from tests.conftest import PERSONAS, ApiClient, make_test_conf
from tests.helpers.inventory import fpga, snapshot

V2_4 = "2.4"


def _code(response: webob.Response) -> str:
    assert response.content_type == "application/json", response.body[:200]
    return json.loads(response.json["error_message"])["code"]


def _raw(
    api,
    method: str,
    environ_path: str,
    query: str = "",
    body: bytes | None = None,
    headers: dict | None = None,
) -> webob.Response:
    """A request whose path and query are given as the server receives them (latin-1
    decoded bytes, as PEP 3333 says), which webob's blank() would re-encode."""
    req = webob.Request.blank("/")
    req.method = method
    req.environ["PATH_INFO"] = environ_path
    req.environ["QUERY_STRING"] = query
    for key, value in (headers or {}).items():
        req.headers[key] = value
    if body is not None:
        req.body = body
        req.content_type = "application/json"
    return req.get_response(api.app)


def test_invalid_utf8_in_the_path_is_400(api):
    r = _raw(api, "GET", "/v2/accelerator_requests/\xff")
    assert (r.status_code, _code(r)) == (400, "exosuit.request.encoding")


@pytest.mark.parametrize(
    "path", ["/v2/devices", "/v2/deployables", "/v2/accelerator_requests", "/v2/attributes",
             "/v2/device_profiles"])  # fmt: skip
def test_invalid_utf8_in_the_query_is_400(api, path):
    r = _raw(api, "GET", path, query="hostname=%ff&name=%ff")
    assert (r.status_code, _code(r)) == (400, "exosuit.request.encoding")


def test_deeply_nested_json_is_400(api):
    body = b"[" * 100_000 + b"]" * 100_000
    r = api.post("/v2/device_profiles", body)
    assert (r.status_code, _code(r)) in (
        (400, "exosuit.body.json"),
        (413, "exosuit.body.too_large"),
    )
    r = api.post("/v2/device_profiles", b"[" * 20_000 + b"]" * 20_000)  # under the size limit
    assert (r.status_code, _code(r)) == (400, "exosuit.body.json")


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\u0000"])
def test_a_lone_surrogate_or_nul_in_a_json_string_is_400(api, escape):
    body = f'[{{"name": "p{escape}", "groups": [{{"resources:FPGA": "1"}}]}}]'.encode()
    r = api.post("/v2/device_profiles", body)
    assert (r.status_code, _code(r)) == (400, "exosuit.body.string")
    r = api.post("/v2/accelerator_requests", f'{{"device_profile_name": "x{escape}"}}'.encode())
    assert (r.status_code, _code(r)) == (400, "exosuit.body.string")
    report = snapshot("h1", [fpga("0000:0c:00.0")])
    report["devices"][0]["vendor"] = "VENDOR-X"
    data = json.dumps(report).replace('"VENDOR-X"', f'"V{escape}"').encode()
    r = api.put("/agent/v1/hosts/h1/inventory", data)
    assert (r.status_code, _code(r)) == (400, "exosuit.body.string")
    assert api.get("/v2/devices").json["devices"] == []  # nothing written


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_in_a_body_is_400(api, constant):
    """Python's parser takes them; JSON has no such numbers (a usage figure of NaN would
    have been kept, and shown on /metrics)."""
    report = snapshot("h1", [fpga("0000:0c:00.0")])
    identity = next(iter(report["devices"]))["controlpath_id"]
    report["usage"] = {json.dumps(identity, sort_keys=True): {"utilization_percent": 1.5}}
    data = json.dumps(report).replace("1.5", constant).encode()
    r = api.put("/agent/v1/hosts/h1/inventory", data)
    assert (r.status_code, _code(r)) == (400, "exosuit.body.json"), r.text
    assert constant in r.text
    assert api.get("/v2/devices").json["devices"] == []  # nothing written


def test_a_surrogate_pair_is_a_character_and_passes(api):
    body = b'[{"name": "p1", "description": "\\ud83d\\ude00", "groups": [{"resources:FPGA": "1"}]}]'
    r = api.post("/v2/device_profiles", body)
    assert r.status_code == 201, r.text
    assert r.json["description"] == "\U0001f600"


@pytest.mark.parametrize(
    ("field", "value"),
    [("numa_node", 2**31), ("numa_node", 2**63 + 5), ("numa_node", -2)],
)
def test_unbounded_integers_in_a_snapshot_are_400(api, field, value):
    report = snapshot("h1", [fpga("0000:0c:00.0")])
    report["devices"][0][field] = value
    r = api.put("/agent/v1/hosts/h1/inventory", report)
    assert (r.status_code, _code(r)) == (400, "exosuit.body.invalid"), r.text


def test_a_huge_num_accelerators_is_400(api):
    report = snapshot("h1", [fpga("0000:0c:00.0")])
    report["devices"][0]["deployables"][0]["num_accelerators"] = 2**40
    r = api.put("/agent/v1/hosts/h1/inventory", report)
    assert (r.status_code, _code(r)) == (400, "exosuit.body.invalid"), r.text


def test_a_controlpath_id_too_long_for_its_column_is_400(api):
    report = snapshot("h1", [fpga("0000:0c:00.0")])
    report["devices"][0]["controlpath_id"]["cpid_info"]["bus"] = "b" * 300
    r = api.put("/agent/v1/hosts/h1/inventory", report)
    assert (r.status_code, _code(r)) == (400, "exosuit.body.invalid"), r.text


def test_nul_in_the_query_or_the_path_is_400(api):
    r = _raw(api, "GET", "/v2/devices", query="hostname=%00")
    assert (r.status_code, _code(r)) == (400, "exosuit.request.nul")
    r = _raw(api, "GET", "/v2/devices/\x00")
    assert (r.status_code, _code(r)) == (400, "exosuit.request.nul")
    r = _raw(api, "GET", "/v2/device_profiles/%00".replace("%00", "\x00"))
    assert (r.status_code, _code(r)) == (400, "exosuit.request.nul")


def test_a_host_name_longer_than_its_column_is_not_found(api):
    name = "h" * 300
    r = api.put(f"/agent/v1/hosts/{name}/inventory", snapshot(name, [fpga("0000:0c:00.0")]))
    assert (r.status_code, _code(r)) == (404, "exosuit.not_found")


def test_an_identity_header_longer_than_its_column_is_400(api):
    headers = {"X-Project-Id": "p" * 300, "X-User-Id": "u", "X-Roles": "admin"}
    r = api.get("/v2/device_profiles", headers=headers)
    assert (r.status_code, _code(r)) == (400, "exosuit.request.identity")
    assert "X-Project-Id" in json.loads(r.json["error_message"])["faultstring"]


def test_options_star_is_not_found(api):
    r = _raw(api, "OPTIONS", "*")
    assert (r.status_code, _code(r)) == (404, "exosuit.not_found")


def test_a_body_over_the_limit_is_413(api):
    limit = api.app.application.conf.api.max_body_size
    r = api.post("/v2/device_profiles", b"[" + b" " * limit + b"]")
    assert (r.status_code, _code(r)) == (413, "exosuit.body.too_large")
    # The agent API takes whole inventories: its limit is larger.
    assert api.app.application.conf.api.max_agent_body_size > limit


def _limit(r: webob.Response, option: str) -> str:
    """The 400 of a limit: its message, which names the option."""
    assert (r.status_code, _code(r)) == (400, "exosuit.limit.exceeded"), r.text
    message = json.loads(r.json["error_message"])["faultstring"]
    assert f"([api] {option})" in message, message
    return message


def test_a_patch_naming_too_many_arqs_is_400(api):
    """Regression (issue 14): one large PATCH held a server thread for many seconds."""
    ops = [{"op": "remove", "path": "/hostname"}]
    body = {f"00000000-0000-4000-8000-{n:012d}": ops for n in range(300)}
    r = api.patch("/v2/accelerator_requests", body)
    message = _limit(r, "max_arqs_per_patch")
    assert (
        message
        == "The PATCH names 300 accelerator requests; at most 256 ([api] max_arqs_per_patch)."
    )
    many_ops = {"00000000-0000-4000-8000-000000000001": ops * 50}
    r = api.patch("/v2/accelerator_requests", many_ops)
    assert "has 50 operations; at most 8" in _limit(r, "max_ops_per_arq")
    r = api.patch("/v2/accelerator_requests/00000000-0000-4000-8000-000000000001", ops * 9)
    _limit(r, "max_ops_per_arq")


def test_a_bind_value_longer_than_the_limit_is_400(api):
    ops = [
        {"op": "add", "path": "/hostname", "value": "h" * 256},
        {"op": "add", "path": "/device_rp_uuid", "value": str(uuid.uuid4())},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    r = api.patch("/v2/accelerator_requests", {str(uuid.uuid4()): ops})
    assert "256 characters long; at most 255" in _limit(r, "max_value_length")


def test_a_profile_with_too_many_groups_or_keys_is_400(api):
    groups = [{"resources:FPGA": "1"}] * 65
    r = api.post("/v2/device_profiles", [{"name": "big", "groups": groups}])
    assert _limit(r, "max_profile_groups").startswith("The device profile has 65 groups;")
    group = {f"accel:k{n}": "v" for n in range(65)} | {"resources:FPGA": "1"}
    r = api.post("/v2/device_profiles", [{"name": "wide", "groups": [group]}])
    assert _limit(r, "max_group_keys").startswith("groups[0] has 66 keys;")
    for group in ({"resources:FPGA": "1", "accel:k": "v" * 256}, {"accel:" + "k" * 250: "v"}):
        r = api.post("/v2/device_profiles", [{"name": "long", "groups": [group]}])
        _limit(r, "max_value_length")
    assert api.get("/v2/device_profiles").json["device_profiles"] == []


@pytest.mark.parametrize(
    "groups",
    [
        [{"resources:FPGA": "100000"}],
        [{"resources:FPGA": "40"}, {"resources:PGPU": "25"}],
        # attach_handles_per_unit (CUSTOM_FPGA_XILINX:2): 33 units are 66 requests.
        [{"resources:FPGA": "33", "trait:CUSTOM_FPGA_XILINX": "required"}],
    ],
)
def test_a_profile_making_more_arqs_than_one_request_may_is_400(api, groups):
    """Regression (issue 14): a profile of resources:FPGA=100000 was created (201) and one
    POST /v2/accelerator_requests then made 100,000 ARQs."""
    r = api.post("/v2/device_profiles", [{"name": "huge", "groups": groups}])
    assert "accelerator requests per POST" in _limit(r, "max_arqs_per_request")
    assert api.get("/v2/device_profiles").json["device_profiles"] == []


def test_arqs_of_a_profile_beyond_the_limit_made_before_it_are_400_and_none_is_made(api, database):
    """A profile created before the limit (or imported from Cyborg) is refused when used."""
    database.write(device_profiles_db.create, name="old", groups=[{"resources:FPGA": "100000"}])
    r = api.post("/v2/accelerator_requests", {"device_profile_name": "old"})
    message = _limit(r, "max_arqs_per_request")
    assert message == (
        "Device profile old makes 100000 accelerator requests; at most 64 "
        "([api] max_arqs_per_request)."
    )
    assert api.get("/v2/accelerator_requests").json["arqs"] == []
    r = api.post("/v2/device_profiles", [{"name": "most", "groups": [{"resources:FPGA": "64"}]}])
    assert r.status_code == 201, r.text
    r = api.post("/v2/accelerator_requests", {"device_profile_name": "most"})
    assert (r.status_code, len(r.json["arqs"])) == (201, 64)


def test_the_limits_are_options(database):
    conf = make_test_conf(
        **{
            "api.max_profile_groups": 2,
            "api.max_group_keys": 2,
            "api.max_value_length": 16,
            "api.max_arqs_per_request": 3,
            "api.max_arqs_per_patch": 1,
            "api.max_ops_per_arq": 4,
        }
    )
    api = ApiClient(loadapp(conf, database))
    group = {"resources:FPGA": "1"}
    r = api.post("/v2/device_profiles", [{"name": "p", "groups": [group] * 3}])
    assert "at most 2 ([api] max_profile_groups)" in _limit(r, "max_profile_groups")
    r = api.post(
        "/v2/device_profiles", [{"name": "p", "groups": [group | {"accel:a": "1", "accel:b": "2"}]}]
    )
    _limit(r, "max_group_keys")
    r = api.post("/v2/device_profiles", [{"name": "p", "groups": [group | {"accel:a": "x" * 17}]}])
    _limit(r, "max_value_length")
    r = api.post("/v2/device_profiles", [{"name": "p", "groups": [{"resources:FPGA": "4"}]}])
    _limit(r, "max_arqs_per_request")
    r = api.post("/v2/device_profiles", [{"name": "p", "groups": [group, {"resources:FPGA": "2"}]}])
    assert r.status_code == 201, r.text
    ops = [{"op": "remove", "path": "/hostname"}]
    r = api.patch("/v2/accelerator_requests", {str(uuid.uuid4()): ops, str(uuid.uuid4()): ops})
    _limit(r, "max_arqs_per_patch")
    r = api.patch("/v2/accelerator_requests", {str(uuid.uuid4()): ops * 5})
    _limit(r, "max_ops_per_arq")
    # Within them, as by default.
    r = api.patch("/v2/accelerator_requests", {str(uuid.uuid4()): ops * 4})
    assert (r.status_code, _code(r)) == (404, "exosuit.arq.not_found")


def test_the_value_length_limit_cannot_exceed_its_columns():
    with pytest.raises(ValueError):
        make_test_conf(**{"api.max_value_length": 256})


@pytest.mark.parametrize("value", [2**63, 2**31, "9223372036854775808", "2147483648", 0])
def test_a_deployable_id_beyond_its_column_is_400_when_creating_an_attribute(api, value):
    r = api.post("/v2/attributes", {"deployable_id": value, "key": "k", "value": "v"})
    assert (r.status_code, _code(r)) == (400, "exosuit.body.invalid"), r.text
    assert "deployable_id" in json.loads(r.json["error_message"])["faultstring"]


@pytest.mark.parametrize(
    "value", ["9223372036854775808", "2147483648", "1" * 400, "-1", "0", "+5", " 5", "٣"]
)
def test_a_deployable_id_beyond_its_column_is_400_in_the_query(api, value):
    r = api.get(f"/v2/attributes?deployable_id={urllib.parse.quote(value)}")
    assert (r.status_code, _code(r)) == (400, "exosuit.query.deployable_id"), r.text
    assert "from 1 to 2147483647" in json.loads(r.json["error_message"])["faultstring"]


def test_the_largest_deployable_id_is_a_deployable_that_does_not_exist(api):
    assert api.get("/v2/attributes?deployable_id=2147483647").json["attributes"] == []
    r = api.post("/v2/attributes", {"deployable_id": 2147483647, "key": "k", "value": "v"})
    assert (r.status_code, _code(r)) == (400, "exosuit.invalid"), r.text


def _marker_answers(api, path: str, foreign: str, persona: str = "member") -> list:
    """(status, code) of one page of ``path`` after ``foreign`` and after a made-up uuid."""
    caller = api.as_(PERSONAS[persona])
    answers = []
    for marker in (foreign, str(uuid.uuid4())):
        r = caller.get(f"{path}?marker={marker}", version="2.6")
        answers.append((r.status_code, _code(r) if r.status_code != 200 else None))
    return answers


def test_another_projects_arq_as_a_marker_is_not_found_like_a_random_one(api):
    """Regression (issue 14): it answered 200 (a page), a random uuid 400: an oracle."""
    api.post("/v2/device_profiles", [{"name": "p", "groups": [{"resources:FPGA": "1"}]}])
    theirs = api.as_(PERSONAS["other_member"]).post(
        "/v2/accelerator_requests", {"device_profile_name": "p"}
    )
    assert theirs.status_code == 201, theirs.text
    foreign = theirs.json["arqs"][0]["uuid"]
    answers = _marker_answers(api, "/v2/accelerator_requests", foreign)
    assert answers == [(400, "exosuit.invalid")] * 2
    # Its own project, and an admin, still page after it.
    for persona in ("other_member", "admin"):
        page = api.as_(PERSONAS[persona]).get(
            f"/v2/accelerator_requests?marker={foreign}", version="2.6"
        )
        assert page.status_code == 200, page.text


def test_another_projects_private_image_as_a_marker_is_not_found_like_a_random_one(api):
    theirs = api.as_(PERSONAS["other_member"]).post(
        "/v2/images", {"name": "private", "format": "simulated"}, version="2.6"
    )
    assert theirs.status_code == 201, theirs.text
    answers = _marker_answers(api, "/v2/images", theirs.json["uuid"])
    assert answers == [(400, "exosuit.invalid")] * 2


def _bind_ops(rp_uuid: str, instance: str) -> list[dict]:
    return [
        {"op": "add", "path": "/hostname", "value": "h1"},
        {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]


def test_another_projects_instance_neither_shows_nor_blocks_a_bind(api):
    """Regression (issue 14): binding to an instance another project had bound ARQs to
    answered 409 instance_already_bound (a random instance 202): an oracle, and a way
    to make another project's server fail to spawn. Within a project the rule holds."""
    assert (
        api.put("/agent/v1/hosts/h1/inventory", snapshot("h1", [fpga("0000:0c:00.0")])).status_code
        == 200
    )
    (deployable,) = api.get("/v2/deployables").json["deployables"]
    api.post("/v2/device_profiles", [{"name": "p", "groups": [{"resources:FPGA": "1"}]}])
    ours = api.as_(PERSONAS["nova"])  # a member's token and Nova's service token
    theirs = api.as_({**PERSONAS["other_member"], "X-Service-Roles": "service"})

    def new_arq(caller) -> str:
        r = caller.post("/v2/accelerator_requests", {"device_profile_name": "p"})
        assert r.status_code == 201, r.text
        return r.json["arqs"][0]["uuid"]

    instance = str(uuid.uuid4())
    their_arq = new_arq(theirs)
    r = theirs.patch(
        "/v2/accelerator_requests", {their_arq: _bind_ops(deployable["rp_uuid"], instance)}
    )
    assert r.status_code == 202, r.text

    answers = []
    for target in (instance, str(uuid.uuid4())):
        arq = new_arq(ours)
        r = ours.patch("/v2/accelerator_requests", {arq: _bind_ops(deployable["rp_uuid"], target)})
        answers.append(r.status_code)
        assert ours.get(f"/v2/accelerator_requests/{arq}").json["state"] == "Bound"
    assert answers == [202, 202]

    # One instance, one project: a second bound ARQ of ours for it is still refused.
    late = new_arq(ours)
    r = ours.patch("/v2/accelerator_requests", {late: _bind_ops(deployable["rp_uuid"], instance)})
    assert (r.status_code, _code(r)) == (409, "exosuit.arq.instance_already_bound")
    assert ours.get(f"/v2/accelerator_requests/{late}").json["state"] == "Initial"
    # Never one attach handle to two holders.
    bound = [a for a in api.get("/v2/accelerator_requests").json["arqs"] if a["state"] == "Bound"]
    assert len(bound) == 3
    assert len({a["attach_handle_uuid"] for a in bound}) == 3


def test_a_jobs_marker_beyond_the_id_column_is_400(api):
    """Regression (the fuzz campaign after issue 24): PostgreSQL cast a marker of 15 digits
    to the integer column and failed (500); a marker is compared as an integer now."""
    for path, code in (("/v2/jobs", 400), ("/v2/audit_events", 400)):
        r = api.get(f"{path}?marker=947985358000352", version="2.9")
        assert r.status_code == code, r.body
        assert "marker 947985358000352 not found" in r.text


def test_a_claim_of_a_group_asking_for_an_image_and_no_unit_is_not_a_500(api):
    """Regression (the fuzz campaign after issue 24): a group with an ``accel:`` key and no
    ``resources:`` has no unit to place; the image it asks for was still preferred for it
    (KeyError, 500)."""
    api.put("/agent/v1/hosts/h1/inventory", snapshot("h1", [fpga("0000:5e:00.0")]))
    profile = [
        {
            "name": "no-unit",
            "groups": [{"resources:FPGA": "1"}, {"accel:function_id": "f"}],
        }
    ]
    assert api.post("/v2/device_profiles", profile).status_code == 201
    r = api.post("/v2/claims", {"device_profile_name": "no-unit"}, version="2.10")
    assert r.status_code < 500, r.body
