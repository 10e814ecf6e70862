"""The policy table again, with real Keystone tokens validated by keystonemiddleware.

A real Keystone runs on loopback (``keystone_fixture``); Exosuit's API runs as a
real HTTP server (cheroot, in a thread) with ``[api] auth_strategy = keystone``
and ``[keystone_authtoken]`` pointing at it, and is registered in Keystone's
catalog as service type ``accelerator``. No identity header is ever sent: each
persona of the table (tests/api/test_policy.py) is a token of a Keystone
user, and keystonemiddleware turns it into the headers the application reads.

============  =========================================================
persona       tokens sent
============  =========================================================
admin         p1-admin's (admin on p1; implies manager, member, reader)
member        p1-member's (member on p1; implies reader)
reader        p1-reader's
other_member  p2-member's (member on p2)
service       nova's (service on project service), also as X-Service-Token
nova          p1-member's, plus nova's as X-Service-Token (what Nova sends)
manager       p1-manager's
system admin  the bootstrap admin's, system-scoped, plus nova's service token
============  =========================================================

keystonemiddleware keeps validated tokens in its in-process cache
(``token_cache_time``), so each token costs Keystone one validation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import pathlib
import subprocess
import sys
import time
import urllib.parse
import uuid

import openstack
import pytest
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import service_token
from keystoneauth1 import session as ks_session
from webob import client as webob_client

from exosuit.api.deploy import loadapp
from exosuit.api.policies import list_rules
from exosuit.conf import make_conf
from exosuit.db.api import Database
from tests.api.test_policy import (
    ARQS,
    CASES,
    DENIED,
    INVENTORY_OPS,
    MANAGER,
    OK,
    OPS,
    PUBLIC_PATHS,
    SCOPED_OPS,
    SYSTEM_ADMIN,
    Op,
    Outcome,
    build_world,
    check_outcome,
    error_of,
)
from tests.conftest import PERSONAS, ApiClient, empty_database, new_database_url
from tests.helpers.keystone_fixture import (
    REGION,
    Keystone,
    authtoken_section,
)
from tests.helpers.live import serve_wsgi

# The Keystone user behind each persona's X-Auth-Token.
USER_OF = {
    "admin": "p1-admin",
    "member": "p1-member",
    "reader": "p1-reader",
    "other_member": "p2-member",
    "service": "nova",
    "nova": "p1-member",
    "manager": "p1-manager",
}
# The identity headers of the noauth table, by persona ("system_admin_alone": the
# system admin without a service token).
NOAUTH = {
    **PERSONAS,
    "manager": MANAGER,
    "system_admin": SYSTEM_ADMIN,
    "system_admin_alone": {
        "X-User-Id": SYSTEM_ADMIN["X-User-Id"],
        "X-Roles": "admin,manager,member,reader",
        "OpenStack-System-Scope": "all",
    },
    "anonymous": {},
}


def _key(headers: dict[str, str]) -> frozenset:
    return frozenset(headers.items())


def _http_app(base_url: str):
    """A WSGI app that sends each request over HTTP to ``base_url`` (webob's client)."""
    url = urllib.parse.urlsplit(base_url)

    def app(environ, start_response):
        environ = {
            **environ,
            "wsgi.url_scheme": url.scheme,
            "HTTP_HOST": url.netloc,
            "SERVER_NAME": url.hostname,
            "SERVER_PORT": str(url.port),
            "webob.client.timeout": 60,
        }
        return webob_client.send_request_app(environ, start_response)

    return app


class TokenClient(ApiClient):
    """The table's ApiClient, over HTTP: ``as_(persona headers)`` sends that
    persona's Keystone tokens instead of its identity headers."""

    def __init__(self, app, tokens: dict[frozenset, dict], headers=None) -> None:
        super().__init__(app, headers)
        self.tokens = tokens

    def as_(self, headers: dict[str, str]) -> TokenClient:
        return TokenClient(self.app, self.tokens, self.tokens[_key(headers)])


@dataclasses.dataclass
class Exosuit:
    url: str
    db: Database
    keystone: Keystone
    tokens: dict[str, dict[str, str]]  # persona → token headers

    def project(self, name: str) -> str:
        return self.keystone.projects[name]

    def identity(self, persona: str) -> dict[str, str]:
        """The X-Project-Id keystonemiddleware derives from the persona's token."""
        user = USER_OF.get(persona)
        return {} if user is None else {"X-Project-Id": self.keystone.users[user].project_id}

    def client(self) -> TokenClient:
        by_headers = {_key(NOAUTH[name]): headers for name, headers in self.tokens.items()}
        return TokenClient(_http_app(self.url), by_headers)


def _conf(workdir: pathlib.Path, keystone: Keystone, db_url: str, extra: str = ""):
    path = workdir / f"exosuit-{uuid.uuid4().hex[:8]}.conf"
    path.write_text(f"""\
[api]
auth_strategy = keystone
[database]
connection = {db_url}
# New devices ready, as before activation existed: the tests bind what they report.
[inventory]
new_device_activation = ready
{authtoken_section(keystone)}{extra}""")
    return make_conf([str(path)])


@contextlib.contextmanager
def _serving(workdir, keystone: Keystone, db: Database, extra: str = ""):
    conf = _conf(workdir, keystone, db.engine.url.render_as_string(hide_password=False), extra)
    with serve_wsgi(loadapp(conf, db)) as url:
        yield url


def _persona_tokens(keystone: Keystone) -> dict[str, dict[str, str]]:
    token = {user: keystone.token(user) for user in set(USER_OF.values())}
    nova, system = token["nova"], keystone.system_admin_token()
    return {
        **{persona: {"X-Auth-Token": token[user]} for persona, user in USER_OF.items()},
        # A service calling on its own account: its token is also its service token.
        "service": {"X-Auth-Token": nova, "X-Service-Token": nova},
        # Nova: the user's token, plus a service token of its own.
        "nova": {"X-Auth-Token": token["p1-member"], "X-Service-Token": nova},
        "system_admin": {"X-Auth-Token": system, "X-Service-Token": nova},
        "system_admin_alone": {"X-Auth-Token": system},
        "anonymous": {},
    }


@pytest.fixture(scope="module")
def exosuit(keystone, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("exosuit-keystone")
    db = Database(new_database_url("sqlite", None, tmp_path_factory))
    # The catalogue's image data in the module's folder, not the working directory.
    images = f"[images]\ndata_dir = {workdir}/images\n"
    with _serving(workdir, keystone, db, images) as url:
        keystone.register_service("accelerator", "exosuit", f"{url}/v2")
        yield Exosuit(url=url, db=db, keystone=keystone, tokens=_persona_tokens(keystone))
    db.dispose()


@pytest.fixture
def ks_api(exosuit) -> TokenClient:
    """A client of the live API, its database emptied."""
    empty_database(exosuit.db)
    return exosuit.client()


def _world(ks_api: TokenClient, exosuit: Exosuit, op: Op | None = None):
    op = op or next(o for o in OPS if o.name == "arq show")
    return build_world(ks_api, op, project=exosuit.project("p1"), db=exosuit.db)


# -- the personas are what the table says they are -------------------------------------


@pytest.mark.parametrize("persona", sorted(set(NOAUTH) - {"anonymous"}))
def test_persona_tokens_carry_the_roles_and_scope_of_the_table(exosuit, persona):
    """Keystone's own view of each token (implied roles expanded) matches the
    identity headers the noauth table uses for that persona."""
    headers, wanted = exosuit.tokens[persona], NOAUTH[persona]
    data = exosuit.keystone.token_data(headers["X-Auth-Token"])
    roles = set(wanted["X-Roles"].split(","))
    if persona == "system_admin":
        roles.discard("service")  # Keystone's system admin has none; its service token has
    assert {r["name"] for r in data["roles"]} == roles
    if persona.startswith("system_admin"):
        assert data["system"] == {"all": True} and "project" not in data
    else:
        assert data["project"]["id"] == exosuit.identity(persona)["X-Project-Id"]
    if "X-Service-Roles" in wanted:
        service = exosuit.keystone.token_data(headers["X-Service-Token"])
        assert {r["name"] for r in service["roles"]} == set(wanted["X-Service-Roles"].split(","))
    else:
        assert "X-Service-Token" not in headers


# -- the table -------------------------------------------------------------------------


def _one_op_per_pattern(cases: list[tuple[Op, str]]) -> list[tuple[Op, str]]:
    """The table's cases, keeping one operation for each pattern of outcomes (a read or
    a write, and what each persona gets): tests/api/test_policy.py runs every
    operation in-process, and what this module adds, real tokens turned into the same
    identity by keystonemiddleware, does not depend on the operation beyond that."""
    first: dict[tuple, str] = {}
    for op, _ in cases:
        pattern = (op.method == "GET", tuple(sorted(op.expect.items())))
        first.setdefault(pattern, op.name)
    kept = set(first.values())
    return [(op, persona) for op, persona in cases if op.name in kept]


REAL_TOKEN_CASES = _one_op_per_pattern(CASES)


@pytest.mark.parametrize(
    ("op", "persona"),
    REAL_TOKEN_CASES,
    ids=[f"{op.name}-{persona}" for op, persona in REAL_TOKEN_CASES],
)
def test_policy_with_real_tokens(ks_api, exosuit, op: Op, persona: str):
    world = build_world(ks_api, op, project=exosuit.project("p1"), db=exosuit.db)
    check_outcome(
        ks_api, op, world, NOAUTH[persona], op.expect[persona], identity=exosuit.identity(persona)
    )


@pytest.mark.parametrize("op", INVENTORY_OPS, ids=[op.name for op in INVENTORY_OPS])
def test_project_manager_token_reads_but_does_not_change_inventory(ks_api, exosuit, op: Op):
    world = build_world(ks_api, op, project=exosuit.project("p1"), db=exosuit.db)
    check_outcome(
        ks_api,
        op,
        world,
        MANAGER,
        OK if op.method == "GET" else DENIED,
        identity=exosuit.identity("manager"),
    )


# NOTE: keystonemiddleware sets OpenStack-System-Scope from the user token, then
# again from the service token: with a project-scoped service token besides, the
# system scope is gone and the caller arrives with admin roles but no project,
# which Application.authorize refuses before oslo.policy sees it.
SCOPE_REFUSED = {
    "system_admin_alone": Outcome(403, "exosuit.policy.scope", "system scope", changes=False),
    "system_admin": Outcome(
        403, "exosuit.policy.scope", "requires a project-scoped token", changes=False
    ),
}


# One operation per method: the refusal comes before any rule (Application.authorize),
# and tests/api/test_policy.py refuses every operation to the same identity.
SCOPED_BY_METHOD = list({op.method: op for op in reversed(SCOPED_OPS)}.values())


@pytest.mark.parametrize("persona", SCOPE_REFUSED)
@pytest.mark.parametrize("op", SCOPED_BY_METHOD, ids=[op.name for op in SCOPED_BY_METHOD])
def test_system_scoped_token_is_refused(ks_api, exosuit, op: Op, persona: str):
    """The bootstrap admin's system-scoped token (role admin on the system), alone
    or with Nova's service token, gets 403 on project-scoped rules (a read and each
    kind of write), and nothing changes."""
    world = build_world(ks_api, op, project=exosuit.project("p1"), db=exosuit.db)
    check_outcome(ks_api, op, world, NOAUTH[persona], SCOPE_REFUSED[persona])


# -- tokens keystonemiddleware refuses -------------------------------------------------


def _assert_401(r, keystone: Keystone) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["WWW-Authenticate"] == f'Keystone uri="{keystone.url}"'


@pytest.mark.parametrize("path", ["/v2/device_profiles", ARQS, "/v2/devices"])
def test_without_token_or_with_a_garbage_token_is_401(ks_api, exosuit, path):
    _assert_401(ks_api.get(path), exosuit.keystone)
    _assert_401(ks_api.get(path, headers={"X-Auth-Token": "not-a-token"}), exosuit.keystone)
    _assert_401(ks_api.get(path, headers={"X-Auth-Token": "gAAAAA" + "x" * 180}), exosuit.keystone)


def test_public_routes_answer_without_token(ks_api):
    for path in PUBLIC_PATHS:
        path = path.replace("{name}", "dashboard.css")
        assert ks_api.get(path).status_code == 200, path


def test_revoked_token_is_401(ks_api, exosuit):
    keystone = exosuit.keystone
    token = keystone.token("p1-member")
    keystone.revoke(token)
    _assert_401(ks_api.get("/v2/device_profiles", headers={"X-Auth-Token": token}), keystone)


def test_expired_token_is_401(ks_api, exosuit):
    """One token is used while valid (so it sits in the middleware's cache) and
    again once expired; another is first seen expired (Keystone no longer
    validates it). Both get 401."""
    keystone = exosuit.keystone
    unseen, _ = keystone.short_lived_token("p1-reader", 4)
    used, expiry = _token_used_while_valid(ks_api, keystone)
    time.sleep(max(0.0, (expiry - datetime.datetime.now(datetime.UTC)).total_seconds()) + 1.5)
    for token in (used, unseen):
        _assert_401(ks_api.get("/v2/device_profiles", headers={"X-Auth-Token": token}), keystone)


def _token_used_while_valid(ks_api, keystone: Keystone) -> tuple[str, datetime.datetime]:
    """A short-lived token that served one request while it was valid, and its expiry.

    A busy machine may take longer than a short lifetime between issuing the token and
    its first use (it then expired first): the lifetime grows until one is used in time,
    so the test never depends on how fast the machine is.
    """
    for lifetime in (5, 15, 45, 120):
        token, expiry = keystone.short_lived_token("p1-reader", lifetime)
        r = ks_api.get("/v2/device_profiles", headers={"X-Auth-Token": token})
        if r.status_code == 200:
            return token, expiry
        # Only an expired token may be refused: a 401 before the expiry is a real failure.
        assert r.status_code == 401 and datetime.datetime.now(datetime.UTC) >= expiry, r.text
    pytest.fail("no token was used before it expired, even one valid for 120 s")


def _bind_body(arq: str, rp_uuid: str, instance: str) -> dict:
    return {
        arq: [
            {"op": "add", "path": "/hostname", "value": "host1"},
            {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
            {"op": "add", "path": "/instance_uuid", "value": instance},
        ]
    }


def _arq_state(ks_api: TokenClient, arq: str) -> str:
    return ks_api.as_(PERSONAS["admin"]).get(f"{ARQS}/{arq}").json["state"]


def test_service_token_without_the_service_role_is_401(ks_api, exosuit):
    """service_token_roles_required: a user's token sent as X-Service-Token is no
    service token; keystonemiddleware refuses the request, and nothing is bound."""
    world = _world(ks_api, exosuit)
    member = exosuit.tokens["member"]["X-Auth-Token"]
    body = _bind_body(world.arq, world.rp_uuid, str(uuid.uuid4()))
    for service in (member, exosuit.tokens["admin"]["X-Auth-Token"], "not-a-token"):
        r = ks_api.patch(ARQS, body, headers={"X-Auth-Token": member, "X-Service-Token": service})
        _assert_401(r, exosuit.keystone)
    assert _arq_state(ks_api, world.arq) == "Initial"


def test_service_token_does_not_lend_its_project(ks_api, exosuit):
    """The ARQ's owner is checked against the user token: a member of p2 with
    Nova's service token can neither bind nor delete p1's ARQ."""
    world = _world(ks_api, exosuit)
    headers = {
        "X-Auth-Token": exosuit.tokens["other_member"]["X-Auth-Token"],
        "X-Service-Token": exosuit.tokens["nova"]["X-Service-Token"],
    }
    r = ks_api.patch(ARQS, _bind_body(world.arq, world.rp_uuid, str(uuid.uuid4())), headers=headers)
    assert r.status_code == 404, r.text
    r = ks_api.delete(f"{ARQS}?arqs={world.arq}", headers=headers)
    assert r.status_code == 404, r.text
    assert error_of(r)["code"] == "exosuit.arq.not_found"
    assert _arq_state(ks_api, world.arq) == "Initial"


def test_system_scoped_service_token_makes_the_call_system_scoped(ks_api, exosuit):
    """keystonemiddleware takes OpenStack-System-Scope from the service token when
    there is one: a project member's call with a system-scoped service token
    (role service on the system) is refused for its scope, and nothing is bound
    (doc/deploy-openstack.md: Nova's service token must be project-scoped)."""
    keystone = exosuit.keystone
    world = _world(ks_api, exosuit)
    nova = keystone.users["nova"]
    r = keystone.admin.put(
        f"{keystone.auth_url}/system/users/{nova.id}/roles/{keystone.roles['service']}"
    )
    assert r.status_code == 204, r.text
    try:
        system_service = keystone.password("nova", system=True).get_token(ks_session.Session())
        headers = {
            "X-Auth-Token": exosuit.tokens["member"]["X-Auth-Token"],
            "X-Service-Token": system_service,
        }
        r = ks_api.patch(
            ARQS, _bind_body(world.arq, world.rp_uuid, str(uuid.uuid4())), headers=headers
        )
        assert r.status_code == 403, r.text
        assert error_of(r)["code"] == "exosuit.policy.scope"
        assert ks_api.get(ARQS, headers=headers).status_code == 403
    finally:
        keystone.admin.delete(
            f"{keystone.auth_url}/system/users/{nova.id}/roles/{keystone.roles['service']}"
        )
    assert _arq_state(ks_api, world.arq) == "Initial"


# -- the catalog: clients find Exosuit as service type "accelerator" -------------------


def test_nova_style_session_binds_only_with_its_service_token(ks_api, exosuit):
    """What Nova does: a keystoneauth adapter for service type accelerator (found
    in the catalog), the user's token, and a service token from its service user
    (ServiceTokenAuthWrapper). Without the service token: 403 "requires a
    service token" on bind, delete by instance and delete of a bound ARQ."""
    keystone = exosuit.keystone
    world = _world(ks_api, exosuit)
    user_auth = keystone.password("p1-member")
    user = ks_adapter.Adapter(
        ks_session.Session(auth=user_auth),
        service_type="accelerator",
        interface="internal",
        region_name=REGION,
    )
    nova = ks_adapter.Adapter(
        ks_session.Session(
            auth=service_token.ServiceTokenAuthWrapper(
                user_auth=user_auth, service_auth=keystone.password("nova")
            )
        ),
        service_type="accelerator",
        interface="internal",
        region_name=REGION,
    )
    assert user.get_endpoint() == f"{exosuit.url}/v2"

    r = user.get("/device_profiles?name=dp1", raise_exc=False)
    assert r.status_code == 200 and len(r.json()["device_profiles"]) == 1, r.text
    instance = str(uuid.uuid4())
    body = _bind_body(world.arq, world.rp_uuid, instance)
    r = user.patch("/accelerator_requests", json=body, raise_exc=False)
    assert r.status_code == 403 and "requires a service token" in r.text, r.text
    r = nova.patch("/accelerator_requests", json=body, raise_exc=False)
    assert r.status_code == 202, r.text
    r = nova.get(f"/accelerator_requests?instance={instance}", raise_exc=False)
    assert [a["state"] for a in r.json()["arqs"]] == ["Bound"], r.text
    for path in (
        f"/accelerator_requests?instance={instance}",
        f"/accelerator_requests?arqs={world.arq}",
    ):
        r = user.delete(path, raise_exc=False)
        assert r.status_code == 403 and "requires a service token" in r.text, r.text
    r = nova.delete(f"/accelerator_requests?instance={instance}", raise_exc=False)
    assert r.status_code == 204, r.text
    assert user.get("/accelerator_requests").json()["arqs"] == []


def test_openstacksdk_finds_exosuit_in_the_catalog(ks_api, exosuit):
    keystone = exosuit.keystone
    world = _world(ks_api, exosuit)
    member = keystone.users["p1-member"]
    conn = openstack.connect(
        auth_url=keystone.auth_url,
        username=member.name,
        password=member.password,
        project_id=member.project_id,
        user_domain_id="default",
        region_name=REGION,
        interface="public",
    )
    try:
        assert sorted(p.name for p in conn.accelerator.device_profiles()) == ["dp1", "spare"]
        assert conn.accelerator.get_accelerator_request(world.arq).uuid == world.arq
        other = keystone.users["p2-member"]
        with openstack.connect(
            auth_url=keystone.auth_url,
            username=other.name,
            password=other.password,
            project_id=other.project_id,
            user_domain_id="default",
            region_name=REGION,
            interface="public",
        ) as stranger:
            assert list(stranger.accelerator.accelerator_requests()) == []
            with pytest.raises(openstack.exceptions.NotFoundException):
                stranger.accelerator.get_accelerator_request(world.arq)
    finally:
        conn.close()


# -- policy.yaml and the sample --------------------------------------------------------


def test_policy_file_overrides_a_default_under_keystone(exosuit, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text('"cyborg:device:get_all": "rule:project_member_or_admin"\n')
    empty_database(exosuit.db)
    extra = f"[oslo_policy]\npolicy_file = {policy}\n"
    with _serving(tmp_path, exosuit.keystone, exosuit.db, extra) as url:
        api = TokenClient(_http_app(url), exosuit.client().tokens)
        world = build_world(api, OPS[0], project=exosuit.project("p1"))
        member, reader = api.as_(PERSONAS["member"]), api.as_(PERSONAS["reader"])
        r = member.get("/v2/devices")
        assert r.status_code == 200, r.text
        assert [d["uuid"] for d in r.json["devices"]] == [world.device]
        # Only the overridden rule changed.
        assert member.get(f"/v2/devices/{world.device}").status_code == 403
        assert reader.get("/v2/devices").status_code == 403
    # The server without the file still refuses the member.
    assert exosuit.client().as_(PERSONAS["member"]).get("/v2/devices").status_code == 403


@pytest.mark.slow  # runs oslopolicy-sample-generator
def test_oslopolicy_sample_generator_prints_the_defaults():
    script = pathlib.Path(sys.executable).with_name("oslopolicy-sample-generator")
    result = subprocess.run(
        [str(script), "--namespace", "exosuit"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = {line.lstrip("#") for line in result.stdout.splitlines()}
    for rule in list_rules():
        assert f'"{rule.name}": "{rule.check_str}"' in lines, rule.name


# -- the agent, with Keystone credentials and no api_url -------------------------------


def _agent_conf(tmp_path: pathlib.Path, keystone: Keystone, user: str, password: str):
    path = tmp_path / f"agent-{uuid.uuid4().hex[:8]}.conf"
    path.write_text(f"""\
[DEFAULT]
host = catalog-host
[agent]
api_url =
enabled_drivers = simulated
state_dir = {tmp_path}/agent-state
auth_type = password
auth_url = {keystone.auth_url}
username = {user}
password = {password}
project_name = service
user_domain_name = Default
project_domain_name = Default
""")
    return make_conf([str(path)])


def test_the_agent_finds_the_api_in_the_catalog_and_reports_with_its_token(exosuit, tmp_path):
    from exosuit.agent.main import build_agent

    empty_database(exosuit.db)
    agent_user = exosuit.keystone.users["exosuit"]  # the service user: role service
    agent = build_agent(
        _agent_conf(tmp_path, exosuit.keystone, agent_user.name, agent_user.password)
    )
    # The catalog's internal endpoint, without /v2.
    assert agent.reporter.url == f"{exosuit.url}/agent/v1/hosts/catalog-host/inventory"
    snapshot = agent.snapshot()
    outcome = agent.deliver(snapshot)
    assert outcome is not None and outcome.kind == "ok", outcome
    r = exosuit.client().as_(PERSONAS["admin"]).get("/v2/devices?hostname=catalog-host")
    assert r.status_code == 200, r.text
    assert len(r.json["devices"]) == len(snapshot["devices"]) > 0


def test_the_agent_stops_with_the_reason_when_keystone_refuses_its_password(exosuit, tmp_path):
    from exosuit.agent.main import build_agent

    conf = _agent_conf(tmp_path, exosuit.keystone, "exosuit", "not-the-password")
    with pytest.raises(SystemExit, match="Keystone refused the agent's \\[agent\\] credentials"):
        build_agent(conf)
