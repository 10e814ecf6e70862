"""/v2/attributes: list, show, create, delete."""

from __future__ import annotations

from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    INT,
    LINKS,
    STR,
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
from exosuit.api.policies import attributes as policies
from exosuit.api.schemas import attributes as schema
from exosuit.db import attributes as db
from exosuit.schemas import JSONObject

SORT_KEYS = set(db.SORT_COLUMNS)


def _serialize(req: wsgi.Request, attribute: db.AttributeRow) -> JSONObject:
    return {
        "uuid": attribute["uuid"],
        "deployable_id": attribute["deployable_id"],
        "key": attribute["key"],
        "value": attribute["value"],
        "created_at": wsgi.format_time(attribute["created_at"]),
        "updated_at": wsgi.format_time(attribute["updated_at"]),
        "links": [req.link("attributes", attribute["uuid"])],
    }


def list_attributes(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"attributes": [...]}``; filters ``deployable_id`` and ``key``."""
    req.app.authorize(req, policies.GET_ALL)
    asked = req.GET.get("deployable_id")
    deployable_id = None
    if asked is not None:
        deployable_id = schema.deployable_id(asked, "exosuit.query.deployable_id")
    page = pagination.page_from_request(req, SORT_KEYS)
    rows = req.app.db.read(
        db.list_attributes, deployable_id=deployable_id, key=req.GET.get("key"), page=page
    )
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body)
    body["attributes"] = [_serialize(req, a) for a in rows]
    return wsgi.json_response(200, body)


def get_attribute(req: wsgi.Request) -> wsgi.Response:
    req.app.authorize(req, policies.GET_ONE)
    return wsgi.json_response(200, _serialize(req, req.app.db.read(db.get, req.arg("uuid"))))


def create_attribute(req: wsgi.Request) -> wsgi.Response:
    """201 with the attribute. Kept across agent reports (unlike Cyborg)."""
    req.app.authorize(req, policies.CREATE)
    data = wsgi.extract_json(req)
    # openstacksdk (and python-cyborgclient through it) wraps the body in "attribute".
    if isinstance(data, dict) and list(data) == ["attribute"]:
        data = data["attribute"]
    wsgi.validate(data, schema.POST_ATTRIBUTE_V2_0)
    attribute = req.app.db.write(
        db.create,
        deployable_id=schema.deployable_id(data["deployable_id"]),
        key=data["key"],
        value=data["value"],
    )
    return wsgi.json_response(201, _serialize(req, attribute))


def delete_attribute(req: wsgi.Request) -> wsgi.Response:
    req.app.authorize(req, policies.DELETE)
    req.app.db.write(db.delete, req.arg("uuid"))
    return wsgi.json_response(204)


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

_ATTRIBUTE_BODY: Schema = {
    "anyOf": [
        schema.POST_ATTRIBUTE_V2_0,
        {
            "description": "openstacksdk's form: the attribute wrapped in ``attribute``",
            "type": "object",
            "properties": {"attribute": schema.POST_ATTRIBUTE_V2_0},
            "required": ["attribute"],
            "additionalProperties": False,
        },
    ]
}


SHAPES: dict[str, Schema] = {
    "Attribute": obj(
        {
            "uuid": STR,
            "deployable_id": INT,
            "key": STR,
            "value": STR,
            "created_at": TIME,
            "updated_at": TIME,
            "links": LINKS,
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_attributes: Operation(
        "List attributes",
        query=(
            query("deployable_id", INT, "Only this deployable's."),
            query("key", STR, "Only this key."),
            *paged(SORT_KEYS),
        ),
        returns=list_of("attributes", "Attribute"),
    ),
    create_attribute: Operation(
        "Create an attribute",
        ok=(201,),
        errors=(404, 409),
        body=_ATTRIBUTE_BODY,
        returns=ref("Attribute"),
    ),
    get_attribute: Operation("Show an attribute", errors=(404,), returns=ref("Attribute")),
    delete_attribute: Operation("Delete an attribute", ok=(204,), errors=(404,)),
}
