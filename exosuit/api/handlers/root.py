"""Version documents (``/``, ``/v2``) and the health check."""

from __future__ import annotations

from exosuit.api import microversion, wsgi
from exosuit.api.describe import LINKS, STR, Handler, Operation, Schema, obj, ref
from exosuit.db import api as db_api
from exosuit.schemas import JSONObject

_DESCRIPTION = (
    "Exosuit manages hardware accelerators (GPUs, FPGAs, SmartNICs, QAT, NVMe, any "
    "PCI function). It speaks the API of OpenStack Cyborg."
)


def _version(req: wsgi.Request, ident: str) -> JSONObject:
    return {
        "id": ident,
        "status": "CURRENT",
        "min_version": str(microversion.MIN_VERSION),
        "max_version": str(microversion.MAX_VERSION),
        "links": [{"href": f"{req.base_url}/v2/", "rel": "self"}],
    }


def root(req: wsgi.Request) -> wsgi.Response:
    """200: the API's versions (no authentication)."""
    version = _version(req, "v2")
    return wsgi.json_response(
        200,
        {
            "name": "OpenStack Cyborg API",
            "description": _DESCRIPTION,
            "versions": [version],
            "default_version": version,
        },
    )


def v2(req: wsgi.Request) -> wsgi.Response:
    """200: the v2 version document (no authentication)."""
    return wsgi.json_response(200, _version(req, "v2.0"))


def healthz(req: wsgi.Request) -> wsgi.Response:
    """200 when the database answers, 503 otherwise."""
    req.app.db.read(db_api.ping)
    return wsgi.json_response(200, {"status": "ok"})


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

_VERSION_DOC = obj(
    {"id": STR, "status": STR, "min_version": STR, "max_version": STR, "links": LINKS}
)


SHAPES: dict[str, Schema] = {
    "Versions": obj(
        {
            "name": STR,
            "description": STR,
            "versions": {"type": "array", "items": _VERSION_DOC},
            "default_version": _VERSION_DOC,
        }
    ),
    "Version": _VERSION_DOC,
    "Health": obj({"status": {"const": "ok"}}),
}


OPERATIONS: dict[Handler, Operation] = {
    root: Operation("The API's versions", returns=ref("Versions")),
    v2: Operation("The v2 version document", returns=ref("Version")),
    healthz: Operation("Health: the database answers", returns=ref("Health")),
}
