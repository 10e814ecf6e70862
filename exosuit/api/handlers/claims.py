"""/v2/claims (microversion 2.8): standalone claims, devices bound by Exosuit itself
(doc/standalone.md). A claim is made in the database (exosuit/db/claims.py) and, when
Placement is configured, allocated there: the saga of exosuit/api/claim_saga.py."""

from __future__ import annotations

from typing import Any

from exosuit import exceptions
from exosuit.api import claim_saga, pagination, wsgi
from exosuit.api.describe import (
    BOOL,
    CSV,
    INT,
    LINKS,
    NINT,
    NSTR,
    STR,
    TEXT,
    TIME,
    Handler,
    Operation,
    Schema,
    list_of,
    obj,
    paged,
    query,
    ref,
)
from exosuit.api.policies import claims as policies
from exosuit.api.schemas import claims as schema
from exosuit.api.schemas import limits
from exosuit.db import candidates
from exosuit.db import claims as db

__all__ = [
    "PAGING",
    "create_claim",
    "delete_claim",
    "get_claim",
    "list_claims",
    "renew_claim",
    "serialize",
]

PAGING = pagination.Paging(sort_keys=frozenset(db.SORT_COLUMNS))


def _device(device: dict[str, Any]) -> dict[str, Any]:
    return {
        "arq_uuid": device["arq_uuid"],
        "device_uuid": device["device_uuid"],
        "deployable_uuid": device["deployable_uuid"],
        "rp_uuid": device["rp_uuid"],
        "attach_handle_uuid": device["attach_handle_uuid"],
        "attach_handle_type": device["attach_handle_type"],
        "attach_handle_info": device["attach_handle_info"],
        "cdi_device": device["cdi_device"],
    }


def _serialize(req: wsgi.Request, claim: dict[str, Any]) -> dict[str, Any]:
    """CLAIM (doc/standalone.md)."""
    return {
        "uuid": claim["uuid"],
        "project_id": claim["project_id"],
        "user_id": claim["user_id"],
        "consumer": claim["consumer"],
        "hostname": claim["hostname"],
        "device_profile_name": claim["device_profile_name"],
        "state": claim["state"],
        "reason": claim["reason"],
        "container": bool(claim["container"]),
        "expires_at": wsgi.format_time(claim["expires_at"]),
        "created_at": wsgi.format_time(claim["created_at"]),
        "released_at": wsgi.format_time(claim["released_at"]),
        "devices": [_device(d) for d in claim["devices"]],
        "cdi": {"state": claim["cdi_state"], "reason": claim["cdi_reason"]},
        "links": [req.link("claims", claim["uuid"])],
    }


# The same CLAIM answers a server's attach and detach (exosuit/api/handlers/servers.py).
serialize = _serialize


def _verdict(verdict: candidates.Verdict) -> dict[str, Any]:
    return {
        "device_uuid": verdict.device_uuid,
        "deployable_uuid": verdict.deployable_uuid,
        "deployable_name": verdict.deployable_name,
        "rp_uuid": verdict.rp_uuid,
        "group": verdict.group,
        "verdict": verdict.code,
        "reason": verdict.message,
        "holders": [
            {"arq_uuid": h.arq_uuid, "instance_uuid": h.instance_uuid, "claim_uuid": h.claim_uuid}
            for h in verdict.holders
        ],
    }


def _serialize_dry_run(found: db.DryRun) -> dict[str, Any]:
    """CLAIM_DRY_RUN (doc/devices.md, "Why not here?"): each host's verdict, then its
    deployables'."""
    hosts: dict[str, dict[str, Any]] = {}
    for v in found.evaluation.verdicts:
        if v.device_uuid is None:
            hosts[v.hostname] = {
                "hostname": v.hostname,
                "verdict": v.code,
                "reason": v.message,
                "devices": [],
            }
        else:
            hosts[v.hostname]["devices"].append(_verdict(v))
    return {
        "dry_run": True,
        "hostname": found.evaluation.chosen,
        "reason": found.refusal,
        "consumer_claim": found.consumer_claim,
        "devices": [
            {
                "group": index,
                "device_uuid": c.device_uuid,
                "deployable_uuid": c.deployable_uuid,
                "rp_uuid": c.rp_uuid,
            }
            for index, c in found.chosen
        ],
        "hosts": list(hosts.values()),
    }


def _scope(req: wsgi.Request) -> db.Scope:
    """Admins see every project's claims; everyone else only their project's."""
    if req.context.is_admin_role:
        return db.Scope(None)
    return db.Scope(req.context.project_id)


def _uuid(req: wsgi.Request) -> str:
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):  # no claim has such an id
        raise exceptions.ClaimNotFound(uuid=uuid)
    return uuid


