"""/v2/attach_handles (microversion 2.5): every attach handle, where it is and who
holds it; list and show."""

from __future__ import annotations

from exosuit import exceptions
from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    BOOL,
    LINKS,
    STR,
    TEXT,
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
from exosuit.api.policies import attach_handles as policies
from exosuit.db import attach_handles as db
from exosuit.schemas import JSONObject

SORT_KEYS = set(db.SORT_COLUMNS)
_BOOLEANS = {"true": True, "false": False}


def _serialize_holder(req: wsgi.Request, handle: db.AttachHandleRow) -> JSONObject | None:
    if handle["arq_uuid"] is None:
        return None
    holder = {
        "arq_uuid": handle["arq_uuid"],
        "instance_uuid": handle["arq_instance_uuid"],
        "project_id": handle["arq_project_id"],
        "state": handle["arq_state"],
    }
    if req.version.matches((2, 8)):
        holder["claim_uuid"] = handle["claim_uuid"]  # a standalone claim's (doc/standalone.md)
    return holder


def _serialize(req: wsgi.Request, handle: db.AttachHandleRow) -> JSONObject:
    return {
        "uuid": handle["uuid"],
        "hostname": handle["hostname"],
        "device_uuid": handle["device_uuid"],
        "deployable_uuid": handle["deployable_uuid"],
        "deployable_name": handle["deployable_name"],
        "attach_type": handle["attach_type"],
        "attach_info": handle["attach_info"],
        "in_use": handle["in_use"],
        "presence": handle["presence"],
        "holder": _serialize_holder(req, handle),
        "created_at": wsgi.format_time(handle["created_at"]),
        "updated_at": wsgi.format_time(handle["updated_at"]),
        "links": [req.link("attach_handles", handle["uuid"])],
    }


def _filters(req: wsgi.Request) -> db.Filters:
    """The exact-match filters: 400 for a uuid that is none, or an in_use not true/false."""
    uuids = {}
    for name in ("device_uuid", "deployable_uuid"):
        value = req.GET.get(name)
        if value is not None and not wsgi.is_uuid_like(value):
            raise wsgi.ApiError(400, f"{name} must be a UUID, not {value!r}.", "exosuit.query.uuid")
        uuids[name] = value.lower() if value is not None else None  # stored in lower case
    in_use = req.GET.get("in_use")
    if in_use is not None and in_use not in _BOOLEANS:
        raise wsgi.ApiError(
            400, f"in_use must be true or false, not {in_use!r}.", "exosuit.query.in_use"
        )
    return db.Filters(
        hostname=pagination.text_param(req, "hostname"),
        in_use=None if in_use is None else _BOOLEANS[in_use],
        **uuids,
    )


def list_attach_handles(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"attach_handles": [...]}``, newest first by default; ``next`` while more
    remain."""
    req.app.authorize(req, policies.GET_ALL)
    filters = _filters(req)
    page = pagination.page_from_request(req, SORT_KEYS)
    rows = req.app.db.read(db.list_attach_handles, filters=filters, page=page)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body)
    body["attach_handles"] = [_serialize(req, h) for h in rows]
    return wsgi.json_response(200, body)


def get_attach_handle(req: wsgi.Request) -> wsgi.Response:
    """200 with the handle; 404 ``exosuit.attach_handle.not_found``."""
    req.app.authorize(req, policies.GET_ONE)
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):  # no handle has such a uuid
        raise exceptions.AttachHandleNotFound(uuid=uuid)
    handle = req.app.db.read(db.get, uuid)
    return wsgi.json_response(200, _serialize(req, handle))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "AttachHandle": obj(
        {
            "uuid": STR,
            "hostname": STR,
            "device_uuid": STR,
            "deployable_uuid": STR,
            "deployable_name": STR,
            "attach_type": STR,
            "attach_info": {"type": "object"},
            "in_use": BOOL,
            "presence": STR,
            "holder": {"type": ["object", "null"]},
            "created_at": TIME,
            "updated_at": TIME,
            "links": LINKS,
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_attach_handles: Operation(
        "List attach handles",
        query=(
            query("hostname", TEXT, "Only this host's."),
            query("device_uuid", UUID_FORMAT, "Only this device's."),
            query("deployable_uuid", UUID_FORMAT, "Only this deployable's."),
            query("in_use", {"enum": ["true", "false"]}, "Held or free."),
            *paged(SORT_KEYS),
        ),
        returns=list_of("attach_handles", "AttachHandle"),
    ),
    get_attach_handle: Operation(
        "Show an attach handle", errors=(404,), returns=ref("AttachHandle")
    ),
}
