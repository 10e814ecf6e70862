"""Identity: noauth defaults, keystonemiddleware, policy overrides, the sample commands.

The keystone tests run the real keystonemiddleware with Keystone pointed at a
loopback port that is bound but never listens, so every connection to it is
refused: a request without a token is rejected by the middleware itself (401),
and a request with a token really tries Keystone and fails (503). Tests with a
real Keystone come later.
"""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import uuid

import pytest
from keystonemiddleware import auth_token

from exosuit.api.deploy import NoAuthMiddleware, loadapp
from exosuit.api.policies import list_rules
from exosuit.conf import make_conf
from exosuit.context import RequestContext
from tests.conftest import PERSONAS, PROJECT, ApiClient
from tests.helpers.inventory import fpga, snapshot

ARQS = "/v2/accelerator_requests"


def _error(response) -> dict:
    return json.loads(response.json["error_message"])


def _write_conf(tmp_path: pathlib.Path, text: str) -> str:
    path = tmp_path / "exosuit.conf"
    # New devices ready, as before activation existed: the tests bind what they report.
    path.write_text(text + "\n[inventory]\nnew_device_activation = ready\n")
    return str(path)


def _seed(api: ApiClient) -> dict:
    """A host with one FPGA and a profile dp1; returns the deployable."""
    admin = api.as_(PERSONAS["admin"])
    r = api.as_(PERSONAS["service"]).put(
        "/agent/v1/hosts/host1/inventory", snapshot("host1", [fpga("0000:0c:00.0")])
    )
    assert r.status_code == 200, r.text
    r = admin.post("/v2/device_profiles", [{"name": "dp1", "groups": [{"resources:FPGA": "1"}]}])
    assert r.status_code == 201, r.text
    (deployable,) = admin.get("/v2/deployables").json["deployables"]
    return deployable


