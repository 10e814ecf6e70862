"""/v2/discoveries (microversion 2.7): discover now (doc/devices.md, "Discover now")."""

from __future__ import annotations

from exosuit import exceptions
from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    BOOL,
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
    ref,
)
from exosuit.api.policies import discoveries as policies
from exosuit.api.schemas import discoveries as schema
from exosuit.db import discoveries as db
from exosuit.schemas import JSONObject

PAGING = pagination.Paging(sort_keys=frozenset(db.SORT_COLUMNS), default_key="requested_at")


def _serialize(req: wsgi.Request, discovery: db.DiscoveryRow) -> JSONObject:
    body: JSONObject = {
        "uuid": discovery["uuid"],
        "requested_at": wsgi.format_time(discovery["requested_at"]),
        "spread": discovery["spread"],
        "all_hosts": discovery["all_hosts"],
        "host_count": discovery["host_count"],
        "received": discovery["received"],
        "complete": discovery["received"] == discovery["host_count"],
        "last_received_at": wsgi.format_time(discovery["last_received_at"]),
        "links": [req.link("discoveries", discovery["uuid"])],
    }
    if "hosts" in discovery:
        body["hosts"] = [
            {
                "hostname": h["hostname"],
                "generation": h["generation"],
                "received_at": wsgi.format_time(h["received_at"]),
            }
            for h in discovery["hosts"]
        ]
    return body


def create_discovery(req: wsgi.Request) -> wsgi.Response:
    """202 with the discovery: ``hostnames`` (absent: every host) discover at once, each
    after a random delay within ``spread`` seconds (``[api] discovery_rate`` hosts per
    second); each host's ``received_at`` is set when its new inventory arrives. 404 for
    a host never seen."""
    req.app.authorize(req, policies.CREATE)
    body = wsgi.extract_json(req, schema.POST_DISCOVERY_V2_7)
    rate = req.app.conf.api.discovery_rate
    discovery = req.app.db.write(db.create, body.get("hostnames"), rate=rate)
    headers = [("Location", req.link("discoveries", discovery["uuid"])["href"])]
    return wsgi.json_response(202, _serialize(req, discovery), headers=headers)


def get_discovery(req: wsgi.Request) -> wsgi.Response:
    """200 with the discovery and its hosts; 404 ``exosuit.discovery.not_found``."""
    req.app.authorize(req, policies.GET_ONE)
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):
        raise exceptions.DiscoveryNotFound(uuid=uuid)
    return wsgi.json_response(200, _serialize(req, req.app.db.read(db.get, uuid)))


def list_discoveries(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"discoveries": [...]}``, newest first, with their counts (not their hosts)."""
    req.app.authorize(req, policies.GET_ALL)
    page = pagination.page_from_request(req, PAGING)
    rows = req.app.db.read(db.list_discoveries, page=page)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body, PAGING)
    body["discoveries"] = [_serialize(req, d) for d in rows]
    return wsgi.json_response(200, body)


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Discovery": obj(
        {
            "uuid": STR,
            "requested_at": TIME,
            "spread": {"type": "number"},
            "all_hosts": BOOL,
            "host_count": INT,
            "received": INT,
            "complete": BOOL,
            "last_received_at": TIME,
            "links": LINKS,
        },
        {
            "hosts": {
                "type": "array",
                "items": obj({"hostname": STR, "generation": INT, "received_at": TIME}),
            }
        },
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    create_discovery: Operation(
        "Ask hosts to discover now",
        ok=(202,),
        errors=(404,),
        body=schema.POST_DISCOVERY_V2_7,
        returns=ref("Discovery"),
    ),
    list_discoveries: Operation(
        "List discoveries",
        query=paged(PAGING),
        returns=list_of("discoveries", "Discovery"),
    ),
    get_discovery: Operation(
        "Show a discovery and its hosts", errors=(404,), returns=ref("Discovery")
    ),
}
