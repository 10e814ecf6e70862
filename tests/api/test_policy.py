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
* the fleet views of microversion 2.5 (hosts, attach handles, jobs, summary): read
  by a project manager or an admin, as devices; a job retried only by an admin;
* the image catalogue (2.6): read by a project reader or an admin, created by a
  member; an image is changed (upload, delete, members) only by its owner's members
  or an admin, and is not found by a project that does not see it; the agent reads
  image data as an admin or a service;
* devices' activation, services, drivers and discoveries (2.7): read by a project
  manager or an admin, as devices (whose services and drivers they are); marking
  devices ready or inactive, installing, updating or uninstalling a driver and asking
  hosts to discover now only by an admin; an agent's activation outcome as an admin or
  a service;
* standalone claims (2.8): made, released and renewed by a project member or an admin,
  read by a project reader or an admin; a claim of another project is not found (404)
  and lists come back empty; an agent's CDI report as an admin or a service;
* a server's attach and detach (2.10): by a project member or an admin, as claims (an
  attachment is a claim); another project's attachment is not found (404);
* the caller's own permissions (2.11): everyone project-scoped;
* ``/``, ``/v2``, ``/healthz``, ``/metrics``, ``/openapi.json``: everyone, with or
  without identity.

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

from exosuit import schemas
from exosuit.api.router import ROUTES
from exosuit.db import jobs, programs
from exosuit.db.api import Database
from exosuit.drivers.base import Service
from tests.conftest import PERSONAS, PROJECT, ApiClient
from tests.helpers.inventory import fpga, snapshot

HOST = "host1"
PCI = "0000:0c:00.0"
# The personas of the table; "nova" (a member's token plus a service token) is
# added for the ARQ operations, "anonymous" (no identity headers) for public routes.
BASE_PERSONAS = ("admin", "member", "other_member", "reader", "service")
ARQ_PERSONAS = BASE_PERSONAS + ("nova",)
PUBLIC_PERSONAS = BASE_PERSONAS + ("anonymous",)
PUBLIC_PATHS = (
    "/",
    "/v2",
    "/healthz",
    "/metrics",
    "/openapi.json",
    "/dashboard",
    "/dashboard/static/{name}",
)
ADMIN = PERSONAS["admin"]
V2_5 = "2.5"  # the fleet views exist from this microversion on
IMAGES = "2.6"  # the image catalogue exists from this microversion on
IMAGE_DATA = b"policy test image \x00\x01\x02"
# A project a shared image of the world is shared with (none of the personas').
SHARED_WITH = "p3" + "0" * 30
PROGRAMS = "2.6"  # a deployable's program can be read from this microversion on
DEVICES_2_7 = "2.7"  # activation, services, drivers, discoveries exist from this one on
CLAIMS = "2.8"  # standalone claims exist from this microversion on
DRAIN = "2.9"  # drain (and partitions) exist from this microversion on
LABELS = "2.10"  # deleting a lost device and labels exist from this microversion on
SERVERS = "2.10"  # a server's attach and detach exist from this microversion on
PERMISSIONS = "2.11"  # the caller's permissions exist from this microversion on
SERVER = "policy-server"  # the consumer of the world's claim (a server's, for detach)


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
BAD_STATE = Outcome(409, "exosuit.arq.bad_state")
IMAGE_UNSEEN = Outcome(404, "exosuit.image.not_found")
CLAIM_NOT_FOUND = Outcome(404, "exosuit.claim.not_found")
NOT_ATTACHED = Outcome(404, "exosuit.server.not_attached")


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
    attach_handle: str = ""  # one of the FPGA's attach handles
    job: int = 0  # the host's Placement sync (failed when the operation needs it)
    image: str = ""  # an active, shared image of ``project`` (IMAGE_DATA)
    queued_image: str = ""  # a private image of ``project`` without data
    program: str = ""  # a program of the FPGA running (when the operation needs one)
    discovery: str = ""  # a discovery of the host (when the operation needs one)
    activation_generation: int = 0  # of the FPGA's deactivation (when one is asked)
    claim: str = ""  # a container claim of ``project`` (when the operation needs one)
    partition_generation: int = 0  # of the FPGA's partition layout (when one is set)
    audit_event: int = 0  # the audit record of ``arq``'s creation


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
    job_failed: bool = False
    imaged: bool = False  # the world has its images
    image_shared: bool = False  # its shared image is shared with SHARED_WITH
    programmed: bool = False
    discovered: bool = False  # the world has a discovery
    deactivating: bool = False  # an admin marked the FPGA inactive
    claimed: bool = False  # the world has a claim (of the member's project)
    partitioned: bool = False  # an admin set the FPGA's partition layout


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


def _device_health(admin: ApiClient, world: World) -> dict:
    return admin.get(f"/v2/devices/{world.device}", version="2.9").json["health"]


def _device_status(admin: ApiClient, world: World) -> str:
    r = admin.get(f"/v2/devices/{world.device}", version="2.3")
    assert r.status_code == 200, r.text
    return r.json["status"]


def _partition_state(admin: ApiClient, world: World) -> str | None:
    r = admin.get(f"/v2/devices/{world.device}/partitions", version=DRAIN)
    assert r.status_code == 200, r.text
    return r.json["state"]


def _job_state(admin: ApiClient, world: World) -> str:
    r = admin.get(f"/v2/jobs/{world.job}", version=V2_5)
    assert r.status_code == 200, r.text
    return r.json["state"]


def fail_a_job(db: Database) -> int:
    """Fail the oldest due job as a conductor would (claim, then record the failure)."""
    claimed = db.write(
        jobs.claim,
        "policy-test",
        lease_seconds=60,
        max_attempts=5,
        skip_locked=db.supports_skip_locked,
    )
    assert isinstance(claimed, jobs.ClaimedJob), claimed
    db.write(jobs.record, claimed.id, "policy-test", jobs.FAILED, attempts=1, error="test")
    return claimed.id


def start_a_program(admin: ApiClient, world: World, db: Database) -> str:
    """A running program of the world's deployable: its driver said it loads the
    ``simulated`` format (an operator's attribute), an image is queued onto it."""
    r = admin.post(
        "/v2/attributes",
        {"deployable_id": world.deployable_id, "key": "program_formats", "value": "simulated"},
    )
    assert r.status_code == 201, r.text
    image = programs.Image(str(uuid.uuid4()), "exosuit", "simulated", 4, "0" * 64)
    return db.write(programs.start, world.deployable, image).program["uuid"]


def _program_state(admin: ApiClient, world: World) -> str:
    r = admin.get(f"/v2/deployables/{world.deployable}/program", version=PROGRAMS)
    assert r.status_code == 200, r.text
    return r.json["state"]


