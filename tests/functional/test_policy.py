"""Who may do what: every endpoint of the route table × every persona.

The expected outcomes are Cyborg's new persona defaults (cyborg-v2.md §1.6) and
its ARQ ownership and service-token rules (§1.7):

* device profiles: read by a project reader or an admin; created and deleted by
  an admin;
* devices, deployables, attributes: read by a project manager or an admin
  (members and readers get 403); changed only by an admin;
* ARQs: read by a project reader or an admin, created by a project member or a
  service; a caller that is not an admin sees only its own project's ARQs, so
  another project's ARQ is "not found" (404) and lists come back empty; bind,
  unbind, delete by instance and delete of a bound ARQ also need a service
  token (403 "requires a service token");
* the agent API: an admin or a service (the agent's credentials);
* ``/``, ``/v2``, ``/healthz``, ``/metrics``: everyone, with or without identity.

Each case builds its own world (a host inventory sent through the agent API,
profiles, an attribute, one ARQ of PROJECT, bound when the operation needs it),
sends one request as one persona, checks the status (and the error code), and
then reads the state back as an admin to check that the operation happened, or
did not.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable

import pytest
import webob

from exosuit.api.router import ROUTES
from tests.conftest import PERSONAS, PROJECT, ApiClient
from tests.helpers.inventory import fpga, snapshot

HOST = "host1"
PCI = "0000:0c:00.0"
# The personas of the table; "nova" (a member's token plus a service token) is
# added for the ARQ operations, "anonymous" (no identity headers) for public routes.
BASE_PERSONAS = ("admin", "member", "other_member", "reader", "service")
ARQ_PERSONAS = BASE_PERSONAS + ("nova",)
PUBLIC_PERSONAS = BASE_PERSONAS + ("anonymous",)
PUBLIC_PATHS = ("/", "/v2", "/healthz", "/metrics")
ADMIN = PERSONAS["admin"]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a persona gets: the status, the error code, words of the message.

    ``changes`` says whether the state read back afterwards must show the
    operation done (by default: a 2xx status). ``sees`` is for reads: whether the
    answer shows the world's object (False: an empty list).
    """

    status: int
    code: str | None = None
    text: str | None = None
    changes: bool | None = None
    sees: bool = True

    @property
    def done(self) -> bool:
        return self.status < 300 if self.changes is None else self.changes


OK = Outcome(200)
CREATED = Outcome(201)
ACCEPTED = Outcome(202)
DELETED = Outcome(204)
EMPTY = Outcome(200, sees=False)
NOOP = Outcome(204, changes=False)
DENIED = Outcome(403, "exosuit.policy.forbidden")
NEEDS_TOKEN = Outcome(403, "exosuit.service_token_required", "requires a service token")
ARQ_NOT_FOUND = Outcome(404, "exosuit.arq.not_found")
CANNOT_PROGRAM = Outcome(409, "exosuit.deployable.program_unsupported")
BAD_STATE = Outcome(409, "exosuit.arq.bad_state")


@dataclasses.dataclass
class World:
    """The data every case starts from (uuids and names, read back as admin)."""

    device: str
    deployable: str
    rp_uuid: str
    deployable_id: int
    attribute: str
    profile: dict
    spare_profile: dict
    arq: str
    instance: str | None
    project: str  # the project owning ``arq``


Call = Callable[[ApiClient, World], webob.Response]


@dataclasses.dataclass(frozen=True)
class Op:
    """One operation of the API: its route-table entry, request and checks.

    ``shows(response, world)`` (reads) is True when the answer contains the
    world's object; ``happened(admin, world, headers)`` (writes) reads the state
    back and is True when the operation took effect.
    """

    name: str
    path: str
    method: str
    call: Call
    expect: dict[str, Outcome]
    shows: Callable[[webob.Response, World], bool] | None = None
    happened: Callable[[ApiClient, World, dict], bool] | None = None
    bound: bool = False
    device_disabled: bool = False


def everyone(outcome: Outcome, personas=BASE_PERSONAS) -> dict[str, Outcome]:
    return dict.fromkeys(personas, outcome)


def admin_only(outcome: Outcome) -> dict[str, Outcome]:
    return {**everyone(DENIED), "admin": outcome}


# -- reading state back as an admin ------------------------------------------------------

def _admin(api: ApiClient) -> ApiClient:
    return api.as_(ADMIN)


