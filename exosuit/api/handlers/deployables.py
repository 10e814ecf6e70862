"""/v2/deployables: list, show, program."""

from __future__ import annotations

import json

from exosuit.api import pagination, wsgi
from exosuit.api.policies import deployables as policies
from exosuit.api.schemas import deployables as schema
from exosuit.db import deployables as db

SORT_KEYS = set(db.SORT_COLUMNS)


def _serialize(req: wsgi.Request, deployable: dict) -> dict:
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
        "links": [req.link("deployables", deployable["uuid"]),
                  req.link("deployables", deployable["uuid"], rel="bookmark")],
    }


def list_deployables(req: wsgi.Request):
    """200 ``{"deployables": [...]}``."""
    req.app.authorize(req, policies.GET_ALL)
    page = pagination.page_from_request(req, SORT_KEYS)
    rows = req.app.db.read(db.list_deployables, page=page)
    body: dict = {}
    rows = pagination.next_link(req, page, rows, body)
    body["deployables"] = [_serialize(req, d) for d in rows]
    return wsgi.json_response(200, body)


def get_deployable(req: wsgi.Request):
    req.app.authorize(req, policies.GET_ONE)
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):
        raise wsgi.ApiError(400, f"Invalid UUID {uuid!r}.", "exosuit.query.uuid")
    return wsgi.json_response(200, _serialize(req, req.app.db.read(db.get, uuid)))


def program_deployable(req: wsgi.Request):
    """Program an FPGA deployable with an image.

    The body is validated and the deployable looked up; no driver can program
    yet, so a valid request is answered 409 with the reason (never a 500).
    """
    req.app.authorize(req, policies.PROGRAM)
    body = wsgi.extract_json(req, schema.PROGRAM_V2_0)
    deployable = req.app.db.read(db.get, req.arg("uuid"))
    image = body[0]["value"][0]["image_uuid"]
    raise wsgi.ApiError(
        409,
        f"Deployable {deployable['uuid']} (driver {deployable['driver_name']}) cannot be "
        f"programmed with image {image}: this Exosuit release has no programming support.",
        "exosuit.deployable.program_unsupported",
    )
