"""/v2/services (microversion 2.7): the services devices offer, across the fleet
(doc/devices.md, Services)."""

from __future__ import annotations

import re

from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    BOOL,
    INT,
    NSTR,
    STR,
    TEXT,
    Handler,
    Operation,
    Schema,
    list_of,
    obj,
    paged,
    query,
)
from exosuit.api.policies import services as policies
from exosuit.db import services as db
from exosuit.schemas import JSONObject

_BOOLEANS = {"true": True, "false": False}
PAGING = pagination.Paging(
    sort_keys=frozenset(db.SORT_COLUMNS),
    default_key="id",
    default_dir="asc",
    marker_field="id",
    marker_pattern=re.compile(r"[0-9]{1,9}"),  # within the integer column
    marker_kind="a service id",
)


def _serialize(service: db.ServiceRow) -> JSONObject:
    return {
        "id": service["id"],
        "device_uuid": service["device_uuid"],
        "hostname": service["hostname"],
        "device_type": service["device_type"],
        "driver_name": service["driver_name"],
        "activation": service["activation"],
        "kind": service["kind"],
        "name": service["name"],
        "enabled": service["enabled"],
        "details": service["details"],
    }


def filters(req: wsgi.Request) -> dict[str, str | bool]:
    """The exact-match filters: hostname, type (the device's), kind, name, enabled (true
    or false: 400 otherwise)."""
    found: dict[str, str | bool] = {}
    for name in ("hostname", "type", "kind", "name"):
        value = pagination.text_param(req, name)
        if value is not None:
            found[name] = value
    enabled = req.GET.get("enabled")
    if enabled is not None:
        if enabled not in _BOOLEANS:
            raise wsgi.ApiError(
                400, f"enabled must be true or false, not {enabled!r}.", "exosuit.query.enabled"
            )
        found["enabled"] = _BOOLEANS[enabled]
    return found


def list_services(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"services": [...]}``, by id; filters hostname, type, kind, name, enabled;
    ``next`` while more remain."""
    req.app.authorize(req, policies.GET_ALL)
    page = pagination.page_from_request(req, PAGING)
    rows = req.app.db.read(db.list_services, filters=filters(req), page=page)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body, PAGING)
    body["services"] = [_serialize(s) for s in rows]
    return wsgi.json_response(200, body)


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Service": obj(
        {
            "id": INT,
            "device_uuid": STR,
            "hostname": STR,
            "device_type": STR,
            "driver_name": NSTR,
            "activation": STR,
            "kind": STR,
            "name": STR,
            "enabled": BOOL,
            "details": {"type": "object", "additionalProperties": STR},
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_services: Operation(
        "List the services devices offer",
        query=(
            query("hostname", TEXT, "Only this host's."),
            query("type", TEXT, "Only devices of this type."),
            query("kind", TEXT, "Only this kind (qat, vgpu, mig …)."),
            query("name", TEXT, "Only this name."),
            query("enabled", {"enum": ["true", "false"]}, "Offered now, or not."),
            *paged(PAGING),
        ),
        returns=list_of("services", "Service"),
    ),
}
