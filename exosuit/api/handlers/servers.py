"""/v2/servers/{server}/attach and /detach (microversion 2.10): a device profile's
devices for a server, as a claim whose consumer is the server's id; refused for a
server Nova manages, whose accelerators only a new server changes
(exosuit/api/server_attach.py; doc/standalone.md "Servers", doc/nova.md)."""

from __future__ import annotations

from exosuit.api import server_attach, wsgi
from exosuit.api.describe import Handler, Operation, Schema, list_of, ref
from exosuit.api.handlers import claims
from exosuit.api.policies import servers as policies
from exosuit.api.schemas import servers as schema
from exosuit.db import claims as db

__all__ = ["attach_server", "detach_server"]


def _server(req: wsgi.Request) -> str:
    """The server's id as a claim's consumer (at most 255 characters, as every path
    argument): a UUID in lower case, as Nova's."""
    server = req.arg("server")
    return server.lower() if wsgi.is_uuid_like(server) else server


def _scope(req: wsgi.Request) -> db.Scope:
    """Admins detach any project's claims; everyone else only their project's."""
    return db.Scope(None if req.context.is_admin_role else req.context.project_id)


def attach_server(req: wsgi.Request) -> wsgi.Response:
    """201 with the claim of consumer ``server``, bound (202 while a program its profile
    asks runs); 200 with it when the server holds that profile's claim already
    (idempotent). 409 ``exosuit.server.nova_managed`` (Nova's server),
    ``exosuit.server.attached`` (another profile's claim), ``exosuit.claim.unsatisfiable``
    (nothing held); 404 for an unknown profile or host; 503 when Nova or Placement does
    not answer (nothing held)."""
    req.app.authorize(req, policies.ATTACH)
    body = wsgi.extract_json(req, schema.POST_ATTACH_V2_10)
    made = server_attach.attach(
        req, _server(req), body["device_profile_name"], body.get("hostname")
    )
    claim = made.claim
    status = 202 if claim["state"] == db.PENDING else 201 if made.created else 200
    headers = [("Location", req.link("claims", claim["uuid"])["href"])]
    return wsgi.json_response(status, claims.serialize(req, claim), headers=headers)


def detach_server(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"claims": [...]}``: the server's live claims (of ``device_profile_name``
    only, when given), released, their devices freed. 404 ``exosuit.server.not_attached``
    when it holds none (such); 409 ``exosuit.server.nova_managed`` for Nova's server."""
    req.app.authorize(req, policies.DETACH)
    body = wsgi.extract_json(req, schema.POST_DETACH_V2_10)
    profile = body.get("device_profile_name")
    released = server_attach.detach(req, _server(req), profile, _scope(req))
    return wsgi.json_response(200, {"claims": [claims.serialize(req, c) for c in released]})


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {}

OPERATIONS: dict[Handler, Operation] = {
    attach_server: Operation(
        "Attach a device profile's devices to a server: a claim it is the consumer of "
        "(refused for Nova's servers) (2.10)",
        ok=(200, 201, 202),
        errors=(404, 409, 502, 503),
        body=schema.POST_ATTACH_V2_10,
        returns=ref("Claim"),
    ),
    detach_server: Operation(
        "Detach a server's devices: its claims released (2.10)",
        errors=(404, 409, 502, 503),
        body=schema.POST_DETACH_V2_10,
        returns=list_of("claims", "Claim"),
    ),
}