def parse_request(req: wsgi.Request, body: Any) -> db.ClaimRequest:
    """The POST body as a ClaimRequest of the caller's project: 400 for a body that
    names both a profile and attach handles, or neither, that is not POST_CLAIM_V2_8
    (POST_CLAIM_V2_10 from 2.10), that names attach handles with ``numa_node`` or
    ``dry_run``, or that asks more ARQs than ``[api] max_arqs_per_request``."""
    if isinstance(body, dict) and ("device_profile_name" in body) == ("attach_handles" in body):
        raise wsgi.ApiError(
            400,
            "Give exactly one of device_profile_name (Exosuit picks the devices) or "
            "attach_handles (these ones).",
            "exosuit.claim.selection",
        )
    later = req.version.matches((2, 10))
    wsgi.validate(body, schema.POST_CLAIM_V2_10 if later else schema.POST_CLAIM_V2_8)
    chooses = [k for k, v in (("numa_node", None), ("dry_run", False)) if body.get(k, v) != v]
    if "attach_handles" in body and chooses:
        raise wsgi.ApiError(
            400,
            f"{' and '.join(chooses)} choose among a device profile's devices "
            "(device_profile_name); named attach_handles are chosen already.",
            "exosuit.claim.selection",
        )
    handles = tuple(h.lower() for h in body.get("attach_handles", ()))
    limit = limits.Limits.from_conf(req.app.conf).arqs_per_request
    if len(handles) > limit:
        raise limits.exceeded(
            f"The claim names {len(handles)} attach handles", limit, "max_arqs_per_request"
        )
    return db.ClaimRequest(
        project_id=req.context.project_id,
        user_id=req.context.user_id,
        profile_name=body.get("device_profile_name"),
        handles=handles,
        hostname=body.get("hostname"),
        consumer=body.get("consumer"),
        expires_in=body.get("expires_in"),
        container=bool(body.get("container", False)),
        numa_node=body.get("numa_node"),
        dry_run=bool(body.get("dry_run", False)),
    )


def create_claim(req: wsgi.Request) -> wsgi.Response:
    """201 with the claim, bound; 202 while a program its profile asks runs (state
    ``pending``, then ``bound`` or ``failed``). The live claim of the same ``consumer``
    is answered again (idempotent). 409 ``exosuit.claim.unsatisfiable`` (nothing held);
    404 for an unknown profile, attach handle or host; 503 when Placement does not
    answer (nothing held). With ``dry_run`` (2.10): 200, what it would take and why not
    the rest, nothing written (doc/devices.md, "Why not here?")."""
    req.app.authorize(req, policies.CREATE)
    request = parse_request(req, wsgi.extract_json(req))
    if request.dry_run:
        return wsgi.json_response(200, _serialize_dry_run(claim_saga.dry_run(req, request)))
    claim = claim_saga.make(req, request).claim
    status = 202 if claim["state"] == db.PENDING else 201
    headers = [("Location", req.link("claims", claim["uuid"])["href"])]
    return wsgi.json_response(status, _serialize(req, claim), headers=headers)