def _arq_state(admin: ApiClient, world: World) -> str | None:
    r = admin.get(f"/v2/accelerator_requests/{world.arq}")
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json["state"]


def _arq_gone(admin: ApiClient, world: World, headers: dict) -> bool:
    return _arq_state(admin, world) is None


def _profile_names(admin: ApiClient) -> set[str]:
    r = admin.get("/v2/device_profiles")
    assert r.status_code == 200, r.text
    return {p["name"] for p in r.json["device_profiles"]}


def _device_status(admin: ApiClient, world: World) -> str:
    r = admin.get(f"/v2/devices/{world.device}", version="2.3")
    assert r.status_code == 200, r.text
    return r.json["status"]


def _attribute_keys(admin: ApiClient) -> set[str]:
    r = admin.get("/v2/attributes")
    assert r.status_code == 200, r.text
    return {a["key"] for a in r.json["attributes"]}


def _new_arq_of_caller(admin: ApiClient, world: World, headers: dict) -> bool:
    """A second ARQ exists, owned by the caller's project."""
    arqs = admin.get("/v2/accelerator_requests").json["arqs"]
    new = [a for a in arqs if a["uuid"] != world.arq]
    return len(new) == 1 and new[0]["project_id"] == headers.get("X-Project-Id")


# -- requests ------------------------------------------------------------------------------

