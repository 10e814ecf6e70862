"""/v2/device_profiles: named request groups that ARQs are created from."""

from __future__ import annotations

import copy
import re

from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    CSV,
    LINKS,
    NSTR,
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
from exosuit.api.policies import device_profiles as policies
from exosuit.api.schemas import device_profiles as schema
from exosuit.db import device_profiles as db
from exosuit.schemas import JSONObject

SORT_KEYS = set(db.SORT_COLUMNS)


def _serialize(req: wsgi.Request, profile: db.DeviceProfileRow) -> JSONObject:
    return {
        "uuid": profile["uuid"],
        "name": profile["name"],
        "description": profile["description"],
        "groups": profile["groups"],
        "created_at": wsgi.format_time(profile["created_at"]),
        "updated_at": wsgi.format_time(profile["updated_at"]),
        "links": [req.link("device_profiles", profile["uuid"])],
    }


def list_profiles(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"device_profiles": [...]}``; ``?name=a,b`` filters by names."""
    req.app.authorize(req, policies.GET_ALL)
    page = pagination.page_from_request(req, SORT_KEYS)
    rows = req.app.db.read(db.list_profiles, names=wsgi.query_list(req, "name"), page=page)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body)
    body["device_profiles"] = [_serialize(req, row) for row in rows]
    return wsgi.json_response(200, body)


def get_profile(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"device_profile": {...}}`` (wrapped, as Cyborg); by name from 2.2 on."""
    req.app.authorize(req, policies.GET_ONE)
    ident = req.arg("ident")
    by_name = not wsgi.is_uuid_like(ident)
    ident = ident if by_name else ident.lower()
    if by_name and not req.version.matches((2, 2)):
        raise wsgi.ApiError(
            406,
            f"Looking up a device profile by name needs microversion 2.2 or later; "
            f"{req.version} was requested.",
            "exosuit.microversion",
        )
    profile = req.app.db.read(db.get, ident, by_name=by_name)
    return wsgi.json_response(200, {"device_profile": _serialize(req, profile)})


def create_profile(req: wsgi.Request) -> wsgi.Response:
    """201 with the new profile (unwrapped). The body is a list of one profile."""
    req.app.authorize(req, policies.CREATE)
    (data,) = wsgi.extract_json(req, schema.POST_DEVICE_PROFILE_V2_0)
    groups = schema.normalize_groups(data["groups"], req.app.conf)
    profile = req.app.db.write(
        db.create,
        name=data["name"],
        groups=groups,
        description=data.get("description"),
        uuid=data.get("uuid", "").lower() or None,
    )
    return wsgi.json_response(201, _serialize(req, profile))


def _delete(req: wsgi.Request, value: str) -> wsgi.Response:
    req.app.authorize(req, policies.DELETE)
    if wsgi.is_uuid_like(value):
        req.app.db.write(db.delete_by_uuid, value.lower())
    else:
        names = [n.strip() for n in value.split(",") if n.strip()]
        if not names:
            raise wsgi.ApiError(
                400, "No device profile named to delete.", "exosuit.device_profile.none"
            )
        req.app.db.write(db.delete_by_names, names)
    return wsgi.json_response(204)


def delete_profile(req: wsgi.Request) -> wsgi.Response:
    """204. ``{ident}`` is a UUID or a comma-separated list of names (all or none)."""
    return _delete(req, req.arg("ident"))


def delete_profiles(req: wsgi.Request) -> wsgi.Response:
    """204. ``?value=`` is a UUID or a comma-separated list of names (all or none)."""
    return _delete(req, req.GET.get("value", ""))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----


def _profile_body() -> Schema:
    """The profile body, its group keys as the handler checks them after the schema
    (exosuit.api.schemas.device_profiles.normalize_groups): prefixed by what they ask for."""
    body: Schema = copy.deepcopy(schema.POST_DEVICE_PROFILE_V2_0)
    group = body["items"]["properties"]["groups"]["items"]
    prefixes = "|".join(re.escape(p) for p in schema._PREFIXES)
    group["propertyNames"] = {**group["propertyNames"], "pattern": f"^({prefixes})"}
    group["description"] = (
        "resources:<RC> (a standard or CUSTOM_ resource class): a positive integer; "
        "trait:<TRAIT> (standard or CUSTOM_): required or forbidden; accel:<key>: free"
    )
    return body


SHAPES: dict[str, Schema] = {
    "DeviceProfile": obj(
        {
            "uuid": STR,
            "name": STR,
            "description": NSTR,
            "groups": {"type": "array", "items": {"type": "object"}},
            "created_at": TIME,
            "updated_at": TIME,
            "links": LINKS,
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_profiles: Operation(
        "List device profiles",
        query=(
            query("name", STR, f"Only these names ({CSV})."),
            *paged(SORT_KEYS),
        ),
        returns=list_of("device_profiles", "DeviceProfile"),
    ),
    create_profile: Operation(
        "Create a device profile",
        ok=(201,),
        errors=(409,),
        body=_profile_body(),
        returns=ref("DeviceProfile"),
    ),
    delete_profiles: Operation(
        "Delete device profiles",
        ok=(204,),
        errors=(404, 409),
        query=(query("value", STR, f"A UUID, or names ({CSV}).", required=True),),
    ),
    get_profile: Operation(
        "Show a device profile (by name from 2.2)",
        errors=(404,),
        returns=obj({"device_profile": ref("DeviceProfile")}),
    ),
    delete_profile: Operation(
        "Delete a device profile (or names, comma-separated)", ok=(204,), errors=(404, 409)
    ),
}