def add_images(api: ApiClient, world: World, shared: bool) -> None:
    """The world's images, made by the member persona (of ``world.project``)."""
    member = api.as_(PERSONAS["member"])
    body = {"name": "policy-image", "format": "simulated", "visibility": "shared"}
    r = member.post("/v2/images", body, version=IMAGES)
    assert r.status_code == 201, r.text
    world.image = r.json["uuid"]
    r = member.put(f"/v2/images/{world.image}/file", IMAGE_DATA, version=IMAGES)
    assert r.status_code == 204, r.text
    r = member.post("/v2/images", {"name": "policy-queued", "format": "simulated"}, version=IMAGES)
    assert r.status_code == 201, r.text
    world.queued_image = r.json["uuid"]
    if shared:
        r = member.put(f"/v2/images/{world.image}/members/{SHARED_WITH}", version=IMAGES)
        assert r.status_code == 200, r.text


def _image(admin: ApiClient, uuid: str) -> dict | None:
    r = admin.get(f"/v2/images/{uuid}", version=IMAGES)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json


def _image_members(admin: ApiClient, world: World) -> list[str]:
    r = admin.get(f"/v2/images/{world.image}/members", version=IMAGES)
    assert r.status_code == 200, r.text
    return [m["project_id"] for m in r.json["members"]]