def _bind_body(world: World) -> dict:
    return {world.arq: [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": world.rp_uuid},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]}


def _unbind_body(world: World) -> dict:
    return {world.arq: [{"op": "remove", "path": "/hostname"},
                        {"op": "remove", "path": "/device_rp_uuid"},
                        {"op": "remove", "path": "/instance_uuid"}]}


def _program_body() -> list:
    return [{"path": "/program", "op": "replace",
             "value": [{"image_uuid": "9a17439a-85d0-4c53-a3d3-0f68a2eac896"}]}]


def _two_fpgas() -> dict:
    return snapshot(HOST, [fpga(PCI), fpga("0000:0d:00.0")])


def _ids(key: str) -> Callable[[webob.Response, World], list[str]]:
    return lambda r, w: [item["uuid"] for item in r.json[key]]


ARQS = "/v2/accelerator_requests"
OPS: list[Op] = [
    # Public routes: version documents and the health check.
    Op("root", "/", "GET", lambda c, w: c.get("/"), everyone(OK, PUBLIC_PERSONAS),
       shows=lambda r, w: r.json["versions"][0]["id"] == "v2"),
    Op("v2", "/v2", "GET", lambda c, w: c.get("/v2"), everyone(OK, PUBLIC_PERSONAS),
       shows=lambda r, w: r.json["id"] == "v2.0"),
    Op("healthz", "/healthz", "GET", lambda c, w: c.get("/healthz"),
       everyone(OK, PUBLIC_PERSONAS), shows=lambda r, w: r.json == {"status": "ok"}),
    Op("metrics", "/metrics", "GET", lambda c, w: c.get("/metrics"),
       everyone(OK, PUBLIC_PERSONAS), shows=lambda r, w: "# TYPE exosuit_" in r.text),
    # Device profiles: project_reader_or_admin reads, admin_api writes.
    Op("profile list", "/v2/device_profiles", "GET",
       lambda c, w: c.get("/v2/device_profiles"),
       {**everyone(OK), "service": DENIED},
       shows=lambda r, w: w.profile["name"] in {p["name"] for p in r.json["device_profiles"]}),
    Op("profile show", "/v2/device_profiles/{ident}", "GET",
       lambda c, w: c.get(f"/v2/device_profiles/{w.profile['uuid']}"),
       {**everyone(OK), "service": DENIED},
       shows=lambda r, w: r.json["device_profile"]["name"] == w.profile["name"]),
    Op("profile create", "/v2/device_profiles", "POST",
       lambda c, w: c.post("/v2/device_profiles",
                           [{"name": "created", "groups": [{"resources:FPGA": "1"}]}]),
       admin_only(CREATED),
       happened=lambda a, w, h: "created" in _profile_names(a)),
    Op("profile delete ?value=", "/v2/device_profiles", "DELETE",
       lambda c, w: c.delete(f"/v2/device_profiles?value={w.spare_profile['name']}"),
       admin_only(DELETED),
       happened=lambda a, w, h: w.spare_profile["name"] not in _profile_names(a)),
    Op("profile delete /{uuid}", "/v2/device_profiles/{ident}", "DELETE",
       lambda c, w: c.delete(f"/v2/device_profiles/{w.spare_profile['uuid']}"),
       admin_only(DELETED),
       happened=lambda a, w, h: w.spare_profile["name"] not in _profile_names(a)),
    # ARQs (PROJECT owns the world's ARQ).
    Op("arq list", ARQS, "GET", lambda c, w: c.get(ARQS),
       {**everyone(OK, ARQ_PERSONAS), "other_member": EMPTY, "service": DENIED},
       shows=lambda r, w: [a["uuid"] for a in r.json["arqs"]] == [w.arq]),
    Op("arq show", ARQS + "/{uuid}", "GET", lambda c, w: c.get(f"{ARQS}/{w.arq}"),
       {**everyone(OK, ARQ_PERSONAS), "other_member": ARQ_NOT_FOUND, "service": DENIED},
       shows=lambda r, w: r.json["uuid"] == w.arq and r.json["project_id"] == w.project),
    Op("arq create", ARQS, "POST",
       lambda c, w: c.post(ARQS, {"device_profile_name": w.profile["name"]}),
       {**everyone(CREATED, ARQ_PERSONAS), "reader": DENIED},
       happened=_new_arq_of_caller),
    # A service user of its own project (not Nova's pair of tokens) is no admin:
    # it does not see PROJECT's ARQs (Cyborg's ExtARQ.get filters non-admins).
    Op("arq bind", ARQS, "PATCH", lambda c, w: c.patch(ARQS, _bind_body(w)),
       {**everyone(NEEDS_TOKEN, ARQ_PERSONAS), "reader": DENIED, "service": ARQ_NOT_FOUND,
        "nova": ACCEPTED},
       happened=lambda a, w, h: _arq_state(a, w) == "Bound"),
    Op("arq unbind", ARQS, "PATCH", lambda c, w: c.patch(ARQS, _unbind_body(w)),
       {**everyone(NEEDS_TOKEN, ARQ_PERSONAS), "reader": DENIED, "service": ARQ_NOT_FOUND,
        "nova": ACCEPTED},
       happened=lambda a, w, h: _arq_state(a, w) == "Unbound", bound=True),
    # openstacksdk and python-cyborgclient PATCH the ARQ's own URL: the same rules.
    Op("arq bind /{uuid}", ARQS + "/{uuid}", "PATCH",
       lambda c, w: c.patch(f"{ARQS}/{w.arq}", _bind_body(w)),
       {**everyone(NEEDS_TOKEN, ARQ_PERSONAS), "reader": DENIED, "service": ARQ_NOT_FOUND,
        "nova": ACCEPTED},
       happened=lambda a, w, h: _arq_state(a, w) == "Bound"),
    Op("arq unbind /{uuid}", ARQS + "/{uuid}", "PATCH",
       lambda c, w: c.patch(f"{ARQS}/{w.arq}", _unbind_body(w)[w.arq]),
       {**everyone(NEEDS_TOKEN, ARQ_PERSONAS), "reader": DENIED, "service": ARQ_NOT_FOUND,
        "nova": ACCEPTED},
       happened=lambda a, w, h: _arq_state(a, w) == "Unbound", bound=True),
    Op("arq delete ?arqs= unbound", ARQS, "DELETE",
       lambda c, w: c.delete(f"{ARQS}?arqs={w.arq}"),
       {**everyone(DELETED, ARQ_PERSONAS), "other_member": ARQ_NOT_FOUND, "reader": DENIED,
        "service": ARQ_NOT_FOUND},
       happened=_arq_gone),
    Op("arq delete ?arqs= bound", ARQS, "DELETE",
       lambda c, w: c.delete(f"{ARQS}?arqs={w.arq}"),
       {**everyone(NEEDS_TOKEN, ARQ_PERSONAS), "other_member": ARQ_NOT_FOUND,
        "reader": DENIED, "service": ARQ_NOT_FOUND, "nova": DELETED},
       happened=_arq_gone, bound=True),
    # Idempotent: a service user outside PROJECT gets 204 and deletes nothing.
    Op("arq delete ?instance=", ARQS, "DELETE",
       lambda c, w: c.delete(f"{ARQS}?instance={w.instance}"),
       {**everyone(NEEDS_TOKEN, ARQ_PERSONAS), "reader": DENIED, "service": NOOP,
        "nova": DELETED},
       happened=_arq_gone, bound=True),
    Op("arq delete /{uuid} unbound", ARQS + "/{uuid}", "DELETE",
       lambda c, w: c.delete(f"{ARQS}/{w.arq}"),
       {**everyone(DELETED, ARQ_PERSONAS), "other_member": ARQ_NOT_FOUND, "reader": DENIED,
        "service": ARQ_NOT_FOUND},
       happened=_arq_gone),
    Op("arq delete /{uuid} bound", ARQS + "/{uuid}", "DELETE",
       lambda c, w: c.delete(f"{ARQS}/{w.arq}"),
       {**everyone(NEEDS_TOKEN, ARQ_PERSONAS), "other_member": ARQ_NOT_FOUND,
        "reader": DENIED, "service": ARQ_NOT_FOUND, "nova": DELETED},
       happened=_arq_gone, bound=True),
    # Deployables: project_manager_or_admin reads, admin_api program.
    Op("deployable list", "/v2/deployables", "GET", lambda c, w: c.get("/v2/deployables"),
       admin_only(OK), shows=lambda r, w: _ids("deployables")(r, w) == [w.deployable]),
    Op("deployable show", "/v2/deployables/{uuid}", "GET",
       lambda c, w: c.get(f"/v2/deployables/{w.deployable}"),
       admin_only(OK), shows=lambda r, w: r.json["uuid"] == w.deployable),
    # No driver can program yet: the admin gets a 409 saying so, and nothing changes.
    Op("deployable program", "/v2/deployables/{uuid}/program", "PATCH",
       lambda c, w: c.patch(f"/v2/deployables/{w.deployable}/program", _program_body()),
       admin_only(CANNOT_PROGRAM),
       happened=lambda a, w, h: a.get(f"/v2/deployables/{w.deployable}")
       .json["bitstream_id"] is not None),
    # Devices: project_manager_or_admin reads, admin_api enable/disable.
    Op("device list", "/v2/devices", "GET", lambda c, w: c.get("/v2/devices"),
       admin_only(OK), shows=lambda r, w: _ids("devices")(r, w) == [w.device]),
    Op("device show", "/v2/devices/{uuid}", "GET",
       lambda c, w: c.get(f"/v2/devices/{w.device}"),
       admin_only(OK), shows=lambda r, w: r.json["uuid"] == w.device),
    Op("device enable", "/v2/devices/{uuid}/enable", "POST",
       lambda c, w: c.post(f"/v2/devices/{w.device}/enable"),
       admin_only(OK), happened=lambda a, w, h: _device_status(a, w) == "enabled",
       device_disabled=True),
    Op("device disable", "/v2/devices/{uuid}/disable", "POST",
       lambda c, w: c.post(f"/v2/devices/{w.device}/disable"),
       admin_only(OK), happened=lambda a, w, h: _device_status(a, w) == "maintaining"),
    # Attributes: project_manager_or_admin reads, admin_api writes.
    Op("attribute list", "/v2/attributes", "GET", lambda c, w: c.get("/v2/attributes"),
       admin_only(OK), shows=lambda r, w: w.attribute in _ids("attributes")(r, w)),
    Op("attribute show", "/v2/attributes/{uuid}", "GET",
       lambda c, w: c.get(f"/v2/attributes/{w.attribute}"),
       admin_only(OK), shows=lambda r, w: r.json["uuid"] == w.attribute),
    Op("attribute create", "/v2/attributes", "POST",
       lambda c, w: c.post("/v2/attributes",
                           {"deployable_id": w.deployable_id, "key": "created", "value": "1"}),
       admin_only(CREATED), happened=lambda a, w, h: "created" in _attribute_keys(a)),
    Op("attribute delete", "/v2/attributes/{uuid}", "DELETE",
       lambda c, w: c.delete(f"/v2/attributes/{w.attribute}"),
       admin_only(DELETED), happened=lambda a, w, h: "policy_test" not in _attribute_keys(a)),
    # The agent API: admin_or_service (the agent's credentials).
    Op("agent inventory", "/agent/v1/hosts/{hostname}/inventory", "PUT",
       lambda c, w: c.put(f"/agent/v1/hosts/{HOST}/inventory", _two_fpgas()),
       {**everyone(DENIED), "admin": OK, "service": OK},
       happened=lambda a, w, h: len(a.get("/v2/devices").json["devices"]) == 2),
    # The world's bind needs no host-side work: a report on it is refused (409) when
    # allowed at all (tests/nova/test_async_bind.py has the reports that count).
    Op("agent host work", "/agent/v1/hosts/{hostname}/accelerator_requests/{uuid}", "PUT",
       lambda c, w: c.put(f"/agent/v1/hosts/{HOST}/accelerator_requests/{w.arq}",
                          {"result": "failed", "reason": "policy test"}),
       {**everyone(DENIED), "admin": BAD_STATE, "service": BAD_STATE},
       happened=lambda a, w, h: _arq_state(a, w) != "Bound", bound=True),
]

CASES = [(op, persona) for op in OPS for persona in op.expect]


def build_world(api: ApiClient, op: Op, project: str = PROJECT) -> World:
    """Inventory (through the agent API), two profiles, an attribute, one ARQ of
    ``project`` (the member persona's project)."""
    agent, admin = api.as_(PERSONAS["service"]), _admin(api)
    r = agent.put(f"/agent/v1/hosts/{HOST}/inventory", snapshot(HOST, [fpga(PCI)]))
    assert r.status_code == 200, r.text
    profiles = {}
    for name in ("dp1", "spare"):
        r = admin.post("/v2/device_profiles",
                       [{"name": name, "groups": [{"resources:FPGA": "1"}]}])
        assert r.status_code == 201, r.text
        profiles[name] = r.json
    (device,) = admin.get("/v2/devices").json["devices"]
    (deployable,) = admin.get("/v2/deployables").json["deployables"]
    deployable_id = admin.get("/v2/attributes").json["attributes"][0]["deployable_id"]
    r = admin.post("/v2/attributes",
                   {"deployable_id": deployable_id, "key": "policy_test", "value": "x"})
    assert r.status_code == 201, r.text
    attribute = r.json["uuid"]
    r = api.as_(PERSONAS["member"]).post(ARQS, {"device_profile_name": "dp1"})
    assert r.status_code == 201, r.text
    (arq,) = r.json["arqs"]
    assert arq["project_id"] == project, arq
    world = World(device=device["uuid"], deployable=deployable["uuid"],
                  rp_uuid=deployable["rp_uuid"], deployable_id=deployable_id,
                  attribute=attribute, profile=profiles["dp1"],
                  spare_profile=profiles["spare"], arq=arq["uuid"], instance=None,
                  project=project)
    if op.bound:
        body = _bind_body(world)
        r = api.as_(PERSONAS["nova"]).patch(ARQS, body)
        assert r.status_code == 202, r.text
        world.instance = body[world.arq][2]["value"]
        assert _arq_state(admin, world) == "Bound"
    if op.device_disabled:
        r = admin.post(f"/v2/devices/{world.device}/disable")
        assert r.status_code == 200, r.text
    return world


def error_of(response: webob.Response) -> dict:
    return json.loads(response.json["error_message"])


@pytest.mark.parametrize(("op", "persona"), CASES,
                         ids=[f"{op.name}-{persona}" for op, persona in CASES])
def test_policy(sqlite_api, op: Op, persona: str):
    world = build_world(sqlite_api, op)
    headers = {} if persona == "anonymous" else PERSONAS[persona]
    check_outcome(sqlite_api, op, world, headers, op.expect[persona])


def check_outcome(api: ApiClient, op: Op, world: World, headers: dict, expected: Outcome,
                  identity: dict | None = None) -> None:
    """Send ``op`` with ``headers``; check the status, the error and, read back as an
    admin, the state. ``identity`` (default: ``headers``) holds the caller's
    X-Project-Id, for the checks that need it."""
    r = op.call(api.as_(headers), world)

    assert r.status_code == expected.status, r.text
    if expected.code is not None:
        error = error_of(r)
        assert error["code"] == expected.code, error
        if expected.text is not None:
            assert expected.text in error["faultstring"], error
    if op.shows is not None and r.status_code == 200:
        if expected.sees:
            assert op.shows(r, world), r.text
        else:
            assert all(not v for v in r.json.values() if isinstance(v, list)), r.text
            assert not op.shows(r, world), r.text
    if op.happened is not None:
        caller = headers if identity is None else identity
        assert op.happened(_admin(api), world, caller) is expected.done


MANAGER = {"X-User-Id": "u-manager", "X-Project-Id": PROJECT, "X-Roles": "manager,member,reader"}
INVENTORY_OPS = [op for op in OPS if op.path.startswith(("/v2/devices", "/v2/deployables",
                                                         "/v2/attributes"))]


@pytest.mark.parametrize("op", INVENTORY_OPS, ids=[op.name for op in INVENTORY_OPS])
def test_project_manager_reads_but_does_not_change_inventory(sqlite_api, op: Op):
    """project_manager_or_admin: a project manager reads devices, deployables and
    attributes (of every host, as Cyborg); changing them stays admin-only."""
    world = build_world(sqlite_api, op)
    r = op.call(sqlite_api.as_(MANAGER), world)
    if op.method == "GET":
        assert r.status_code == 200, r.text
        assert op.shows(r, world), r.text
    else:
        assert r.status_code == 403, r.text
        assert error_of(r)["code"] == "exosuit.policy.forbidden"
        assert op.happened(_admin(sqlite_api), world, MANAGER) is False


ARQ_OPS = [op for op in OPS if op.path.startswith(ARQS)]


@pytest.mark.parametrize("op", ARQ_OPS, ids=[op.name for op in ARQ_OPS])
def test_arq_ownership_on_every_backend(api, op: Op):
    """The table runs on SQLite; ownership is enforced in the database queries, so
    another project's member is also checked on PostgreSQL and MariaDB."""
    world = build_world(api, op)
    expected = op.expect["other_member"]
    r = op.call(api.as_(PERSONAS["other_member"]), world)
    assert r.status_code == expected.status, r.text
    if expected.code is not None:
        assert error_of(r)["code"] == expected.code
    if op.shows is not None and r.status_code == 200:
        assert op.shows(r, world) is expected.sees, r.text
    if op.happened is not None:
        assert op.happened(_admin(api), world, PERSONAS["other_member"]) is expected.done


# A system-scoped token as keystonemiddleware passes it on: OpenStack-System-Scope
# (oslo.context reads it), no project, every role.
SYSTEM_ADMIN = {"X-User-Id": "u-system", "X-Roles": "admin,manager,member,reader,service",
                "X-Service-Roles": "service", "OpenStack-System-Scope": "all"}
SCOPED_OPS = [op for op in OPS if op.path not in PUBLIC_PATHS]


@pytest.mark.parametrize("op", SCOPED_OPS, ids=[op.name for op in SCOPED_OPS])
def test_system_scope_is_refused(sqlite_api, op: Op):
    """Every rule is project-scoped and scope is enforced: a system admin gets 403."""
    world = build_world(sqlite_api, op)
    r = op.call(sqlite_api.as_(SYSTEM_ADMIN), world)
    assert r.status_code == 403, r.text
    error = error_of(r)
    assert error["code"] == "exosuit.policy.scope", error
    assert "system scope" in error["faultstring"], error
    if op.happened is not None:
        assert op.happened(_admin(sqlite_api), world, SYSTEM_ADMIN) is False


def test_system_scope_header_makes_a_public_route_no_different(sqlite_api):
    for path in PUBLIC_PATHS:
        assert sqlite_api.as_(SYSTEM_ADMIN).get(path).status_code == 200


def test_table_covers_every_route():
    """A new endpoint (or method) without policy cases fails here."""
    routes = {(path, method) for path, methods in ROUTES.items() for method in methods}
    covered = {(op.path, op.method) for op in OPS}
    assert covered - routes == set(), "cases for routes that do not exist"
    assert routes - covered == set(), "routes without policy cases"


def test_table_names_every_persona():
    for op in OPS:
        if op.path in PUBLIC_PATHS:
            wanted = set(PUBLIC_PERSONAS)
        elif op.path.startswith(ARQS):
            wanted = set(ARQ_PERSONAS)
        else:
            wanted = set(BASE_PERSONAS)
        assert set(op.expect) == wanted, op.name
        assert (op.shows is None) != (op.happened is None), op.name
    assert len({op.name for op in OPS}) == len(OPS)


def test_table_covers_the_distinct_arq_operations():
    names = {op.name for op in OPS if op.path.startswith(ARQS)}
    assert {"arq bind", "arq unbind", "arq delete ?arqs= unbound", "arq delete ?arqs= bound",
            "arq delete ?instance=", "arq delete /{uuid} unbound"} <= names
