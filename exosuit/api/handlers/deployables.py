"""/v2/deployables: list, show, program (and, from 2.6, a program's state)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from webob.headers import EnvironHeaders
from webob.request import BaseRequest

from exosuit.api import microversion, pagination, programs, wsgi
from exosuit.api.describe import (
    INT,
    LINKS,
    NBOOL,
    NINT,
    NSTR,
    STR,
    TIME,
    Handler,
    Operation,
    Schema,
    list_of,
    obj,
    paged,
    ref,
)
from exosuit.api.policies import deployables as policies
from exosuit.api.schemas import deployables as schema
from exosuit.db import changes
from exosuit.db import deployables as db
from exosuit.db import programs as programs_db
from exosuit.metrics import Counter
from exosuit.schemas import JSONObject

SORT_KEYS = set(db.SORT_COLUMNS)
# Counted by exosuit/db/changes.py: the version of the list the response cache keeps.
CHANGES = Counter(
    changes.DEPLOYABLES,
    "Committed transactions that changed deployables or their attributes (or deleted a "
    "device), by slot (one of 16 rows, so that writers do not queue on one): their sum "
    "is the version of the deployable list the API's response cache compares.",
    ("slot",),
)


def _serialize(req: wsgi.Request, deployable: db.DeployableRow) -> JSONObject:
    return {
        "uuid": deployable["uuid"],
        "parent_id": deployable["parent_id"],
        "root_id": deployable["root_id"],
        "name": deployable["name"],
        "num_accelerators": deployable["num_accelerators"],
        "device_id": deployable["device_id"],
        # Cyborg returns this list as a JSON string.
        "attributes_list": json.dumps(deployable["attributes"]),
        "rp_uuid": deployable["rp_uuid"],
        "driver_name": deployable["driver_name"],
        "bitstream_id": deployable["bitstream_id"],
        "created_at": wsgi.format_time(deployable["created_at"]),
        "updated_at": wsgi.format_time(deployable["updated_at"]),
        "links": [
            req.link("deployables", deployable["uuid"]),
            req.link("deployables", deployable["uuid"], rel="bookmark"),
        ],
    }


def list_deployables(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"deployables": [...]}``."""
    req.app.authorize(req, policies.GET_ALL)
    page = pagination.page_from_request(req, SORT_KEYS)
    if page is None:
        return _every_deployable(req)
    rows = req.app.db.read(db.list_deployables, page=page)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body)
    body["deployables"] = [_serialize(req, d) for d in rows]
    return wsgi.json_response(200, body)


def _every_deployable(req: wsgi.Request) -> wsgi.Response:
    """The unpaged list (below 2.4, what Nova and Cyborg's clients ask for): the body
    kept in the app's response cache while the list's version is unchanged, one small
    query instead of the list (exosuit/api/response_cache.py)."""
    key = ("deployables", req.base_url)
    kept = req.app.responses.get(key)
    version, rows = req.app.db.read(db.list_all_unless, kept.version if kept else None)
    if rows is None:
        assert kept is not None  # list_all_unless returns the list unless it is known
        return wsgi.encoded_json_response(200, kept.body)
    body = wsgi.encode_json({"deployables": [_serialize(req, d) for d in rows]})
    req.app.responses.put(key, version, body)
    return wsgi.encoded_json_response(200, body)


# The path, version and headers of the list the cache keeps, answered before routing.
LIST_ROUTE = "/v2/deployables"
_PAGED = (2, 4)


class _Caller:
    def __init__(self, context: Any) -> None:
        self.context = context


def cached_answer(
    app: wsgi.App, environ: dict[str, Any]
) -> tuple[bytes, list[tuple[str, str]]] | None:
    """The body and headers of ``list_deployables``'s answer to a plain ``GET
    /v2/deployables`` below 2.4 when the response cache holds the list at the version the
    database holds now; None for any other request (the full path answers it: anything
    unusual, any refusal, any miss).

    Called after authentication, before webob, routing and microversion handling (the
    largest share of a cache hit's cost): the same checks, in the same functions, as the
    full path's way to the same answer (no query and no body, the version asked for, the
    caller's identity headers, the policy, the cache's key and version), and the same
    headers (the request id is added outside, as for every answer)."""
    if (
        environ.get("REQUEST_METHOD") != "GET"
        or environ.get("PATH_INFO") != LIST_ROUTE
        or environ.get("QUERY_STRING")
        or "CONTENT_LENGTH" in environ
        or "HTTP_TRANSFER_ENCODING" in environ
    ):
        return None
    try:
        version = microversion.parse(EnvironHeaders(environ))
        if version.matches(_PAGED):
            return None
        if not app.allowed(_Caller(app.context(environ)), policies.GET_ALL):
            return None
    except Exception:  # noqa: BLE001 - refused or malformed: the full path says how
        return None
    public = app.conf.api.public_endpoint
    base_url = (public or BaseRequest(environ).application_url).rstrip("/")
    kept = app.responses.get(("deployables", base_url))
    if kept is None or app.deployables_version() != kept.version:
        return None
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(kept.body))),
        *microversion.response_headers(version),
    ]
    return kept.body, headers


