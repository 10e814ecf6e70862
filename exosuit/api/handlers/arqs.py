"""/v2/accelerator_requests: create, bind/unbind (PATCH), list, show, delete."""

from __future__ import annotations

import dataclasses
from typing import cast

from exosuit import exceptions
from exosuit.api import pagination, programs, wsgi
from exosuit.api.describe import (
    CSV,
    LINKS,
    NINT,
    NSTR,
    STR,
    TIME,
    UUID_FORMAT,
    Handler,
    Operation,
    Schema,
    list_of,
    obj,
    paged,
    query,
    ref,
)
from exosuit.api.policies import arqs as policies
from exosuit.api.schemas import arqs as schema
from exosuit.api.schemas import limits
from exosuit.db import arqs as db
from exosuit.schemas import JSONObject

SORT_KEYS = set(db.SORT_COLUMNS)
_BIND_FIELDS = ("hostname", "device_rp_uuid", "instance_uuid")


def _serialize(req: wsgi.Request, arq: db.ArqRow) -> JSONObject:
    body: JSONObject = {
        "uuid": arq["uuid"],
        "state": arq["state"],
        "device_profile_name": arq["device_profile_name"],
        "device_profile_group_id": arq["device_profile_group_id"],
        "hostname": arq["hostname"],
        "device_rp_uuid": arq["device_rp_uuid"],
        "instance_uuid": arq["instance_uuid"],
        "project_id": arq["project_id"],
        "attach_handle_type": arq["attach_handle_type"],
        "attach_handle_uuid": arq["attach_handle_uuid"],
        "attach_handle_info": arq["attach_handle_info"],
        "created_at": wsgi.format_time(arq["created_at"]),
        "updated_at": wsgi.format_time(arq["updated_at"]),
        "links": [req.link("accelerator_requests", arq["uuid"])],
    }
    if req.version.matches((2, 8)):
        body["claim_uuid"] = arq["claim_uuid"]  # the claim that holds it (doc/standalone.md)
    return body


def _scope(req: wsgi.Request) -> db.Scope:
    """Admins see every project's ARQs; everyone else only their project's.

    As in Cyborg, policy rules check the caller's roles; ownership is enforced
    here, in every query, so another project's ARQ is simply not found.
    """
    context = req.context
    if context.is_admin_role:
        return db.Scope(None)
    return db.Scope(context.project_id)


def _require_service_token(req: wsgi.Request, action: str) -> None:
    if not req.context.has_service_token:
        raise exceptions.ServiceTokenRequired(action=action)


def _uuid_param(req: wsgi.Request, name: str) -> str | None:
    value = req.GET.get(name)
    if value is not None and not wsgi.is_uuid_like(value):
        raise wsgi.ApiError(400, f"{name} must be a UUID, not {value!r}.", "exosuit.query.uuid")
    return value.lower() if value is not None else None  # stored in lower case


def create_arqs(req: wsgi.Request) -> wsgi.Response:
    """201 ``{"arqs": [...]}``: one ARQ per unit of every group of the profile."""
    req.app.authorize(req, policies.CREATE)
    data = wsgi.extract_json(req, schema.POST_ARQS_V2_0)
    per_unit = {
        k: int(v) for k, v in req.app.conf.accelerator_requests.attach_handles_per_unit.items()
    }
    arqs = req.app.db.write(
        db.create,
        profile_name=data["device_profile_name"],
        project_id=req.context.project_id,
        handles_per_unit=per_unit,
        max_arqs=req.app.conf.api.max_arqs_per_request,
    )
    return wsgi.json_response(201, {"arqs": [_serialize(req, a) for a in arqs]})


