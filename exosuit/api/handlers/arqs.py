"""/v2/accelerator_requests: create, bind/unbind (PATCH), list, show, delete."""

from __future__ import annotations

from exosuit import exceptions
from exosuit.api import pagination, wsgi
from exosuit.api.policies import arqs as policies
from exosuit.api.schemas import arqs as schema
from exosuit.db import arqs as db

SORT_KEYS = set(db.SORT_COLUMNS)
_BIND_FIELDS = ("hostname", "device_rp_uuid", "instance_uuid")


def _serialize(req: wsgi.Request, arq: dict) -> dict:
    return {
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


def create_arqs(req: wsgi.Request):
    """201 ``{"arqs": [...]}``: one ARQ per unit of every group of the profile."""
    req.app.authorize(req, policies.CREATE)
    data = wsgi.extract_json(req, schema.POST_ARQS_V2_0)
    per_unit = {k: int(v) for k, v in req.app.conf.accelerator_requests
                .attach_handles_per_unit.items()}
    arqs = req.app.db.write(
        db.create,
        profile_name=data["device_profile_name"],
        project_id=req.context.project_id,
        handles_per_unit=per_unit,
    )
    return wsgi.json_response(201, {"arqs": [_serialize(req, a) for a in arqs]})


def list_arqs(req: wsgi.Request):
    """200 ``{"arqs": [...]}``; 423 with ``instance`` + ``bind_state=resolved`` while
    any ARQ of the instance is unresolved."""
    req.app.authorize(req, policies.GET_ALL)
    scope = _scope(req)
    instance = _uuid_param(req, "instance")
    bind_state = req.GET.get("bind_state")
    if bind_state is not None and bind_state != "resolved":
        raise wsgi.ApiError(400, f"bind_state must be 'resolved', not {bind_state!r}.",
                            "exosuit.arq.bind_state")
    filters: dict = {"instance": instance}
    if bind_state and instance is None:
        filters["states"] = db.RESOLVED
    if req.version.matches((2, 4)):
        state = wsgi.query_list(req, "state")
        if state is not None:
            unknown = sorted(set(state) - set(db.STATES))
            if unknown:
                raise wsgi.ApiError(400, f"Unknown ARQ state(s): {', '.join(unknown)}.",
                                    "exosuit.arq.state")
            filters["states"] = tuple(s for s in state if s in (filters.get("states") or state))
        filters["hostname"] = req.GET.get("hostname")
        filters["device_profile_name"] = req.GET.get("device_profile_name")
    page = pagination.page_from_request(req, SORT_KEYS)

    def _read(conn):
        if bind_state and instance is not None:
            pending = [u for u, s in db.instance_states(conn, instance, scope)
                       if s not in db.RESOLVED]
            if pending:
                raise exceptions.ARQUnresolved(instance=instance, uuids=", ".join(pending))
        return db.list_arqs(conn, scope, page=page, **filters)

    rows = req.app.db.read(_read)
    body: dict = {}
    rows = pagination.next_link(req, page, rows, body)
    body["arqs"] = [_serialize(req, a) for a in rows]
    return wsgi.json_response(200, body)


def get_arq(req: wsgi.Request):
    """200 with the ARQ; 404 if it does not exist or belongs to another project."""
    req.app.authorize(req, policies.GET_ONE)
    arq = req.app.db.read(db.get, req.arg("uuid"), _scope(req))
    return wsgi.json_response(200, _serialize(req, arq))


def _parse_patch(req: wsgi.Request, body: dict) -> tuple[str, list]:
    """("add", [Binding…]) or ("remove", [uuid…]) from Nova's PATCH map."""
    allow_project = req.version.matches((2, 1))
    kinds = set()
    bindings, removals = [], []
    for uuid, ops in body.items():
        ops_kinds = {op["op"] for op in ops}
        if len(ops_kinds) != 1:
            raise wsgi.ApiError(400, f"{uuid}: every op must be add, or every op remove.",
                                "exosuit.arq.patch")
        kinds |= ops_kinds
        fields: dict = {}
        for op in ops:
            path = op["path"].lstrip("/")
            if path == "project_id" and not allow_project:
                raise wsgi.ApiError(406, "Patching /project_id needs microversion 2.1 or "
                                    "later.", "exosuit.microversion")
            if path not in _BIND_FIELDS and path != "project_id":
                raise wsgi.ApiError(400, f"{uuid}: invalid path {op['path']!r} in patch.",
                                    "exosuit.arq.patch")
            if op["op"] == "add":
                value = op.get("value")
                if not isinstance(value, str) or not value:
                    raise wsgi.ApiError(400, f"{uuid}: {op['path']} needs a non-empty string "
                                        "value.", "exosuit.arq.patch")
                fields[path] = value
        if ops_kinds == {"add"}:
            missing = [f for f in _BIND_FIELDS if f not in fields]
            if missing:
                raise wsgi.ApiError(400, f"{uuid}: fields absent in patch: "
                                    f"{', '.join(missing)}.", "exosuit.arq.patch")
            for f in ("device_rp_uuid", "instance_uuid"):
                if not wsgi.is_uuid_like(fields[f]):
                    raise wsgi.ApiError(400, f"{uuid}: {f} must be a UUID.",
                                        "exosuit.arq.patch")
                fields[f] = fields[f].lower()  # compared with lower-case uuids
            if "project_id" in fields and not req.context.is_admin_role:
                raise wsgi.ApiError(403, "Only an admin may set project_id.",
                                    "exosuit.policy.forbidden")
            bindings.append(db.Binding(uuid=uuid, project_id=fields.get("project_id"),
                                       **{f: fields[f] for f in _BIND_FIELDS}))
        else:
            removals.append(uuid)
    if len(kinds) != 1:
        raise wsgi.ApiError(400, "A PATCH either binds (add) or unbinds (remove) all its "
                            "ARQs, not both.", "exosuit.arq.patch")
    return ("add", bindings) if bindings else ("remove", removals)


def patch_arqs(req: wsgi.Request):
    """202: bind (``add``) or unbind (``remove``) ARQs; 409 naming each bind that failed.

    A bind that needs work on its host is still BindStarted at the 202; Nova learns
    how every bind ended from an ``accelerator-request-bound`` event (doc/nova.md).
    """
    req.app.authorize(req, policies.UPDATE)
    return _apply_patch(req, wsgi.extract_json(req, schema.PATCH_ARQS_V2_0))


def patch_arq(req: wsgi.Request):
    """202: bind or unbind one ARQ, the way openstacksdk and python-cyborgclient send it:
    ``PATCH /v2/accelerator_requests/{uuid}`` with the body ``{"<uuid>": [ops…]}`` (or
    just ``[ops…]``). 400 if the body names another ARQ than the path."""
    req.app.authorize(req, policies.UPDATE)
    uuid = req.arg("uuid").lower()
    body = wsgi.extract_json(req)
    if isinstance(body, list):
        body = {uuid: body}
    wsgi.validate(body, schema.PATCH_ARQS_V2_0)
    if {k.lower() for k in body} != {uuid}:
        raise wsgi.ApiError(400, f"The body of PATCH {req.path_info} may only patch "
                            f"accelerator request {uuid}.", "exosuit.arq.patch")
    return _apply_patch(req, body)


def _apply_patch(req: wsgi.Request, body: dict):
    body = {k.lower(): v for k, v in body.items()}
    kind, items = _parse_patch(req, body)
    scope = _scope(req)
    if kind == "add":
        _require_service_token(req, "Binding accelerator requests")
        results = req.app.db.write(db.bind, items, scope,
                                   skip_locked=req.app.db.supports_skip_locked,
                                   bind_timeout=req.app.conf.bind_timeout)
        failed = [r for r in results if r.error]
        if failed:
            raise wsgi.ApiError(
                409,
                "; ".join(f"Binding accelerator request {r.arq['uuid']} failed: {r.error}"
                          for r in failed),
                exceptions.BindFailed.code,
            )
    else:
        _require_service_token(req, "Unbinding accelerator requests")
        req.app.db.write(db.unbind, items, scope)
    return wsgi.json_response(202)


def _delete_uuids(req: wsgi.Request, uuids: list[str]):
    bad = [u for u in uuids if not wsgi.is_uuid_like(u)]
    if bad or not uuids:
        raise wsgi.ApiError(400, f"arqs must be a comma-separated list of UUIDs; "
                            f"invalid: {', '.join(bad) or '(empty)'}.", "exosuit.query.uuid")
    scope = _scope(req)

    def _delete(conn):
        if db.bound_uuids(conn, uuids, scope) and not req.context.has_service_token:
            raise exceptions.ServiceTokenRequired(
                action="Deleting accelerator requests bound to an instance")
        return db.delete_by_uuids(conn, uuids, scope)

    missing = req.app.db.write(_delete)
    if missing:
        raise exceptions.AcceleratorRequestNotFound(uuid=", ".join(missing))
    return wsgi.json_response(204)


def delete_arqs(req: wsgi.Request):
    """204. Exactly one of ``?arqs=u1,u2`` (404 if any is missing, after deleting the
    others) or ``?instance=<uuid>`` (idempotent, needs a service token)."""
    req.app.authorize(req, policies.DELETE)
    uuids = wsgi.query_list(req, "arqs")
    instance = req.GET.get("instance")
    if (uuids is None) == (instance is None):
        raise wsgi.ApiError(400, "Give exactly one of arqs=<uuid,…> or instance=<uuid>.",
                            "exosuit.arq.delete_query")
    if uuids is not None:
        return _delete_uuids(req, [u.lower() for u in uuids])
    instance = _uuid_param(req, "instance")
    _require_service_token(req, "Deleting accelerator requests by instance")
    req.app.db.write(db.delete_by_instance, instance, _scope(req))
    return wsgi.json_response(204)


def delete_arq(req: wsgi.Request):
    """204: delete one ARQ (as ``?arqs=<uuid>``)."""
    req.app.authorize(req, policies.DELETE)
    return _delete_uuids(req, [req.arg("uuid").lower()])