def _image_names(admin: ApiClient) -> set[str]:
    r = admin.get("/v2/images", version=IMAGES)
    assert r.status_code == 200, r.text
    return {i["name"] for i in r.json["images"]}


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
    return {
        world.arq: [
            {"op": "add", "path": "/hostname", "value": HOST},
            {"op": "add", "path": "/device_rp_uuid", "value": world.rp_uuid},
            {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
        ]
    }


def _unbind_body(world: World) -> dict:
    return {
        world.arq: [
            {"op": "remove", "path": "/hostname"},
            {"op": "remove", "path": "/device_rp_uuid"},
            {"op": "remove", "path": "/instance_uuid"},
        ]
    }


def _program_body() -> list:
    return [
        {
            "path": "/program",
            "op": "replace",
            "value": [{"image_uuid": "9a17439a-85d0-4c53-a3d3-0f68a2eac896"}],
        }
    ]


def _world_snapshot() -> dict:
    """The host's FPGA, with a service, and its driver's report."""
    device = dataclasses.replace(fpga(PCI), services=(Service("fpga_function", "f0", True),))
    body = snapshot(HOST, [device])
    body["drivers"] = [{"name": "fake", "version": "1", "enabled": True, "found": 1}]
    body["hash"] = schemas.snapshot_hash(body["devices"], body["driver_errors"], body["drivers"])
    return body


def _activation(admin: ApiClient, world: World) -> str:
    r = admin.get(f"/v2/devices/{world.device}", version=DEVICES_2_7)
    assert r.status_code == 200, r.text
    return r.json["activation"]


def _driver_wish(admin: ApiClient) -> dict:
    r = admin.get(f"/agent/v1/hosts/{HOST}/desired_state")
    assert r.status_code == 200, r.text
    return r.json["drivers"]


def _discoveries(admin: ApiClient) -> list[str]:
    r = admin.get("/v2/discoveries", version=DEVICES_2_7)
    assert r.status_code == 200, r.text
    return [d["uuid"] for d in r.json["discoveries"]]


def _two_fpgas() -> dict:
    return snapshot(HOST, [fpga(PCI), fpga("0000:0d:00.0")])


def _claim(admin: ApiClient, world: World) -> dict | None:
    r = admin.get(f"/v2/claims/{world.claim}", version=CLAIMS)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json


def _claims_of(admin: ApiClient, headers: dict) -> list[dict]:
    r = admin.get("/v2/claims", version=CLAIMS)
    assert r.status_code == 200, r.text
    return [c for c in r.json["claims"] if c["project_id"] == headers.get("X-Project-Id")]


def _ids(key: str) -> Callable[[webob.Response, World], list[str]]:
    return lambda r, w: [item["uuid"] for item in r.json[key]]


ARQS = "/v2/accelerator_requests"
OPS: list[Op] = [
    # Public routes: version documents and the health check.
    Op(
        "root",
        "/",
        "GET",
        lambda c, w: c.get("/"),
        everyone(OK, PUBLIC_PERSONAS),
        shows=lambda r, w: r.json["versions"][0]["id"] == "v2",
    ),
    Op(
        "v2",
        "/v2",
        "GET",
        lambda c, w: c.get("/v2"),
        everyone(OK, PUBLIC_PERSONAS),
        shows=lambda r, w: r.json["id"] == "v2.0",
    ),
    Op(
        "healthz",
        "/healthz",
        "GET",
        lambda c, w: c.get("/healthz"),
        everyone(OK, PUBLIC_PERSONAS),
        shows=lambda r, w: r.json == {"status": "ok"},
    ),
    Op(
        "metrics",
        "/metrics",
        "GET",
        lambda c, w: c.get("/metrics"),
        everyone(OK, PUBLIC_PERSONAS),
        shows=lambda r, w: "# TYPE exosuit_" in r.text,
    ),
    # The OpenAPI document describes the API, not its data: public, as the version documents.
    Op(
        "openapi",
        "/openapi.json",
        "GET",
        lambda c, w: c.get("/openapi.json"),
        everyone(OK, PUBLIC_PERSONAS),
        shows=lambda r, w: r.json["openapi"] == "3.1.0",
    ),
    # The dashboard's page and files hold no data: public (the data comes from the API).
    Op(
        "dashboard",
        "/dashboard",
        "GET",
        lambda c, w: c.get("/dashboard"),
        everyone(OK, PUBLIC_PERSONAS),
        shows=lambda r, w: "<html" in r.text,
    ),
    Op(
        "dashboard file",
        "/dashboard/static/{name}",
        "GET",
        lambda c, w: c.get("/dashboard/static/dashboard.css"),
        everyone(OK, PUBLIC_PERSONAS),
        shows=lambda r, w: r.headers["Content-Type"].startswith("text/css"),
    ),
    # The dashboard's Keystone sign-in: open to everyone (it is how a token is got).
    # Its outcome depends on [api] auth_strategy, not on the caller (tests/api/
    # dashboard/test_sign_in.py); a body without a password is refused alike in either mode.
    Op(
        "dashboard sign-in",
        "/dashboard",
        "POST",
        lambda c, w: c.post("/dashboard", {"username": "u", "project_name": "p"}),
        everyone(Outcome(400, "exosuit.body.invalid"), PUBLIC_PERSONAS),
        happened=lambda a, w, h: False,
    ),
    # Device profiles: project_reader_or_admin reads, admin_api writes.
    Op(
        "profile list",
        "/v2/device_profiles",
        "GET",
        lambda c, w: c.get("/v2/device_profiles"),
        {**everyone(OK), "service": DENIED},
        shows=lambda r, w: w.profile["name"] in {p["name"] for p in r.json["device_profiles"]},
    ),
    Op(
        "profile show",
        "/v2/device_profiles/{ident}",
        "GET",
        lambda c, w: c.get(f"/v2/device_profiles/{w.profile['uuid']}"),
        {**everyone(OK), "service": DENIED},
        shows=lambda r, w: r.json["device_profile"]["name"] == w.profile["name"],
    ),
    Op(
        "profile create",
        "/v2/device_profiles",
        "POST",
        lambda c, w: c.post(
            "/v2/device_profiles", [{"name": "created", "groups": [{"resources:FPGA": "1"}]}]
        ),
        admin_only(CREATED),
        happened=lambda a, w, h: "created" in _profile_names(a),
    ),
    Op(
        "profile delete ?value=",
        "/v2/device_profiles",
        "DELETE",
        lambda c, w: c.delete(f"/v2/device_profiles?value={w.spare_profile['name']}"),
        admin_only(DELETED),
        happened=lambda a, w, h: w.spare_profile["name"] not in _profile_names(a),
    ),
    Op(
        "profile delete /{uuid}",
        "/v2/device_profiles/{ident}",
        "DELETE",
        lambda c, w: c.delete(f"/v2/device_profiles/{w.spare_profile['uuid']}"),
        admin_only(DELETED),
        happened=lambda a, w, h: w.spare_profile["name"] not in _profile_names(a),
    ),
    # ARQs (PROJECT owns the world's ARQ).
    Op(
        "arq list",
        ARQS,
        "GET",
        lambda c, w: c.get(ARQS),
        {**everyone(OK, ARQ_PERSONAS), "other_member": EMPTY, "service": DENIED},
        shows=lambda r, w: [a["uuid"] for a in r.json["arqs"]] == [w.arq],
    ),
    Op(
        "arq show",
        ARQS + "/{uuid}",
        "GET",
        lambda c, w: c.get(f"{ARQS}/{w.arq}"),
        {**everyone(OK, ARQ_PERSONAS), "other_member": ARQ_NOT_FOUND, "service": DENIED},
        shows=lambda r, w: r.json["uuid"] == w.arq and r.json["project_id"] == w.project,
    ),
    Op(
        "arq create",
        ARQS,
        "POST",
        lambda c, w: c.post(ARQS, {"device_profile_name": w.profile["name"]}),
        {**everyone(CREATED, ARQ_PERSONAS), "reader": DENIED},
        happened=_new_arq_of_caller,
    ),
    # A service user of its own project (not Nova's pair of tokens) is no admin:
    # it does not see PROJECT's ARQs (Cyborg's ExtARQ.get filters non-admins).
    Op(
        "arq bind",
        ARQS,
        "PATCH",
        lambda c, w: c.patch(ARQS, _bind_body(w)),
        {
            **everyone(NEEDS_TOKEN, ARQ_PERSONAS),
            "reader": DENIED,
            "service": ARQ_NOT_FOUND,
            "nova": ACCEPTED,
        },
        happened=lambda a, w, h: _arq_state(a, w) == "Bound",
    ),
    Op(
        "arq unbind",
        ARQS,
        "PATCH",
        lambda c, w: c.patch(ARQS, _unbind_body(w)),
        {
            **everyone(NEEDS_TOKEN, ARQ_PERSONAS),
            "reader": DENIED,
            "service": ARQ_NOT_FOUND,
            "nova": ACCEPTED,
        },
        happened=lambda a, w, h: _arq_state(a, w) == "Unbound",
        bound=True,
    ),
    # openstacksdk and python-cyborgclient PATCH the ARQ's own URL: the same rules.
    Op(
        "arq bind /{uuid}",
        ARQS + "/{uuid}",
        "PATCH",
        lambda c, w: c.patch(f"{ARQS}/{w.arq}", _bind_body(w)),
        {
            **everyone(NEEDS_TOKEN, ARQ_PERSONAS),
            "reader": DENIED,
            "service": ARQ_NOT_FOUND,
            "nova": ACCEPTED,
        },
        happened=lambda a, w, h: _arq_state(a, w) == "Bound",
    ),
    Op(
        "arq unbind /{uuid}",
        ARQS + "/{uuid}",
        "PATCH",
        lambda c, w: c.patch(f"{ARQS}/{w.arq}", _unbind_body(w)[w.arq]),
        {
            **everyone(NEEDS_TOKEN, ARQ_PERSONAS),
            "reader": DENIED,
            "service": ARQ_NOT_FOUND,
            "nova": ACCEPTED,
        },
        happened=lambda a, w, h: _arq_state(a, w) == "Unbound",
        bound=True,
    ),
    Op(
        "arq delete ?arqs= unbound",
        ARQS,
        "DELETE",
        lambda c, w: c.delete(f"{ARQS}?arqs={w.arq}"),
        {
            **everyone(DELETED, ARQ_PERSONAS),
            "other_member": ARQ_NOT_FOUND,
            "reader": DENIED,
            "service": ARQ_NOT_FOUND,
        },
        happened=_arq_gone,
    ),
    Op(
        "arq delete ?arqs= bound",
        ARQS,
        "DELETE",
        lambda c, w: c.delete(f"{ARQS}?arqs={w.arq}"),
        {
            **everyone(NEEDS_TOKEN, ARQ_PERSONAS),
            "other_member": ARQ_NOT_FOUND,
            "reader": DENIED,
            "service": ARQ_NOT_FOUND,
            "nova": DELETED,
        },
        happened=_arq_gone,
        bound=True,
    ),
    # Idempotent: a service user outside PROJECT gets 204 and deletes nothing.
    Op(
        "arq delete ?instance=",
        ARQS,
        "DELETE",
        lambda c, w: c.delete(f"{ARQS}?instance={w.instance}"),
        {**everyone(NEEDS_TOKEN, ARQ_PERSONAS), "reader": DENIED, "service": NOOP, "nova": DELETED},
        happened=_arq_gone,
        bound=True,
    ),
    Op(
        "arq delete /{uuid} unbound",
        ARQS + "/{uuid}",
        "DELETE",
        lambda c, w: c.delete(f"{ARQS}/{w.arq}"),
        {
            **everyone(DELETED, ARQ_PERSONAS),
            "other_member": ARQ_NOT_FOUND,
            "reader": DENIED,
            "service": ARQ_NOT_FOUND,
        },
        happened=_arq_gone,
    ),
    Op(
        "arq delete /{uuid} bound",
        ARQS + "/{uuid}",
        "DELETE",
        lambda c, w: c.delete(f"{ARQS}/{w.arq}"),
        {
            **everyone(NEEDS_TOKEN, ARQ_PERSONAS),
            "other_member": ARQ_NOT_FOUND,
            "reader": DENIED,
            "service": ARQ_NOT_FOUND,
            "nova": DELETED,
        },
        happened=_arq_gone,
        bound=True,
    ),
    # Deployables: project_manager_or_admin reads, admin_api program.
    Op(
        "deployable list",
        "/v2/deployables",
        "GET",
        lambda c, w: c.get("/v2/deployables"),
        admin_only(OK),
        shows=lambda r, w: _ids("deployables")(r, w) == [w.deployable],
    ),
    Op(
        "deployable show",
        "/v2/deployables/{uuid}",
        "GET",
        lambda c, w: c.get(f"/v2/deployables/{w.deployable}"),
        admin_only(OK),
        shows=lambda r, w: r.json["uuid"] == w.deployable,
    ),
    # The image does not exist: the admin gets a 404 saying so, and nothing changes
    # (tests/api/test_api_programs.py has the programs that run).
    Op(
        "deployable program",
        "/v2/deployables/{uuid}/program",
        "PATCH",
        lambda c, w: c.patch(f"/v2/deployables/{w.deployable}/program", _program_body()),
        admin_only(IMAGE_UNSEEN),
        happened=lambda a, w, h: (
            a.get(f"/v2/deployables/{w.deployable}").json["bitstream_id"] is not None
        ),
    ),
    Op(
        "deployable program (openstacksdk's address)",
        "/v2/deployables/{uuid}/program/{again}",
        "PATCH",
        lambda c, w: c.patch(
            f"/v2/deployables/{w.deployable}/program/{w.deployable}", _program_body()
        ),
        admin_only(IMAGE_UNSEEN),
        happened=lambda a, w, h: (
            a.get(f"/v2/deployables/{w.deployable}").json["bitstream_id"] is not None
        ),
    ),
    Op(
        "deployable program show",
        "/v2/deployables/{uuid}/program",
        "GET",
        lambda c, w: c.get(f"/v2/deployables/{w.deployable}/program", version=PROGRAMS),
        admin_only(OK),
        shows=lambda r, w: r.json["uuid"] == w.program,
        programmed=True,
    ),
    # Devices: project_manager_or_admin reads, admin_api enable/disable.
    Op(
        "device list",
        "/v2/devices",
        "GET",
        lambda c, w: c.get("/v2/devices"),
        admin_only(OK),
        shows=lambda r, w: _ids("devices")(r, w) == [w.device],
    ),
    Op(
        "device show",
        "/v2/devices/{uuid}",
        "GET",
        lambda c, w: c.get(f"/v2/devices/{w.device}"),
        admin_only(OK),
        shows=lambda r, w: r.json["uuid"] == w.device,
    ),
    Op(
        "device enable",
        "/v2/devices/{uuid}/enable",
        "POST",
        lambda c, w: c.post(f"/v2/devices/{w.device}/enable"),
        admin_only(OK),
        happened=lambda a, w, h: _device_status(a, w) == "enabled",
        device_disabled=True,
    ),
    Op(
        "device disable",
        "/v2/devices/{uuid}/disable",
        "POST",
        lambda c, w: c.post(f"/v2/devices/{w.device}/disable"),
        admin_only(OK),
        happened=lambda a, w, h: _device_status(a, w) == "maintaining",
    ),
    # Drain (2.9): an admin's, as disable.
    Op(
        "device drain",
        "/v2/devices/{uuid}/drain",
        "POST",
        lambda c, w: c.post(f"/v2/devices/{w.device}/drain", version=DRAIN),
        admin_only(OK),
        happened=lambda a, w, h: _device_status(a, w) == "maintaining",
    ),
    Op(
        "device undrain",
        "/v2/devices/{uuid}/undrain",
        "POST",
        lambda c, w: c.post(f"/v2/devices/{w.device}/undrain", version=DRAIN),
        admin_only(OK),
        happened=lambda a, w, h: _device_status(a, w) == "enabled",
        device_disabled=True,
    ),
    # Health (2.9): holding a device back by hand, and clearing it, are an admin's.
    Op(
        "device health",
        "/v2/devices/{uuid}/health",
        "POST",
        lambda c, w: c.post(
            f"/v2/devices/{w.device}/health", {"hold": True, "reason": "policy"}, version=DRAIN
        ),
        admin_only(OK),
        happened=lambda a, w, h: _device_health(a, w)["held_by"] == "operator",
    ),
    # Deleting a lost device and labelling devices (2.10): an admin's. The world's device
    # is present: the admin passes the policy and is refused by the rule.
    Op(
        "device delete",
        "/v2/devices/{uuid}",
        "DELETE",
        lambda c, w: c.delete(f"/v2/devices/{w.device}", version=LABELS),
        admin_only(Outcome(409, "exosuit.device.not_lost", "is present")),
        happened=lambda a, w, h: a.get(f"/v2/devices/{w.device}").status_code == 404,
    ),
    Op(
        "device labels",
        "/v2/device_labels",
        "POST",
        lambda c, w: c.post(
            "/v2/device_labels", {"uuids": [w.device], "set": {"rack": "a1"}}, version=LABELS
        ),
        admin_only(OK),
        happened=lambda a, w, h: (
            a.get(f"/v2/devices/{w.device}", version=LABELS).json["labels"] == {"rack": "a1"}
        ),
    ),
    # Partition layouts (2.9): an admin's, as drain; the agent reports as admin_or_service.
    Op(
        "device partitions show",
        "/v2/devices/{uuid}/partitions",
        "GET",
        lambda c, w: c.get(f"/v2/devices/{w.device}/partitions", version=DRAIN),
        admin_only(OK),
        shows=lambda r, w: r.json["device_uuid"] == w.device,
    ),
    Op(
        "device partitions set",
        "/v2/devices/{uuid}/partitions",
        "PUT",
        lambda c, w: c.put(f"/v2/devices/{w.device}/partitions", {"vfs": 8}, version=DRAIN),
        admin_only(ACCEPTED),
        happened=lambda a, w, h: _partition_state(a, w) == "applying",
    ),
    Op(
        "agent partition report",
        "/agent/v1/hosts/{hostname}/partitions/{device_uuid}",
        "PUT",
        lambda c, w: c.put(
            f"/agent/v1/hosts/{HOST}/partitions/{w.device}",
            {"generation": w.partition_generation, "state": "applied"},
        ),
        {**everyone(DENIED), "admin": OK, "service": OK},
        happened=lambda a, w, h: _partition_state(a, w) == "applied",
        partitioned=True,
    ),
    Op(
        "host drain",
        "/v2/hosts/{hostname}/drain",
        "POST",
        lambda c, w: c.post(f"/v2/hosts/{HOST}/drain", version=DRAIN),
        admin_only(OK),
        happened=lambda a, w, h: _device_status(a, w) == "maintaining",
    ),
    Op(
        "host undrain",
        "/v2/hosts/{hostname}/undrain",
        "POST",
        lambda c, w: c.post(f"/v2/hosts/{HOST}/undrain", version=DRAIN),
        admin_only(OK),
        happened=lambda a, w, h: _device_status(a, w) == "enabled",
        device_disabled=True,
    ),
    # Attributes: project_manager_or_admin reads, admin_api writes.
    Op(
        "attribute list",
        "/v2/attributes",
        "GET",
        lambda c, w: c.get("/v2/attributes"),
        admin_only(OK),
        shows=lambda r, w: w.attribute in _ids("attributes")(r, w),
    ),
    Op(
        "attribute show",
        "/v2/attributes/{uuid}",
        "GET",
        lambda c, w: c.get(f"/v2/attributes/{w.attribute}"),
        admin_only(OK),
        shows=lambda r, w: r.json["uuid"] == w.attribute,
    ),
    Op(
        "attribute create",
        "/v2/attributes",
        "POST",
        lambda c, w: c.post(
            "/v2/attributes", {"deployable_id": w.deployable_id, "key": "created", "value": "1"}
        ),
        admin_only(CREATED),
        happened=lambda a, w, h: "created" in _attribute_keys(a),
    ),
    Op(
        "attribute delete",
        "/v2/attributes/{uuid}",
        "DELETE",
        lambda c, w: c.delete(f"/v2/attributes/{w.attribute}"),
        admin_only(DELETED),
        happened=lambda a, w, h: "policy_test" not in _attribute_keys(a),
    ),
    # The agent API: admin_or_service (the agent's credentials).
    Op(
        "agent inventory",
        "/agent/v1/hosts/{hostname}/inventory",
        "PUT",
        lambda c, w: c.put(f"/agent/v1/hosts/{HOST}/inventory", _two_fpgas()),
        {**everyone(DENIED), "admin": OK, "service": OK},
        happened=lambda a, w, h: len(a.get("/v2/devices").json["devices"]) == 2,
    ),
    # The world's bind needs no host-side work: a report on it is refused (409) when
    # allowed at all (tests/nova/test_async_bind.py has the reports that count).
    Op(
        "agent host work",
        "/agent/v1/hosts/{hostname}/accelerator_requests/{uuid}",
        "PUT",
        lambda c, w: c.put(
            f"/agent/v1/hosts/{HOST}/accelerator_requests/{w.arq}",
            {"result": "failed", "reason": "policy test"},
        ),
        {**everyone(DENIED), "admin": BAD_STATE, "service": BAD_STATE},
        happened=lambda a, w, h: _arq_state(a, w) != "Bound",
        bound=True,
    ),
    Op(
        "agent desired state",
        "/agent/v1/hosts/{hostname}/desired_state",
        "GET",
        lambda c, w: c.get(f"/agent/v1/hosts/{HOST}/desired_state"),
        {**everyone(DENIED), "admin": OK, "service": OK},
        shows=lambda r, w: [p["uuid"] for p in r.json["programs"]] == [w.program],
        programmed=True,
    ),
    Op(
        "agent program report",
        "/agent/v1/hosts/{hostname}/programs/{uuid}",
        "PUT",
        lambda c, w: c.put(f"/agent/v1/hosts/{HOST}/programs/{w.program}", {"state": "fetching"}),
        {**everyone(DENIED), "admin": OK, "service": OK},
        happened=lambda a, w, h: _program_state(a, w) == "fetching",
        programmed=True,
    ),
    # The agent reads any image's data: admin_or_service.
    Op(
        "agent image data",
        "/agent/v1/images/{image_uuid}/data",
        "GET",
        lambda c, w: c.get(f"/agent/v1/images/{w.image}/data"),
        {**everyone(DENIED), "admin": OK, "service": OK},
        shows=lambda r, w: r.body == IMAGE_DATA,
        imaged=True,
    ),
    # The image catalogue (2.6): project_reader_or_admin reads what the project sees;
    # project_member_or_admin creates, and changes an image of its own project.
    Op(
        "image list",
        "/v2/images",
        "GET",
        lambda c, w: c.get("/v2/images", version=IMAGES),
        {**everyone(OK), "other_member": EMPTY, "service": DENIED},
        shows=lambda r, w: w.image in _ids("images")(r, w),
        imaged=True,
    ),
    Op(
        "image show",
        "/v2/images/{uuid}",
        "GET",
        lambda c, w: c.get(f"/v2/images/{w.image}", version=IMAGES),
        {**everyone(OK), "other_member": IMAGE_UNSEEN, "service": DENIED},
        shows=lambda r, w: r.json["uuid"] == w.image and r.json["owner"] == w.project,
        imaged=True,
    ),
    Op(
        "image create",
        "/v2/images",
        "POST",
        lambda c, w: c.post("/v2/images", {"name": "created", "format": "gbs"}, version=IMAGES),
        {**everyone(CREATED), "reader": DENIED, "service": DENIED},
        happened=lambda a, w, h: "created" in _image_names(a),
    ),
    Op(
        "image upload",
        "/v2/images/{uuid}/file",
        "PUT",
        lambda c, w: c.put(f"/v2/images/{w.queued_image}/file", IMAGE_DATA, version=IMAGES),
        {**everyone(DELETED), "other_member": IMAGE_UNSEEN, "reader": DENIED, "service": DENIED},
        happened=lambda a, w, h: _image(a, w.queued_image)["status"] == "active",
        imaged=True,
    ),
    Op(
        "image download",
        "/v2/images/{uuid}/file",
        "GET",
        lambda c, w: c.get(f"/v2/images/{w.image}/file", version=IMAGES),
        {**everyone(OK), "other_member": IMAGE_UNSEEN, "service": DENIED},
        shows=lambda r, w: r.body == IMAGE_DATA,
        imaged=True,
    ),
    Op(
        "image delete",
        "/v2/images/{uuid}",
        "DELETE",
        lambda c, w: c.delete(f"/v2/images/{w.image}", version=IMAGES),
        {**everyone(DELETED), "other_member": IMAGE_UNSEEN, "reader": DENIED, "service": DENIED},
        happened=lambda a, w, h: _image(a, w.image) is None,
        imaged=True,
    ),
    Op(
        "image members",
        "/v2/images/{uuid}/members",
        "GET",
        lambda c, w: c.get(f"/v2/images/{w.image}/members", version=IMAGES),
        {**everyone(OK), "other_member": IMAGE_UNSEEN, "reader": DENIED, "service": DENIED},
        shows=lambda r, w: [m["project_id"] for m in r.json["members"]] == [SHARED_WITH],
        imaged=True,
        image_shared=True,
    ),
    Op(
        "image member add",
        "/v2/images/{uuid}/members/{project_id}",
        "PUT",
        lambda c, w: c.put(f"/v2/images/{w.image}/members/{SHARED_WITH}", version=IMAGES),
        {**everyone(OK), "other_member": IMAGE_UNSEEN, "reader": DENIED, "service": DENIED},
        happened=lambda a, w, h: _image_members(a, w) == [SHARED_WITH],
        imaged=True,
    ),
    Op(
        "image member remove",
        "/v2/images/{uuid}/members/{project_id}",
        "DELETE",
        lambda c, w: c.delete(f"/v2/images/{w.image}/members/{SHARED_WITH}", version=IMAGES),
        {**everyone(DELETED), "other_member": IMAGE_UNSEEN, "reader": DENIED, "service": DENIED},
        happened=lambda a, w, h: _image_members(a, w) == [],
        imaged=True,
        image_shared=True,
    ),
    # Fleet views (2.5): project_manager_or_admin reads, admin_api retries a failed job.
    Op(
        "host list",
        "/v2/hosts",
        "GET",
        lambda c, w: c.get("/v2/hosts", version=V2_5),
        admin_only(OK),
        shows=lambda r, w: [h["hostname"] for h in r.json["hosts"]] == [HOST],
    ),
    Op(
        "host show",
        "/v2/hosts/{hostname}",
        "GET",
        lambda c, w: c.get(f"/v2/hosts/{HOST}", version=V2_5),
        admin_only(OK),
        shows=lambda r, w: r.json["hostname"] == HOST,
    ),
    Op(
        "attach handle list",
        "/v2/attach_handles",
        "GET",
        lambda c, w: c.get("/v2/attach_handles", version=V2_5),
        admin_only(OK),
        shows=lambda r, w: w.attach_handle in _ids("attach_handles")(r, w),
    ),
    Op(
        "attach handle show",
        "/v2/attach_handles/{uuid}",
        "GET",
        lambda c, w: c.get(f"/v2/attach_handles/{w.attach_handle}", version=V2_5),
        admin_only(OK),
        shows=lambda r, w: r.json["uuid"] == w.attach_handle,
    ),
    Op(
        "job list",
        "/v2/jobs",
        "GET",
        lambda c, w: c.get("/v2/jobs", version=V2_5),
        admin_only(OK),
        shows=lambda r, w: w.job in [j["id"] for j in r.json["jobs"]],
    ),
    Op(
        "job show",
        "/v2/jobs/{id}",
        "GET",
        lambda c, w: c.get(f"/v2/jobs/{w.job}", version=V2_5),
        admin_only(OK),
        shows=lambda r, w: r.json["id"] == w.job,
    ),
    Op(
        "job retry",
        "/v2/jobs/{id}/retry",
        "POST",
        lambda c, w: c.post(f"/v2/jobs/{w.job}/retry", version=V2_5),
        admin_only(OK),
        happened=lambda a, w, h: _job_state(a, w) == "pending",
        job_failed=True,
    ),
    Op(
        "audit event list",
        "/v2/audit_events",
        "GET",
        lambda c, w: c.get("/v2/audit_events", version=DRAIN),
        admin_only(OK),
        shows=lambda r, w: w.audit_event in [e["id"] for e in r.json["audit_events"]],
    ),
    Op(
        "audit event show",
        "/v2/audit_events/{id}",
        "GET",
        lambda c, w: c.get(f"/v2/audit_events/{w.audit_event}", version=DRAIN),
        admin_only(OK),
        shows=lambda r, w: r.json["id"] == w.audit_event and r.json["object_uuid"] == w.arq,
    ),
    Op(
        "summary",
        "/v2/summary",
        "GET",
        lambda c, w: c.get("/v2/summary", version=V2_5),
        admin_only(OK),
        shows=lambda r, w: r.json["hosts"]["total"] == 1 and r.json["arqs"]["total"] == 1,
    ),
    # The console's history (2.11): read as devices (project_manager_or_admin).
    Op(
        "device usage history",
        "/v2/devices/{uuid}/usage_history",
        "GET",
        lambda c, w: c.get(f"/v2/devices/{w.device}/usage_history", version="2.11"),
        admin_only(OK),
        shows=lambda r, w: r.json["device_uuid"] == w.device,
    ),
    Op(
        "allocation history",
        "/v2/allocation_history",
        "GET",
        lambda c, w: c.get("/v2/allocation_history", version="2.11"),
        admin_only(OK),
        shows=lambda r, w: r.json["source"] == "database",
    ),
    # Devices' activation, services, drivers and discoveries (2.7): read as devices
    # (project_manager_or_admin); changed by an admin; an agent reports as admin_or_service.
    Op(
        "device activations",
        "/v2/device_activations",
        "POST",
        lambda c, w: c.post(
            "/v2/device_activations",
            {"state": "inactive", "uuids": [w.device]},
            version=DEVICES_2_7,
        ),
        admin_only(ACCEPTED),
        happened=lambda a, w, h: _activation(a, w) == "deactivating",
    ),
    Op(
        "service list",
        "/v2/services",
        "GET",
        lambda c, w: c.get("/v2/services", version=DEVICES_2_7),
        admin_only(OK),
        shows=lambda r, w: [s["device_uuid"] for s in r.json["services"]] == [w.device],
    ),
    Op(
        "driver list",
        "/v2/drivers",
        "GET",
        lambda c, w: c.get("/v2/drivers", version=DEVICES_2_7),
        admin_only(OK),
        shows=lambda r, w: (
            [(d["hostname"], d["name"]) for d in r.json["drivers"]] == [(HOST, "fake")]
        ),
    ),
    Op(
        "driver install",
        "/v2/drivers/{name}/install",
        "POST",
        # A driver the world's host reports (fake): another is not found.
        lambda c, w: c.post("/v2/drivers/fake/install", {"hostnames": [HOST]}, version="2.7"),
        admin_only(ACCEPTED),
        happened=lambda a, w, h: _driver_wish(a).get("fake", {}).get("enabled") is True,
    ),
    Op(
        "driver update",
        "/v2/drivers/{name}/update",
        "POST",
        lambda c, w: c.post("/v2/drivers/fake/update", {"config": {"x": "1"}}, version="2.7"),
        admin_only(ACCEPTED),
        happened=lambda a, w, h: _driver_wish(a).get("fake", {}).get("config") == {"x": "1"},
    ),
    Op(
        "driver uninstall",
        "/v2/drivers/{name}/uninstall",
        "POST",
        # The world's device is found by tests/helpers/inventory.py's plug-in, "static".
        lambda c, w: c.post("/v2/drivers/static/uninstall", {}, version=DEVICES_2_7),
        admin_only(ACCEPTED),
        happened=lambda a, w, h: _activation(a, w) == "inactive",
    ),
    Op(
        "discovery create",
        "/v2/discoveries",
        "POST",
        lambda c, w: c.post("/v2/discoveries", {"hostnames": [HOST]}, version=DEVICES_2_7),
        admin_only(ACCEPTED),
        happened=lambda a, w, h: len(_discoveries(a)) == 1,
    ),
    Op(
        "discovery list",
        "/v2/discoveries",
        "GET",
        lambda c, w: c.get("/v2/discoveries", version=DEVICES_2_7),
        admin_only(OK),
        shows=lambda r, w: [d["uuid"] for d in r.json["discoveries"]] == [w.discovery],
        discovered=True,
    ),
    Op(
        "discovery show",
        "/v2/discoveries/{uuid}",
        "GET",
        lambda c, w: c.get(f"/v2/discoveries/{w.discovery}", version=DEVICES_2_7),
        admin_only(OK),
        shows=lambda r, w: r.json["uuid"] == w.discovery,
        discovered=True,
    ),
    Op(
        "agent activation report",
        "/agent/v1/hosts/{hostname}/activations/{device_uuid}",
        "PUT",
        lambda c, w: c.put(
            f"/agent/v1/hosts/{HOST}/activations/{w.device}",
            {"action": "uninstall", "generation": w.activation_generation, "state": "done"},
        ),
        {**everyone(DENIED), "admin": OK, "service": OK},
        happened=lambda a, w, h: _activation(a, w) == "inactive",
        deactivating=True,
    ),
    # Standalone claims (2.8): a project's, as ARQs are (member or admin to change, reader
    # or admin to read); another project's claim is not found.
    Op(
        "claim create",
        "/v2/claims",
        "POST",
        lambda c, w: c.post("/v2/claims", {"device_profile_name": "spare"}, version=CLAIMS),
        {**everyone(CREATED), "reader": DENIED, "service": DENIED},
        happened=lambda a, w, h: len(_claims_of(a, h)) == 1,
    ),
    Op(
        "claim list",
        "/v2/claims",
        "GET",
        lambda c, w: c.get("/v2/claims", version=CLAIMS),
        {**everyone(OK), "other_member": EMPTY, "service": DENIED},
        shows=lambda r, w: w.claim in _ids("claims")(r, w),
        claimed=True,
    ),
    Op(
        "claim show",
        "/v2/claims/{uuid}",
        "GET",
        lambda c, w: c.get(f"/v2/claims/{w.claim}", version=CLAIMS),
        {**everyone(OK), "other_member": CLAIM_NOT_FOUND, "service": DENIED},
        shows=lambda r, w: r.json["uuid"] == w.claim,
        claimed=True,
    ),
    Op(
        "claim release",
        "/v2/claims/{uuid}",
        "DELETE",
        lambda c, w: c.delete(f"/v2/claims/{w.claim}", version=CLAIMS),
        {
            **everyone(DELETED),
            "other_member": CLAIM_NOT_FOUND,
            "reader": DENIED,
            "service": DENIED,
        },
        happened=lambda a, w, h: _claim(a, w)["state"] == "released",
        claimed=True,
    ),
    Op(
        "claim renew",
        "/v2/claims/{uuid}/renew",
        "POST",
        lambda c, w: c.post(f"/v2/claims/{w.claim}/renew", {"expires_in": 600}, version=CLAIMS),
        {**everyone(OK), "other_member": CLAIM_NOT_FOUND, "reader": DENIED, "service": DENIED},
        happened=lambda a, w, h: _claim(a, w)["expires_at"] is not None,
        claimed=True,
    ),
    Op(
        "agent claim report",
        "/agent/v1/hosts/{hostname}/claims/{claim_uuid}",
        "PUT",
        lambda c, w: c.put(
            f"/agent/v1/hosts/{HOST}/claims/{w.claim}", {"cdi": "failed", "reason": "test"}
        ),
        {**everyone(DENIED), "admin": OK, "service": OK},
        happened=lambda a, w, h: _claim(a, w)["cdi"]["state"] == "failed",
        claimed=True,
    ),
    # A server's attach and detach (2.10): a claim of the caller's project whose consumer
    # is the server, as claims are made and released.
    Op(
        "server attach",
        "/v2/servers/{server}/attach",
        "POST",
        lambda c, w: c.post(
            f"/v2/servers/{SERVER}/attach", {"device_profile_name": "spare"}, version=SERVERS
        ),
        {**everyone(CREATED), "reader": DENIED, "service": DENIED},
        happened=lambda a, w, h: [c["consumer"] for c in _claims_of(a, h)] == [SERVER],
    ),
    Op(
        "server detach",
        "/v2/servers/{server}/detach",
        "POST",
        lambda c, w: c.post(f"/v2/servers/{SERVER}/detach", {}, version=SERVERS),
        {**everyone(OK), "other_member": NOT_ATTACHED, "reader": DENIED, "service": DENIED},
        happened=lambda a, w, h: _claim(a, w)["state"] == "released",
        claimed=True,
    ),
    # The caller's own permissions (2.11): anyone project-scoped reads its own.
    Op(
        "permissions",
        "/v2/permissions",
        "GET",
        lambda c, w: c.get("/v2/permissions", version=PERMISSIONS),
        everyone(OK),
        shows=lambda r, w: isinstance(r.json["permissions"]["exosuit:permission:get"], bool),
    ),
]

CASES = [(op, persona) for op in OPS for persona in op.expect]


@pytest.fixture(autouse=True)
def _image_data_in_tmp(conf, tmp_path):
    """The catalogue's image data in the test's folder, not the working directory."""
    conf.set_override("state_path", str(tmp_path / "state"))


def build_world(
    api: ApiClient, op: Op, project: str = PROJECT, db: Database | None = None
) -> World:
    """Inventory (through the agent API), two profiles, an attribute, one ARQ of
    ``project`` (the member persona's project). ``db``: the API's database (default:
    that of the in-process app)."""
    agent, admin = api.as_(PERSONAS["service"]), _admin(api)
    r = agent.put(f"/agent/v1/hosts/{HOST}/inventory", _world_snapshot())
    assert r.status_code == 200, r.text
    profiles = {}
    for name in ("dp1", "spare"):
        r = admin.post("/v2/device_profiles", [{"name": name, "groups": [{"resources:FPGA": "1"}]}])
        assert r.status_code == 201, r.text
        profiles[name] = r.json
    (device,) = admin.get("/v2/devices").json["devices"]
    (deployable,) = admin.get("/v2/deployables").json["deployables"]
    deployable_id = admin.get("/v2/attributes").json["attributes"][0]["deployable_id"]
    r = admin.post(
        "/v2/attributes", {"deployable_id": deployable_id, "key": "policy_test", "value": "x"}
    )
    assert r.status_code == 201, r.text
    attribute = r.json["uuid"]
    r = api.as_(PERSONAS["member"]).post(ARQS, {"device_profile_name": "dp1"})
    assert r.status_code == 201, r.text
    (arq,) = r.json["arqs"]
    assert arq["project_id"] == project, arq
    handle = admin.get("/v2/attach_handles", version=V2_5).json["attach_handles"][0]
    (job,) = admin.get("/v2/jobs", version=V2_5).json["jobs"]
    world = World(
        device=device["uuid"],
        deployable=deployable["uuid"],
        rp_uuid=deployable["rp_uuid"],
        deployable_id=deployable_id,
        attribute=attribute,
        profile=profiles["dp1"],
        spare_profile=profiles["spare"],
        arq=arq["uuid"],
        instance=None,
        project=project,
        attach_handle=handle["uuid"],
        job=job["id"],
    )
    events = admin.get(f"/v2/audit_events?object_uuid={arq['uuid']}", version=DRAIN).json
    (created,) = events["audit_events"]
    world.audit_event = created["id"]
    if op.bound:
        body = _bind_body(world)
        r = api.as_(PERSONAS["nova"]).patch(ARQS, body)
        assert r.status_code == 202, r.text
        world.instance = body[world.arq][2]["value"]
        assert _arq_state(admin, world) == "Bound"
    if op.device_disabled:
        r = admin.post(f"/v2/devices/{world.device}/disable")
        assert r.status_code == 200, r.text
    if op.job_failed:
        assert fail_a_job(db or api.app.application.db) == world.job
        assert _job_state(admin, world) == "failed"
    if op.programmed:
        world.program = start_a_program(admin, world, db or api.app.application.db)
    if op.imaged:
        add_images(api, world, shared=op.image_shared)
    if op.discovered:
        r = admin.post("/v2/discoveries", {}, version=DEVICES_2_7)
        assert r.status_code == 202, r.text
        world.discovery = r.json["uuid"]
    if op.deactivating:
        body = {"state": "inactive", "uuids": [world.device]}
        r = admin.post("/v2/device_activations", body, version=DEVICES_2_7)
        assert r.status_code == 202, r.text
        (step,) = admin.get(f"/agent/v1/hosts/{HOST}/desired_state").json["activations"]
        world.activation_generation = step["generation"]
    if op.partitioned:
        r = admin.put(f"/v2/devices/{world.device}/partitions", {"vfs": 4}, version=DRAIN)
        assert r.status_code == 202, r.text
        world.partition_generation = r.json["generation"]
    if op.claimed:
        body = {"device_profile_name": "spare", "container": True, "consumer": SERVER}
        r = api.as_(PERSONAS["member"]).post("/v2/claims", body, version=CLAIMS)
        assert r.status_code == 201, r.text
        world.claim = r.json["uuid"]
    return world


def error_of(response: webob.Response) -> dict:
    return json.loads(response.json["error_message"])


@pytest.mark.parametrize(
    ("op", "persona"), CASES, ids=[f"{op.name}-{persona}" for op, persona in CASES]
)
def test_policy(sqlite_api, op: Op, persona: str):
    world = build_world(sqlite_api, op)
    headers = {} if persona == "anonymous" else PERSONAS[persona]
    check_outcome(sqlite_api, op, world, headers, op.expect[persona])


def check_outcome(
    api: ApiClient,
    op: Op,
    world: World,
    headers: dict,
    expected: Outcome,
    identity: dict | None = None,
) -> None:
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
INVENTORY_OPS = [
    op for op in OPS if op.path.startswith(("/v2/devices", "/v2/deployables", "/v2/attributes"))
]


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


FLEET_PATHS = ("/v2/hosts", "/v2/attach_handles", "/v2/jobs", "/v2/summary")
FLEET_OPS = [op for op in OPS if op.path.startswith(FLEET_PATHS)]


@pytest.mark.parametrize("op", FLEET_OPS, ids=[op.name for op in FLEET_OPS])
def test_project_manager_reads_the_fleet_but_does_not_retry_jobs(sqlite_api, op: Op):
    """The fleet views read like devices (project_manager_or_admin); retrying a job
    stays admin-only."""
    world = build_world(sqlite_api, op)
    r = op.call(sqlite_api.as_(MANAGER), world)
    if op.method == "GET":
        assert r.status_code == 200, r.text
        assert op.shows(r, world), r.text
    else:
        assert r.status_code == 403, r.text
        assert error_of(r)["code"] == "exosuit.policy.forbidden"
        assert op.happened(_admin(sqlite_api), world, MANAGER) is False


@pytest.mark.parametrize("op", FLEET_OPS, ids=[op.name for op in FLEET_OPS])
def test_fleet_views_are_masked_before_2_5_whoever_asks(sqlite_api, op: Op):
    """Below 2.5 a fleet path is an unknown path (404), before any policy check: a
    reader learns nothing from a 403 either."""
    world = build_world(sqlite_api, op)
    path = op.path.replace("{hostname}", HOST).replace("{uuid}", world.attach_handle)
    path = path.replace("{id}", str(world.job))
    for persona in ("admin", "reader"):
        r = sqlite_api.as_(PERSONAS[persona]).request(op.method, path, version="2.4")
        assert r.status_code == 404, r.text
        assert error_of(r)["code"] == "exosuit.not_found"


DEVICE_PATHS = ("/v2/device_activations", "/v2/services", "/v2/drivers", "/v2/discoveries")
DEVICE_OPS = [op for op in OPS if op.path.startswith(DEVICE_PATHS)]


@pytest.mark.parametrize("op", DEVICE_OPS, ids=[op.name for op in DEVICE_OPS])
def test_project_manager_reads_services_drivers_discoveries_but_changes_nothing(sqlite_api, op: Op):
    """What 2.7 adds reads like devices (project_manager_or_admin); every change stays
    admin-only."""
    world = build_world(sqlite_api, op)
    r = op.call(sqlite_api.as_(MANAGER), world)
    if op.method == "GET":
        assert r.status_code == 200, r.text
        assert op.shows(r, world), r.text
    else:
        assert r.status_code == 403, r.text
        assert error_of(r)["code"] == "exosuit.policy.forbidden"
        assert op.happened(_admin(sqlite_api), world, MANAGER) is False


@pytest.mark.parametrize("op", DEVICE_OPS, ids=[op.name for op in DEVICE_OPS])
def test_what_2_7_adds_is_masked_before_it_whoever_asks(sqlite_api, op: Op):
    """Below 2.7 the new paths are unknown (404), before any policy check."""
    world = build_world(sqlite_api, op)
    path = op.path.replace("{name}", "pci").replace("{uuid}", world.discovery or world.device)
    for persona in ("admin", "reader"):
        r = sqlite_api.as_(PERSONAS[persona]).request(op.method, path, version=IMAGES)
        assert r.status_code == 404, r.text
        assert error_of(r)["code"] == "exosuit.not_found"


CLAIM_OPS = [op for op in OPS if op.path.startswith("/v2/claims")]


@pytest.mark.parametrize("op", CLAIM_OPS, ids=[op.name for op in CLAIM_OPS])
def test_claims_are_masked_before_2_8_whoever_asks(sqlite_api, op: Op):
    """Below 2.8 the claims' paths are unknown (404), before any policy check."""
    world = build_world(sqlite_api, op)
    path = op.path.replace("{uuid}", world.claim or str(uuid.uuid4()))
    for persona in ("admin", "reader"):
        r = sqlite_api.as_(PERSONAS[persona]).request(op.method, path, version=DEVICES_2_7)
        assert r.status_code == 404, r.text
        assert error_of(r)["code"] == "exosuit.not_found"


# Claims are owned as ARQs are: their ownership is checked on every backend too.
ARQ_OPS = [op for op in OPS if op.path.startswith(ARQS)] + CLAIM_OPS


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
SYSTEM_ADMIN = {
    "X-User-Id": "u-system",
    "X-Roles": "admin,manager,member,reader,service",
    "X-Service-Roles": "service",
    "OpenStack-System-Scope": "all",
}
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
        path = path.replace("{name}", "dashboard.css")
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
    assert {
        "arq bind",
        "arq unbind",
        "arq delete ?arqs= unbound",
        "arq delete ?arqs= bound",
        "arq delete ?instance=",
        "arq delete /{uuid} unbound",
    } <= names
