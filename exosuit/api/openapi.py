"""The OpenAPI 3.1 document of the whole API, built from the code so that it cannot drift.

Paths and methods come from the route table (``router.ROUTES``, as ``Router.routes``
holds it): a route wrapped in
``since(...)`` carries ``x-exosuit-since`` and only accepts the microversions from it
on. Request bodies are the JSON Schemas the handlers validate with
(``exosuit/api/schemas/``, the agent's snapshot schema of ``exosuit/schemas/``). What
the route table cannot say (a summary, the statuses a handler answers, its query
parameters, the shape of its success body) each handler module says at its end, in
``OPERATIONS`` (keyed by the handler itself) and ``SHAPES`` (the bodies it answers, by
name), in the words of ``exosuit/api/describe.py``; this module gathers them from the
modules of ``DESCRIBED`` and builds the document. A test fails for a handler without an
entry. Served at ``GET /openapi.json`` by ``document`` below (here, not in handlers/: the
table imports every handler module, and the route table imports this one), outside
``/v2``: it is no microversion of its own.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, Protocol, TypeVar

import webob

import exosuit
from exosuit import schemas as wire_schemas
from exosuit.api import microversion, wsgi
from exosuit.api.describe import (
    NSTR,
    SNAPSHOT,
    STR,
    UUID_FORMAT,
    Handler,
    Operation,
    Schema,
    obj,
    ref,
)
from exosuit.api.handlers import (
    agent,
    agent_activations,
    agent_arqs,
    agent_claims,
    agent_images,
    agent_partitions,
    agent_programs,
    arqs,
    attach_handles,
    attributes,
    audit,
    claims,
    dashboard,
    deployables,
    device_profiles,
    devices,
    discoveries,
    drivers,
    hosts,
    images,
    jobs,
    metrics,
    partitions,
    permissions,
    root,
    servers,
    services,
    summary,
    usage_history,
)

__all__ = [
    "DESCRIBED",
    "OPERATIONS",
    "SHAPES",
    "Operation",
    "build",
    "described",
    "document",
    "document_bytes",
]

_JSON = "application/json"


class _Route(Protocol):
    """What the document reads of a route (exosuit.api.router.Route)."""

    template: str
    methods: dict[str, Callable[..., Any]]
    versioned: bool

    def since_for(self, method: str) -> tuple[int, int] | None: ...


def document(req: wsgi.Request) -> webob.Response:
    """200: the OpenAPI 3.1 document of every route, built from the route table and the
    request schemas. Public, as the version documents are: it holds no data."""
    body = document_bytes(
        tuple(req.app.router.routes), tuple(req.app.conf.api.public_routes), req.base_url
    )
    return webob.Response(
        body=body,
        status=200,
        headerlist=[("Content-Type", _JSON), ("Content-Length", str(len(body)))],
    )


# The handler modules whose SHAPES and OPERATIONS the document holds: every module of
# exosuit/api/handlers/ that the route table names.
DESCRIBED: tuple[ModuleType, ...] = (
    root,
    metrics,
    dashboard,
    device_profiles,
    arqs,
    deployables,
    devices,
    services,
    drivers,
    discoveries,
    claims,
    servers,
    partitions,
    attributes,
    hosts,
    attach_handles,
    jobs,
    audit,
    summary,
    permissions,
    usage_history,
    images,
    agent,
    agent_arqs,
    agent_programs,
    agent_activations,
    agent_partitions,
    agent_claims,
    agent_images,
)

_K = TypeVar("_K")
_V = TypeVar("_V")


def _merged(*parts: Mapping[_K, _V]) -> dict[_K, _V]:
    """The union of ``parts``; a key declared twice is a mistake."""
    merged: dict[_K, _V] = {}
    for part in parts:
        for key, value in part.items():
            if key in merged:
                raise ValueError(f"{key!r} is declared twice in the described handler modules")
            merged[key] = value
    return merged


# The bodies of success answers, by name (components/schemas): the error envelope that
# every operation answers, and those of the handler modules.
SHAPES: dict[str, Schema] = _merged(
    {
        "Error": {
            "description": "Cyborg's error envelope. ``error_message`` is a JSON text holding "
            "``faultstring`` (the message), ``faultcode`` (Client or Server), ``debuginfo`` and "
            "``code``, a stable ``exosuit.*`` code to branch on.",
            **obj({"error_message": STR}),
            "properties": {
                "error_message": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": obj(
                        {
                            "faultstring": STR,
                            "faultcode": {"enum": ["Client", "Server"]},
                            "code": STR,
                        },
                        {"debuginfo": NSTR},
                    ),
                }
            },
        },
    },
    *(module.SHAPES for module in DESCRIBED),
)

OPERATIONS: dict[Handler, Operation] = _merged(
    {document: Operation("This document", returns={"type": "object"})},
    *(module.OPERATIONS for module in DESCRIBED),
)

# -- path parameters ---------------------------------------------------------------------

# A path segment: no slash (a slash would be another path), within its column.
_SEGMENT: Schema = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[^/]+$"}
_PATH_PARAMETERS: dict[str, Schema] = {
    "uuid": UUID_FORMAT,
    "image_uuid": UUID_FORMAT,
    "device_uuid": UUID_FORMAT,
    "claim_uuid": UUID_FORMAT,
    "again": {**UUID_FORMAT, "description": "the deployable's UUID again"},
    "id": {"type": "integer", "description": "a job id"},
    "hostname": _SEGMENT,
    "project_id": _SEGMENT,
    "ident": {**_SEGMENT, "description": "a UUID, or a name (2.2)"},
    "name": _SEGMENT,
}

# -- the document ------------------------------------------------------------------------

_STATUS_TEXT = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    204: "No content",
    206: "Partial content (Range)",
    304: "Not modified",
    400: "Bad request: the body, a parameter, the path's encoding",
    401: "Unauthenticated (Keystone)",
    403: "Forbidden by policy",
    404: "Not found (or not in this microversion)",
    406: "Microversion not acceptable",
    409: "Conflict",
    412: "Precondition failed: send the whole snapshot",
    413: "Body too large",
    416: "Range not satisfiable",
    423: "Locked: not resolved yet",
    429: "Busy: retry after Retry-After",
    502: "An upstream service failed",
    503: "Unavailable: retry after Retry-After",
}


def _versions_from(since: tuple[int, int] | None) -> list[str]:
    """The header values that reach an operation that exists from ``since`` on."""
    names = [v for v in microversion.VERSIONS if since is None or _tuple(v) >= since]
    return [f"{microversion.SERVICE_TYPE} {v}" for v in names] + [
        f"{microversion.SERVICE_TYPE} latest"
    ]


def _tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def _is_public(template: str, public_routes: Iterable[str]) -> bool:
    """As exosuit.api.deploy.PublicRoutes decides it ("/x/*": everything under /x/)."""
    for path in public_routes:
        if path.endswith("/*"):
            if template.startswith(path[:-1]):
                return True
        elif template == (path.rstrip("/") or "/"):
            return True
    return False


def _common_errors(route: _Route, method: str, operation: Operation, public: bool) -> set[int]:
    """What any operation of its kind can answer: 400 for a path or query that is not
    UTF-8 or holds a NUL (or an identity header too long), 401/403 behind
    authentication, 404 under a path argument or a microversion, 406 under /v2, 400/413
    with a body, 503 when the database does not answer."""
    errors = {400, 503}
    if not public:
        errors |= {401, 403}
    if "{" in route.template or route.since_for(method) is not None:
        errors.add(404)
    if route.versioned:
        errors.add(406)
    if operation.body is not None or operation.raw_body:
        errors.add(413)
    return errors


def _responses(route: _Route, method: str, operation: Operation, public: bool) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    for status in sorted(operation.ok):
        response: dict[str, Any] = {"description": _STATUS_TEXT[status]}
        if status in (204, 304) or (operation.returns is None and operation.media == _JSON):
            responses[str(status)] = response  # no body
        else:
            media = {} if operation.returns is None else {"schema": operation.returns}
            responses[str(status)] = {**response, "content": {operation.media: media}}
    errors = _common_errors(route, method, operation, public) | set(operation.errors)
    for status in sorted(errors):
        responses[str(status)] = {
            "description": _STATUS_TEXT[status],
            "content": {"application/json": {"schema": ref("Error")}},
        }
    return responses


def _parameters(route: _Route, method: str, operation: Operation) -> list[Schema]:
    parameters = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": _PATH_PARAMETERS.get(name, _SEGMENT),
        }
        for name in re.findall(r"\{(\w+)\}", route.template)
    ]
    if route.versioned:
        since = route.since_for(method)
        parameters.append(
            {
                "name": microversion.HEADER,
                "in": "header",
                # Below the route's microversion it is not found: the header is required.
                "required": since is not None,
                "description": "The microversion ('accelerator X.Y' or 'accelerator latest'); "
                f"absent: {microversion.MIN_VERSION}.",
                "schema": {"enum": _versions_from(since)},
            }
        )
    return parameters + list(operation.query)


def _operation(route: _Route, method: str, handler: Handler, public: bool) -> dict[str, Any]:
    operation = described(handler)
    item: dict[str, Any] = {
        "operationId": f"{handler.__module__.rsplit('.', 1)[-1]}.{handler.__name__}",
        "summary": operation.summary,
        "tags": [_tag(route.template)],
        "parameters": _parameters(route, method, operation),
        "responses": _responses(route, method, operation, public),
    }
    if handler.__doc__:
        item["description"] = _dedent(handler.__doc__)
    since = route.since_for(method)
    if since is not None:
        item["x-exosuit-since"] = "{}.{}".format(*since)
        item["description"] = f"From microversion {item['x-exosuit-since']} on. " + item.get(
            "description", ""
        )
    if operation.body is not None:
        item["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": operation.body}},
        }
    elif operation.raw_body:
        item["requestBody"] = {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    if public:
        item["security"] = []
    return item


def described(handler: Handler) -> Operation:
    """The handler's entry; for one without (a test fails for it), what its docstring says:
    the document is still served, less precise."""
    found = OPERATIONS.get(handler)
    if found is None:
        summary = (handler.__doc__ or handler.__name__).strip().splitlines()[0]
        found = Operation(summary, ok=(200, 201, 202, 204), errors=(404, 409))
    return found


def _tag(template: str) -> str:
    parts = template.strip("/").split("/")
    if parts[0] == "v2" and len(parts) > 1:
        return parts[1]
    if parts[0] == "agent":
        return "agent"
    return "service"


def _dedent(text: str) -> str:
    lines = text.strip().splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()), default=0)
    return "\n".join([lines[0], *(line[indent:] for line in lines[1:])])


def _embedded(schema: Schema, name: str) -> Schema:
    """A copy of ``schema`` as a component named ``name``: its references to itself point
    into the component, and its ``$schema``/``$id`` go (the document's dialect is JSON
    Schema 2020-12)."""
    own = ("", schema.get("$id", ""))
    # NOTE: a reference may be absolute: fastjsonschema rewrites those of a schema it
    # compiles in place (exosuit.api.wsgi.validate compiles the cached snapshot schema).

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and "#" in ref and ref.split("#", 1)[0] in own:
                node = {**node, "$ref": f"#/components/schemas/{name}{ref.split('#', 1)[1]}"}
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    embedded: Schema = walk({k: v for k, v in schema.items() if k not in ("$schema", "$id")})
    return embedded


def build(
    routes: Iterable[_Route], public_routes: Iterable[str] = (), base_url: str | None = None
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (``Router().routes``: the route table);
    ``public_routes``: the paths answered without authentication (``[api]
    public_routes``); ``base_url``: the server's URL."""
    public_routes = tuple(public_routes)
    paths: dict[str, Any] = {}
    for route in routes:
        public = _is_public(route.template, public_routes)
        paths[route.template] = {
            method.lower(): _operation(route, method, handler, public)
            for method, handler in route.methods.items()
        }
    schemas = copy.deepcopy(SHAPES)
    schemas[SNAPSHOT] = _embedded(wire_schemas.inventory_schema(), SNAPSHOT)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Exosuit API",
            "version": exosuit.__version__,
            "description": (
                "OpenStack Cyborg's v2 API (microversions "
                f"{microversion.VERSIONS[0]}–{microversion.VERSIONS[-1]}; paths also answer "
                "without their /v2 prefix, as Cyborg's do), Exosuit's agent API "
                "(/agent/v1) and the service routes. Generated from the route table and "
                "the request schemas (exosuit/api/openapi.py)."
            ),
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "keystone": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Auth-Token",
                    "description": "A Keystone token ([api] auth_strategy = keystone); "
                    "none under noauth.",
                }
            },
        },
        "security": [{"keystone": []}],
    }
    if base_url is not None:
        doc["servers"] = [{"url": base_url}]
    return doc


@functools.lru_cache(maxsize=16)
def document_bytes(
    routes: tuple[_Route, ...], public_routes: tuple[str, ...], base_url: str | None
) -> bytes:
    """The document as JSON, built once per (routes, public routes, base URL)."""
    return json.dumps(build(routes, public_routes, base_url), separators=(",", ":")).encode()