def list_claims(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"claims": [...]}``: the caller's project's (an admin's: every project's, or
    ``project``'s), filtered by ``hostname``, ``state`` (comma-separated), ``consumer``."""
    req.app.authorize(req, policies.GET_ALL)
    states = wsgi.query_list(req, "state")
    unknown = sorted(set(states or ()) - set(db.STATES))
    if unknown:
        raise wsgi.ApiError(
            400, f"Unknown claim state(s): {', '.join(unknown)}.", "exosuit.query.state"
        )
    project = pagination.text_param(req, "project")
    if project is not None and not req.context.is_admin_role:
        # Refused, not ignored: only an admin sees other projects' claims.
        if project != req.context.project_id:
            raise wsgi.ApiError(
                403,
                f"project: only an admin lists another project's claims; yours are "
                f"those of project {req.context.project_id} (leave project out).",
                "exosuit.query.project",
            )
        project = None  # the caller's own: what the scope lists anyway
    page = pagination.page_from_request(req, PAGING)
    rows = req.app.db.read(
        db.list_claims,
        _scope(req),
        project_id=project,
        hostname=pagination.text_param(req, "hostname"),
        states=states,
        consumer=pagination.text_param(req, "consumer"),
        page=page,
    )
    body: dict[str, Any] = {}
    rows = pagination.next_link(req, page, rows, body, PAGING)
    body["claims"] = [_serialize(req, c) for c in rows]
    return wsgi.json_response(200, body)


def get_claim(req: wsgi.Request) -> wsgi.Response:
    """200 with the claim; 404 if it does not exist or belongs to another project."""
    req.app.authorize(req, policies.GET)
    claim = req.app.db.read(db.get, _uuid(req), _scope(req))
    return wsgi.json_response(200, _serialize(req, claim))


def delete_claim(req: wsgi.Request) -> wsgi.Response:
    """204: the claim released, every device freed at once (its Placement allocation is
    deleted by the conductor). Idempotent: a released claim answers 204 again."""
    req.app.authorize(req, policies.DELETE)
    req.app.db.write(db.release, _uuid(req), _scope(req))
    return wsgi.json_response(204)


def renew_claim(req: wsgi.Request) -> wsgi.Response:
    """200 with the claim, now expiring ``expires_in`` seconds from now; 409
    ``exosuit.claim.released`` for a released claim."""
    req.app.authorize(req, policies.RENEW)
    body = wsgi.extract_json(req, schema.POST_RENEW_V2_8)
    claim = req.app.db.write(db.renew, _uuid(req), _scope(req), body["expires_in"])
    return wsgi.json_response(200, _serialize(req, claim))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Claim": obj(
        {
            "uuid": STR,
            "project_id": NSTR,
            "user_id": NSTR,
            "consumer": NSTR,
            "hostname": NSTR,
            "device_profile_name": {"description": "null: it named its attach handles", **NSTR},
            "state": {"enum": list(db.STATES)},
            "reason": NSTR,
            "container": BOOL,
            "expires_at": {**TIME, "description": "ISO 8601, UTC; null: never"},
            "created_at": TIME,
            "released_at": TIME,
            "devices": {
                "type": "array",
                "items": obj(
                    {
                        "arq_uuid": STR,
                        "device_uuid": NSTR,
                        "deployable_uuid": NSTR,
                        "rp_uuid": NSTR,
                        "attach_handle_uuid": NSTR,
                        "attach_handle_type": NSTR,
                        "attach_handle_info": {"type": ["object", "null"]},
                        "cdi_device": {
                            "description": "exosuit.dev/<class>=<claim uuid>-<n> (container)",
                            **NSTR,
                        },
                    }
                ),
            },
            "cdi": obj({"state": {"enum": [*db.CDI_STATES, None]}, "reason": NSTR}),
            "links": LINKS,
        }
    ),
    "ClaimDryRun": obj(
        {
            "dry_run": BOOL,
            "hostname": {"description": "where the claim would be made; null: refused", **NSTR},
            "reason": {"description": "why it would be refused (the 409's sentence)", **NSTR},
            "consumer_claim": {"description": "the consumer's live claim, returned", **NSTR},
            "devices": {
                "type": "array",
                "items": obj(
                    {"group": INT, "device_uuid": STR, "deployable_uuid": STR, "rp_uuid": STR}
                ),
            },
            "hosts": {
                "type": "array",
                "items": obj(
                    {
                        "hostname": STR,
                        "verdict": {"enum": list(candidates.HOST_VERDICTS)},
                        "reason": STR,
                        "devices": {"type": "array", "items": ref("ClaimVerdict")},
                    }
                ),
            },
        }
    ),
    "ClaimVerdict": obj(
        {
            "device_uuid": STR,
            "deployable_uuid": STR,
            "deployable_name": STR,
            "rp_uuid": STR,
            "group": {"description": "the profile group it came closest to serving", **NINT},
            "verdict": {"enum": [candidates.CHOSEN, candidates.SPARE, *candidates.ORDER]},
            "reason": STR,
            "holders": {
                "type": "array",
                "items": obj({"arq_uuid": STR, "instance_uuid": NSTR, "claim_uuid": NSTR}),
            },
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    create_claim: Operation(
        "Claim devices: bound by Exosuit on one host, without Nova (2.8); or, with "
        "dry_run (2.10), what it would take and why not the rest",
        ok=(200, 201, 202),
        errors=(404, 409),
        body=schema.POST_CLAIM_V2_10,
        returns={"anyOf": [ref("Claim"), ref("ClaimDryRun")]},
    ),
    list_claims: Operation(
        "List claims",
        query=(
            query(
                "project",
                TEXT,
                "Only this project's (an admin; anyone else may name only their own: "
                "another is a 403).",
            ),
            query("hostname", TEXT, "Only this host's."),
            query("state", STR, f"Only these states ({CSV}: {', '.join(db.STATES)})."),
            query("consumer", TEXT, "Only this consumer's."),
            *paged(PAGING),
        ),
        returns=list_of("claims", "Claim"),
    ),
    get_claim: Operation("Show a claim", errors=(404,), returns=ref("Claim")),
    delete_claim: Operation("Release a claim (idempotent)", ok=(204,), errors=(404,)),
    renew_claim: Operation(
        "Move a claim's expiry",
        errors=(404, 409),
        body=schema.POST_RENEW_V2_8,
        returns=ref("Claim"),
    ),
}