def _bind_body(arq: str, rp_uuid: str, instance: str) -> dict:
    return {
        arq: [
            {"op": "add", "path": "/hostname", "value": "host1"},
            {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
            {"op": "add", "path": "/instance_uuid", "value": instance},
        ]
    }


# -- noauth ------------------------------------------------------------------------------


def _noauth_context(headers: dict[str, str]) -> RequestContext:
    """The context the application builds from what NoAuthMiddleware passes on."""
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        start_response("204 No Content", [])
        return []

    environ = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    environ.update({"REQUEST_METHOD": "GET", "PATH_INFO": "/v2/devices"})
    NoAuthMiddleware(app)(environ, lambda status, headers, exc_info=None: None)
    return RequestContext.from_environ(seen)


def test_noauth_without_identity_is_an_admin_with_a_service_token():
    context = _noauth_context({})
    assert set(context.roles) == {"admin", "manager", "member", "reader", "service"}
    assert context.service_roles == ["service"]
    assert context.is_admin_role and context.has_service_token
    assert context.project_id is not None


def test_noauth_without_identity_can_do_everything_including_bind(sqlite_api):
    deployable = _seed(sqlite_api)
    anonymous = sqlite_api.as_({})
    assert anonymous.get("/v2/devices").status_code == 200
    r = anonymous.post(ARQS, {"device_profile_name": "dp1"})
    assert r.status_code == 201, r.text
    (arq,) = r.json["arqs"]
    instance = str(uuid.uuid4())
    r = anonymous.patch(ARQS, _bind_body(arq["uuid"], deployable["rp_uuid"], instance))
    assert r.status_code == 202, r.text
    r = sqlite_api.as_(PERSONAS["admin"]).get(f"{ARQS}/{arq['uuid']}")
    assert (r.json["state"], r.json["instance_uuid"]) == ("Bound", instance)
    r = anonymous.delete(f"{ARQS}?instance={instance}")
    assert r.status_code == 204, r.text


@pytest.mark.parametrize(
    ("headers", "roles", "service_roles"),
    [
        ({"X-User-Id": "u", "X-Project-Id": PROJECT}, [], []),
        ({"X-User-Id": "u", "X-Project-Id": PROJECT, "X-Roles": "reader"}, ["reader"], []),
        ({"X-Roles": "admin"}, ["admin"], []),
        ({"X-Project-Id": PROJECT, "X-Service-Roles": "service"}, [], ["service"]),
    ],
    ids=["no roles", "reader", "admin without service token", "service token only"],
)
def test_noauth_identity_headers_give_exactly_those_roles(headers, roles, service_roles):
    context = _noauth_context(headers)
    assert context.roles == roles
    assert context.service_roles == service_roles
    assert context.project_id == headers.get("X-Project-Id")
    assert context.has_service_token is bool(service_roles)


def test_noauth_admin_header_adds_no_implied_role_and_no_service_token(sqlite_api):
    """Roles are taken as sent (Keystone, not Exosuit, expands implied roles): an
    admin without member cannot create ARQs, and an admin named by headers has no
    service token, so it cannot bind."""
    deployable = _seed(sqlite_api)
    admin_only = sqlite_api.as_({"X-User-Id": "u", "X-Project-Id": PROJECT, "X-Roles": "admin"})
    assert admin_only.get("/v2/devices").status_code == 200
    assert admin_only.post(ARQS, {"device_profile_name": "dp1"}).status_code == 403
    admin = sqlite_api.as_({"X-User-Id": "u", "X-Project-Id": PROJECT, "X-Roles": "admin,member"})
    (arq,) = admin.post(ARQS, {"device_profile_name": "dp1"}).json["arqs"]
    r = admin.patch(ARQS, _bind_body(arq["uuid"], deployable["rp_uuid"], str(uuid.uuid4())))
    assert r.status_code == 403, r.text
    assert "requires a service token" in _error(r)["faultstring"]
    assert admin.get(f"{ARQS}/{arq['uuid']}").json["state"] == "Initial"


def test_noauth_headers_without_roles_get_nothing(sqlite_api):
    _seed(sqlite_api)
    nobody = sqlite_api.as_({"X-User-Id": "u", "X-Project-Id": PROJECT})
    assert nobody.get("/v2/device_profiles").status_code == 403
    assert nobody.get(ARQS).status_code == 403
    assert nobody.post(ARQS, {"device_profile_name": "dp1"}).status_code == 403
    assert sqlite_api.as_(PERSONAS["admin"]).get(ARQS).json["arqs"] == []


def test_a_caller_without_a_project_sees_no_project_arqs(sqlite_api):
    """Roles but no project: "project_id:%(project_id)s" would match None to None,
    and a non-admin scope of "no project" would be every project."""
    _seed(sqlite_api)
    created = sqlite_api.as_(PERSONAS["member"]).post(ARQS, {"device_profile_name": "dp1"})
    assert created.status_code == 201, created.text
    projectless = sqlite_api.as_(
        {"X-User-Id": "u", "X-Roles": "member,reader", "X-Service-Roles": "service"}
    )
    for r in (
        projectless.get(ARQS),
        projectless.post(ARQS, {"device_profile_name": "dp1"}),
        projectless.delete(f"{ARQS}?arqs={created.json['arqs'][0]['uuid']}"),
    ):
        assert r.status_code == 403, r.text
        assert _error(r)["code"] == "exosuit.policy.scope"
    assert len(sqlite_api.as_(PERSONAS["admin"]).get(ARQS).json["arqs"]) == 1


# -- keystone ----------------------------------------------------------------------------


@pytest.fixture
def closed_port():
    """A loopback port that is bound but never listens: connections are refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


def _keystone_conf(tmp_path, port: int, url: str, extra: str = ""):
    identity = f"http://127.0.0.1:{port}/identity"
    return make_conf(
        [
            _write_conf(
                tmp_path,
                f"""
[api]
auth_strategy = keystone
[database]
connection = {url}
[keystone_authtoken]
www_authenticate_uri = {identity}
auth_url = {identity}
auth_type = password
username = exosuit
password = secret
project_name = service
user_domain_name = Default
project_domain_name = Default
{extra}
""",
            )
        ]
    )


@pytest.fixture
def keystone_api(tmp_path, closed_port, sqlite_database):
    conf = _keystone_conf(tmp_path, closed_port, sqlite_database.url.render_as_string(False))
    return ApiClient(loadapp(conf, sqlite_database))


FORGED = {
    "X-User-Id": "u-admin",
    "X-Project-Id": PROJECT,
    "X-Roles": "admin,member,reader",
    "X-Service-Roles": "service",
    "X-Identity-Status": "Confirmed",
}


def test_keystone_pipeline_has_keystonemiddleware(keystone_api):
    # request id → request latency → public routes → keystonemiddleware → the API.
    public_routes = keystone_api.app.app.app
    assert isinstance(public_routes.protected, auth_token.AuthProtocol)
    assert public_routes.public is keystone_api.app.application


def test_keystone_without_token_is_401(keystone_api, closed_port):
    r = keystone_api.get("/v2/devices")
    assert r.status_code == 401, r.text
    assert r.headers["WWW-Authenticate"] == (
        f'Keystone uri="http://127.0.0.1:{closed_port}/identity"'
    )
    assert r.headers["x-openstack-request-id"].startswith("req-")


@pytest.mark.parametrize("path", ["/", "/v2", "/v2/", "/healthz"])
def test_keystone_public_routes_answer_without_token(keystone_api, path):
    r = keystone_api.get(path)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v2/devices", None),
        ("GET", ARQS, None),
        ("POST", "/v2/device_profiles", [{"name": "forged", "groups": [{"resources:FPGA": "1"}]}]),
        ("PUT", "/agent/v1/hosts/host1/inventory", snapshot("host1", [fpga("0000:0c:00.0")])),
    ],
)
def test_keystone_does_not_trust_identity_headers_without_token(
    keystone_api, sqlite_database, conf, method, path, body
):
    r = keystone_api.as_(FORGED).request(method, path, body)
    assert r.status_code == 401, r.text
    # Nothing was written: read back through a noauth app on the same database.
    admin = ApiClient(loadapp(conf, sqlite_database)).as_(PERSONAS["admin"])
    assert admin.get("/v2/device_profiles").json["device_profiles"] == []
    assert admin.get("/v2/devices").json["devices"] == []


def test_keystone_with_delayed_decision_strips_forged_roles(tmp_path, closed_port, sqlite_database):
    """Even when the middleware lets tokenless requests through, it removes the
    identity headers a client sent: the forged admin gets 403, not 200."""
    conf = _keystone_conf(
        tmp_path,
        closed_port,
        sqlite_database.url.render_as_string(False),
        "delay_auth_decision = true",
    )
    api = ApiClient(loadapp(conf, sqlite_database)).as_(FORGED)
    for r in (api.get("/v2/devices"), api.get(ARQS)):
        assert r.status_code == 403, r.text


def test_keystone_really_validates_tokens(keystone_api):
    """A token is sent to Keystone for validation; Keystone is unreachable, so 503."""
    r = keystone_api.get("/v2/devices", headers={"X-Auth-Token": "not-a-real-token"})
    assert r.status_code == 503, r.text
    assert "Keystone" in r.text


# -- policy file and the sample commands ---------------------------------------------


def test_policy_file_overrides_a_default(tmp_path, sqlite_database):
    policy = tmp_path / "policy.yaml"
    policy.write_text('"cyborg:device:get_all": "rule:project_member_or_admin"\n')
    url = sqlite_database.url.render_as_string(False)
    conf = make_conf(
        [
            _write_conf(
                tmp_path, f"[database]\nconnection = {url}\n[oslo_policy]\npolicy_file = {policy}\n"
            )
        ]
    )
    api = ApiClient(loadapp(conf, sqlite_database))
    _seed(api)
    member, reader = api.as_(PERSONAS["member"]), api.as_(PERSONAS["reader"])
    r = member.get("/v2/devices")
    assert r.status_code == 200, r.text
    assert len(r.json["devices"]) == 1
    # Only the overridden rule changed.
    (device,) = r.json["devices"]
    assert member.get(f"/v2/devices/{device['uuid']}").status_code == 403
    assert reader.get("/v2/devices").status_code == 403


def test_without_policy_file_member_cannot_list_devices(sqlite_api):
    _seed(sqlite_api)
    assert sqlite_api.as_(PERSONAS["member"]).get("/v2/devices").status_code == 403


def _manage(*args: str) -> subprocess.CompletedProcess:
    script = pathlib.Path(sys.executable).parent / "exosuit-manage"
    assert script.exists(), f"{script} is not installed (pip install -e .)"
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow  # runs exosuit-manage
def test_policy_sample_prints_every_rule():
    result = _manage("policy-sample")
    assert result.returncode == 0, result.stderr
    lines = {line.lstrip("#") for line in result.stdout.splitlines()}
    rules = list_rules()
    assert len(rules) > 20
    for rule in rules:
        assert f'"{rule.name}": "{rule.check_str}"' in lines, rule.name


@pytest.mark.slow  # runs exosuit-manage
def test_config_sample_prints_api_and_database_options():
    result = _manage("config-sample")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for section, option in [
        ("[api]", "#auth_strategy = noauth"),
        ("[database]", "#connection = sqlite:///$state_path/exosuit.sqlite"),
        ("[keystone_authtoken]", "#www_authenticate_uri = <None>"),
        ("[oslo_policy]", "#policy_file = policy.yaml"),
    ]:
        start = lines.index(section)
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines)
        )
        assert option in lines[start:end], (section, option)