def get_deployable(req: wsgi.Request) -> wsgi.Response:
    req.app.authorize(req, policies.GET_ONE)
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):
        raise wsgi.ApiError(400, f"Invalid UUID {uuid!r}.", "exosuit.query.uuid")
    return wsgi.json_response(200, _serialize(req, req.app.db.read(db.get, uuid)))


def program_deployable(req: wsgi.Request) -> wsgi.Response:
    """Program a deployable with an image (Cyborg's body; doc/programming.md).

    2.6 and later: 202 ``{"program": PROGRAM}`` at once. Below 2.6 (Cyborg's clients)
    the request waits up to ``[api] program_wait`` seconds: 200 with the deployable
    when the image is loaded (or already was), 409 ``exosuit.program.failed`` with
    the reason, 202 with the deployable while it still runs. Refusals (409): in use,
    busy, unsupported, unavailable; 404 for an unknown deployable or image.
    """
    req.app.authorize(req, policies.PROGRAM)
    body = wsgi.extract_json(req, schema.PROGRAM_V2_0)
    uuid = req.arg("uuid")
    req.app.db.read(db.get, uuid)  # 404 for an unknown deployable before any image look-up
    image = programs.resolve(req, body[0]["value"][0]["image_uuid"], req.context.project_id)
    started = req.app.db.write(
        programs_db.start,
        uuid,
        image,
        project_id=req.context.project_id,
        user_id=req.context.user_id,
    )
    if req.version.matches((2, 6)):
        return wsgi.json_response(202, {"program": programs.serialize(started.program)})
    wait = req.app.conf.api.program_wait
    program = programs.wait_for_end(req, started.program["uuid"], wait)
    if program["state"] == programs_db.FAILED:
        raise programs.failure(program)
    status = 200 if program["state"] == programs_db.DONE else 202
    return wsgi.json_response(status, _serialize(req, req.app.db.read(db.get, uuid)))


def program_deployable_again(req: wsgi.Request) -> wsgi.Response:
    """``PATCH /v2/deployables/{uuid}/program/{uuid}``: where openstacksdk's
    ``patch_deployable`` (and so ``openstack accelerator deployable program``) sends
    Cyborg's request (its base path ``/deployables/%(id)s/program`` plus the id). The
    same as ``…/program`` when both UUIDs are the deployable's; 404 otherwise (Cyborg
    answers 405 here: doc/compatibility.md)."""
    if req.arg("again") != req.arg("uuid"):
        raise wsgi.ApiError(
            404, f"The resource {req.path_info} could not be found.", "exosuit.not_found"
        )
    return program_deployable(req)


def get_program(req: wsgi.Request) -> wsgi.Response:
    """200 the deployable's latest PROGRAM (2.6); 404 when it was never programmed
    through Exosuit."""
    req.app.authorize(req, policies.GET_PROGRAM)
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):
        raise wsgi.ApiError(400, f"Invalid UUID {uuid!r}.", "exosuit.query.uuid")
    program = req.app.db.read(programs_db.latest_of_deployable, uuid)
    return wsgi.json_response(200, programs.serialize(program))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

_PROGRAM = Operation(
    "Program a deployable (2.6: 202 with the program; below, waits and answers the deployable)",
    ok=(200, 202),
    errors=(404, 409, 502),
    body=schema.PROGRAM_V2_0,
    returns={"anyOf": [ref("Deployable"), obj({"program": ref("Program")})]},
)


SHAPES: dict[str, Schema] = {
    "Deployable": obj(
        {
            "uuid": STR,
            "parent_id": NINT,
            "root_id": NINT,
            "name": STR,
            "num_accelerators": INT,
            "device_id": NINT,
            "attributes_list": {"type": "string", "description": "a JSON list, as Cyborg"},
            "rp_uuid": NSTR,
            "driver_name": NSTR,
            "bitstream_id": NSTR,
            "created_at": TIME,
            "updated_at": TIME,
            "links": LINKS,
        }
    ),
    "Program": obj(
        {
            "uuid": STR,
            "deployable_uuid": NSTR,
            "device_uuid": NSTR,
            "hostname": NSTR,
            "image_uuid": STR,
            "image_source": STR,
            "function_id": NSTR,
            "state": STR,
            "reason": NSTR,
            "previous_image_uuid": NSTR,
            "restored": NBOOL,
            "arq_uuid": NSTR,
            "created_at": TIME,
            "updated_at": TIME,
            "finished_at": TIME,
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_deployables: Operation(
        "List deployables",
        query=paged(SORT_KEYS),
        returns=list_of("deployables", "Deployable"),
    ),
    get_deployable: Operation("Show a deployable", errors=(404,), returns=ref("Deployable")),
    program_deployable: _PROGRAM,
    program_deployable_again: dataclasses.replace(
        _PROGRAM, summary="The same, where openstacksdk sends it (both UUIDs the deployable's)"
    ),
    get_program: Operation("A deployable's latest program", errors=(404,), returns=ref("Program")),
}