def list_arqs(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"arqs": [...]}``; 423 with ``instance`` + ``bind_state=resolved`` while
    any ARQ of the instance is unresolved."""
    req.app.authorize(req, policies.GET_ALL)
    scope = _scope(req)
    instance = _uuid_param(req, "instance")
    bind_state = req.GET.get("bind_state")
    if bind_state is not None and bind_state != "resolved":
        raise wsgi.ApiError(
            400, f"bind_state must be 'resolved', not {bind_state!r}.", "exosuit.arq.bind_state"
        )
    filters: JSONObject = {"instance": instance}
    if bind_state and instance is None:
        filters["states"] = db.RESOLVED
    if req.version.matches((2, 4)):
        state = wsgi.query_list(req, "state")
        if state is not None:
            unknown = sorted(set(state) - set(db.STATES))
            if unknown:
                raise wsgi.ApiError(
                    400, f"Unknown ARQ state(s): {', '.join(unknown)}.", "exosuit.arq.state"
                )
            filters["states"] = tuple(s for s in state if s in (filters.get("states") or state))
        filters["hostname"] = req.GET.get("hostname")
        filters["device_profile_name"] = req.GET.get("device_profile_name")
    page = pagination.page_from_request(req, SORT_KEYS)
    rows = req.app.db.read(
        db.list_arqs, scope, page=page, require_resolved=bool(bind_state), **filters
    )
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body)
    body["arqs"] = [_serialize(req, a) for a in rows]
    return wsgi.json_response(200, body)


def get_arq(req: wsgi.Request) -> wsgi.Response:
    """200 with the ARQ; 404 if it does not exist or belongs to another project."""
    req.app.authorize(req, policies.GET_ONE)
    arq = req.app.db.read(db.get, req.arg("uuid"), _scope(req))
    return wsgi.json_response(200, _serialize(req, arq))


@dataclasses.dataclass(frozen=True)
class Patch:
    """A bind/unbind PATCH, parsed: ``binds`` (op add) or ``unbinds`` (op remove: the
    ARQs' uuids), never both."""

    binds: list[db.Binding] = dataclasses.field(default_factory=list)
    unbinds: list[str] = dataclasses.field(default_factory=list)

    @property
    def uuids(self) -> set[str]:
        return {b.uuid for b in self.binds} | set(self.unbinds)

    @property
    def sets_project_id(self) -> bool:
        """Whether a bind also moves its ARQ to another project (an admin's call)."""
        return any(b.project_id is not None for b in self.binds)


def parse_patch(body: object, *, project_id_allowed: bool) -> Patch:
    """Nova's map ``{"<arq uuid>": [ops…], …}`` as a Patch (uuids in lower case).

    Pure: the body and what the request's microversion allows in, the patch or an
    ApiError out. 400 unless the body matches ``PATCH_ARQS_V2_0`` (ops add/remove,
    known paths, non-empty string values), all its ops are adds or all removes, and
    each bind names hostname, device_rp_uuid and instance_uuid (both UUIDs); 406 for a
    /project_id op unless ``project_id_allowed`` (microversion 2.1 and later).
    """
    wsgi.validate(body, schema.PATCH_ARQS_V2_0)
    arqs = {uuid.lower(): ops for uuid, ops in cast(JSONObject, body).items()}  # an object
    ops = [op for arq_ops in arqs.values() for op in arq_ops]
    if not project_id_allowed and any(_field(op) == "project_id" for op in ops):
        raise wsgi.ApiError(
            406, "Patching /project_id needs microversion 2.1 or later.", "exosuit.microversion"
        )
    kinds = {op["op"] for op in ops}
    if len(kinds) != 1:
        raise wsgi.ApiError(
            400,
            "A PATCH either binds (add) or unbinds (remove) all its ARQs, not both.",
            "exosuit.arq.patch",
        )
    if kinds == {"remove"}:
        return Patch(unbinds=list(arqs))
    return Patch(binds=[_binding(uuid, arq_ops) for uuid, arq_ops in arqs.items()])


def _field(op: JSONObject) -> str:
    path: str = op["path"]
    return path.lstrip("/")  # the leading slash is optional, as in Cyborg


def _binding(uuid: str, ops: list[JSONObject]) -> db.Binding:
    fields = {_field(op): op["value"] for op in ops}
    missing = [f for f in _BIND_FIELDS if f not in fields]
    if missing:
        raise wsgi.ApiError(
            400, f"{uuid}: fields absent in patch: {', '.join(missing)}.", "exosuit.arq.patch"
        )
    for f in ("device_rp_uuid", "instance_uuid"):
        if not wsgi.is_uuid_like(fields[f]):
            raise wsgi.ApiError(400, f"{uuid}: /{f} must be a UUID.", "exosuit.arq.patch")
        fields[f] = fields[f].lower()  # compared with lower-case uuids
    return db.Binding(
        uuid=uuid, project_id=fields.get("project_id"), **{f: fields[f] for f in _BIND_FIELDS}
    )


def _parse(req: wsgi.Request, body: object) -> Patch:
    """The patch, as this request's microversion and caller may send it: 403 for a
    bind that sets project_id unless the caller is an admin; 400 beyond ``[api]``'s limits."""
    limits.check_arq_patch(body, limits.Limits.from_conf(req.app.conf))
    patch = parse_patch(body, project_id_allowed=req.version.matches((2, 1)))
    if patch.sets_project_id and not req.context.is_admin_role:
        raise wsgi.ApiError(403, "Only an admin may set project_id.", "exosuit.policy.forbidden")
    return patch


def patch_arqs(req: wsgi.Request) -> wsgi.Response:
    """202: bind (``add``) or unbind (``remove``) ARQs; 409 naming each bind that failed.

    A bind that needs work on its host is still BindStarted at the 202; Nova learns
    how every bind ended from an ``accelerator-request-bound`` event (doc/nova.md).
    The images a bind's profile group asks for are looked up first, outside the
    bind's transaction (doc/programming.md).
    """
    req.app.authorize(req, policies.UPDATE)
    return _apply_patch(req, _parse(req, wsgi.extract_json(req)))


def patch_arq(req: wsgi.Request) -> wsgi.Response:
    """202: bind or unbind one ARQ, the way openstacksdk and python-cyborgclient send it:
    ``PATCH /v2/accelerator_requests/{uuid}`` with the body ``{"<uuid>": [ops…]}`` (or
    just ``[ops…]``). 400 if the body names another ARQ than the path."""
    req.app.authorize(req, policies.UPDATE)
    uuid = req.arg("uuid").lower()
    body = wsgi.extract_json(req)
    patch = _parse(req, {uuid: body} if isinstance(body, list) else body)
    if patch.uuids != {uuid}:
        raise wsgi.ApiError(
            400,
            f"The body of PATCH {req.path_info} may only patch accelerator request {uuid}.",
            "exosuit.arq.patch",
        )
    return _apply_patch(req, patch)


def _apply_patch(req: wsgi.Request, patch: Patch) -> wsgi.Response:
    scope = _scope(req)
    if patch.binds:
        _require_service_token(req, "Binding accelerator requests")
        results = _bind(req, patch.binds, scope)
        failed = [r for r in results if r.error]
        if failed:
            raise wsgi.ApiError(
                409,
                "; ".join(
                    f"Binding accelerator request {r.arq['uuid']} failed: {r.error}" for r in failed
                ),
                exceptions.BindFailed.code,
            )
    else:
        _require_service_token(req, "Unbinding accelerator requests")
        req.app.db.write(db.unbind, patch.unbinds, scope)
    return wsgi.json_response(202)


def _bind(req: wsgi.Request, binds: list[db.Binding], scope: db.Scope) -> list[db.BindResult]:
    """Bind; the images the profile groups ask for are looked up only when one does
    (outside the bind's transaction: Glance is an HTTP call), then bound again."""
    options = {
        "skip_locked": req.app.db.supports_skip_locked,
        "bind_timeout": req.app.conf.bind_timeout,
    }
    try:
        return req.app.db.write(db.bind, binds, scope, resolve_first=True, **options)
    except db.ProgramsToResolve:
        needs = programs.bind_needs(req, binds, scope)
        return req.app.db.write(db.bind, binds, scope, programs=needs, **options)


def _delete_uuids(req: wsgi.Request, uuids: list[str]) -> wsgi.Response:
    bad = [u for u in uuids if not wsgi.is_uuid_like(u)]
    if bad or not uuids:
        raise wsgi.ApiError(
            400,
            f"arqs must be a comma-separated list of UUIDs; "
            f"invalid: {', '.join(bad) or '(empty)'}.",
            "exosuit.query.uuid",
        )
    missing = req.app.db.write(
        db.delete_by_uuids, uuids, _scope(req), service_token=req.context.has_service_token
    )
    if missing:
        raise exceptions.AcceleratorRequestNotFound(uuid=", ".join(missing))
    return wsgi.json_response(204)


def delete_arqs(req: wsgi.Request) -> wsgi.Response:
    """204. Exactly one of ``?arqs=u1,u2`` (404 if any is missing, after deleting the
    others) or ``?instance=<uuid>`` (idempotent, needs a service token)."""
    req.app.authorize(req, policies.DELETE)
    uuids = wsgi.query_list(req, "arqs")
    instance = req.GET.get("instance")
    if (uuids is None) == (instance is None):
        raise wsgi.ApiError(
            400, "Give exactly one of arqs=<uuid,…> or instance=<uuid>.", "exosuit.arq.delete_query"
        )
    if uuids is not None:
        return _delete_uuids(req, [u.lower() for u in uuids])
    instance = _uuid_param(req, "instance")
    assert instance is not None  # uuids is None, so instance was given
    _require_service_token(req, "Deleting accelerator requests by instance")
    req.app.db.write(db.delete_by_instance, instance, _scope(req))
    return wsgi.json_response(204)


def delete_arq(req: wsgi.Request) -> wsgi.Response:
    """204: delete one ARQ (as ``?arqs=<uuid>``)."""
    req.app.authorize(req, policies.DELETE)
    return _delete_uuids(req, [req.arg("uuid").lower()])


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

_ARQ_PATCH_ONE: Schema = {
    "description": "Nova's map naming this ARQ only, or just its list of operations",
    "anyOf": [schema.PATCH_ARQS_V2_0, schema.PATCH_ARQS_V2_0["additionalProperties"]],
}


SHAPES: dict[str, Schema] = {
    "AcceleratorRequest": obj(
        {
            "uuid": STR,
            "state": {"enum": list(db.STATES)},
            "device_profile_name": NSTR,
            "device_profile_group_id": NINT,
            "hostname": NSTR,
            "device_rp_uuid": NSTR,
            "instance_uuid": NSTR,
            "project_id": NSTR,
            "attach_handle_type": NSTR,
            "attach_handle_uuid": NSTR,
            "attach_handle_info": {"type": ["object", "null"]},
            "created_at": TIME,
            "updated_at": TIME,
            "links": LINKS,
        },
        {"claim_uuid": {"description": "from 2.8: the claim that holds it", **NSTR}},
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_arqs: Operation(
        "List accelerator requests",
        errors=(423,),
        query=(
            query("instance", UUID_FORMAT, "Only the instance's ARQs."),
            query("bind_state", {"enum": ["resolved"]}, "With instance: 423 until resolved."),
            query("state", STR, f"From 2.4: only these states ({CSV})."),
            query("hostname", STR, "From 2.4: only this host's."),
            query("device_profile_name", STR, "From 2.4: only this profile's."),
            *paged(SORT_KEYS),
        ),
        returns=list_of("arqs", "AcceleratorRequest"),
    ),
    create_arqs: Operation(
        "Create accelerator requests from a device profile",
        ok=(201,),
        errors=(404, 409),
        body=schema.POST_ARQS_V2_0,
        returns=obj({"arqs": {"type": "array", "items": ref("AcceleratorRequest")}}),
    ),
    patch_arqs: Operation(
        "Bind or unbind accelerator requests",
        ok=(202,),
        errors=(404, 409),
        body=schema.PATCH_ARQS_V2_0,
    ),
    delete_arqs: Operation(
        "Delete accelerator requests (by uuids or instance)",
        ok=(204,),
        errors=(404, 409),
        query=(
            query("arqs", STR, f"ARQ UUIDs ({CSV})."),
            query("instance", UUID_FORMAT, "Every ARQ of the instance."),
        ),
    ),
    get_arq: Operation(
        "Show an accelerator request", errors=(404,), returns=ref("AcceleratorRequest")
    ),
    patch_arq: Operation(
        "Bind or unbind one accelerator request",
        ok=(202,),
        errors=(404, 409),
        body=_ARQ_PATCH_ONE,
    ),
    delete_arq: Operation("Delete an accelerator request", ok=(204,), errors=(404, 409)),
}
