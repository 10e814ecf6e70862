"""The OpenAPI 3.1 document of the whole API, built from the code so that it cannot drift.

Paths and methods come from the route table (``router.ROUTES``, as ``Router.routes``
holds it): a route wrapped in
``since(...)`` carries ``x-exosuit-since`` and only accepts the microversions from it
on. Request bodies are the JSON Schemas the handlers validate with
(``exosuit/api/schemas/``, the agent's snapshot schema of ``exosuit/schemas/``). What
the route table cannot say (a summary, the statuses a handler answers, its query
parameters, the shape of its success body) is in ``OPERATIONS``, keyed by the handler
itself; a test fails for a handler without an entry. Served at ``GET /openapi.json`` by
``document`` below (here, not in handlers/: the table imports every handler module, and
the route table imports this one), outside ``/v2``: it is no microversion of its own.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import webob

import exosuit
from exosuit import schemas as wire_schemas
from exosuit.api import microversion, pagination, wsgi
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
    root,
    services,
    summary,
)
from exosuit.api.schemas import agent_activations as agent_activations_schema
from exosuit.api.schemas import agent_arqs as agent_arqs_schema
from exosuit.api.schemas import agent_programs as agent_programs_schema
from exosuit.api.schemas import arqs as arqs_schema
from exosuit.api.schemas import attributes as attributes_schema
from exosuit.api.schemas import claims as claims_schema
from exosuit.api.schemas import deployables as deployables_schema
from exosuit.api.schemas import device_profiles as device_profiles_schema
from exosuit.api.schemas import devices as devices_schema
from exosuit.api.schemas import discoveries as discoveries_schema
from exosuit.api.schemas import drivers as drivers_schema
from exosuit.api.schemas import images as images_schema
from exosuit.api.schemas import partitions as partitions_schema
from exosuit.db import arqs as arqs_db
from exosuit.db import audit as audit_db
from exosuit.db import claims as claims_db
from exosuit.db import desired_state as desired_db
from exosuit.db import devices as devices_db
from exosuit.db import images as images_db
from exosuit.db import jobs as jobs_db

__all__ = ["OPERATIONS", "SHAPES", "Operation", "build", "document", "document_bytes"]

Schema = dict[str, Any]

# -- shapes of what the API answers ------------------------------------------------------

_STR: Schema = {"type": "string"}
_NSTR: Schema = {"type": ["string", "null"]}
_INT: Schema = {"type": "integer"}
_NINT: Schema = {"type": ["integer", "null"]}
_BOOL: Schema = {"type": "boolean"}
_NBOOL: Schema = {"type": ["boolean", "null"]}
_COUNTS: Schema = {"type": "object", "additionalProperties": {"type": "integer"}}
_TIME: Schema = {"type": ["string", "null"], "description": "ISO 8601, UTC"}
_LINKS: Schema = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"href": _STR, "rel": _STR},
        "required": ["href", "rel"],
    },
}


def _obj(fields: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An object with every field of ``fields`` (and maybe those of ``optional``)."""
    return {
        "type": "object",
        "properties": {**fields, **(optional or {})},
        "required": list(fields),
    }


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _list_of(key: str, item: str) -> Schema:
    """``{key: [item…]}`` and, while more remain (2.4), ``next``."""
    return _obj({key: {"type": "array", "items": _ref(item)}}, {"next": _STR})


_VERSION_DOC = _obj(
    {"id": _STR, "status": _STR, "min_version": _STR, "max_version": _STR, "links": _LINKS}
)

# The bodies of success answers, by name (components/schemas).
SHAPES: dict[str, Schema] = {
    "Error": {
        "description": "Cyborg's error envelope. ``error_message`` is a JSON text holding "
        "``faultstring`` (the message), ``faultcode`` (Client or Server), ``debuginfo`` and "
        "``code``, a stable ``exosuit.*`` code to branch on.",
        **_obj({"error_message": _STR}),
        "properties": {
            "error_message": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": _obj(
                    {
                        "faultstring": _STR,
                        "faultcode": {"enum": ["Client", "Server"]},
                        "code": _STR,
                    },
                    {"debuginfo": _NSTR},
                ),
            }
        },
    },
    "Versions": _obj(
        {
            "name": _STR,
            "description": _STR,
            "versions": {"type": "array", "items": _VERSION_DOC},
            "default_version": _VERSION_DOC,
        }
    ),
    "Version": _VERSION_DOC,
    "Health": _obj({"status": {"const": "ok"}}),
    "DeviceProfile": _obj(
        {
            "uuid": _STR,
            "name": _STR,
            "description": _NSTR,
            "groups": {"type": "array", "items": {"type": "object"}},
            "created_at": _TIME,
            "updated_at": _TIME,
            "links": _LINKS,
        }
    ),
    "AcceleratorRequest": _obj(
        {
            "uuid": _STR,
            "state": {"enum": list(arqs_db.STATES)},
            "device_profile_name": _NSTR,
            "device_profile_group_id": _NINT,
            "hostname": _NSTR,
            "device_rp_uuid": _NSTR,
            "instance_uuid": _NSTR,
            "project_id": _NSTR,
            "attach_handle_type": _NSTR,
            "attach_handle_uuid": _NSTR,
            "attach_handle_info": {"type": ["object", "null"]},
            "created_at": _TIME,
            "updated_at": _TIME,
            "links": _LINKS,
        },
        {"claim_uuid": {"description": "from 2.8: the claim that holds it", **_NSTR}},
    ),
    "Claim": _obj(
        {
            "uuid": _STR,
            "project_id": _NSTR,
            "user_id": _NSTR,
            "consumer": _NSTR,
            "hostname": _NSTR,
            "device_profile_name": {"description": "null: it named its attach handles", **_NSTR},
            "state": {"enum": list(claims_db.STATES)},
            "reason": _NSTR,
            "container": _BOOL,
            "expires_at": {**_TIME, "description": "ISO 8601, UTC; null: never"},
            "created_at": _TIME,
            "released_at": _TIME,
            "devices": {
                "type": "array",
                "items": _obj(
                    {
                        "arq_uuid": _STR,
                        "device_uuid": _NSTR,
                        "deployable_uuid": _NSTR,
                        "rp_uuid": _NSTR,
                        "attach_handle_uuid": _NSTR,
                        "attach_handle_type": _NSTR,
                        "attach_handle_info": {"type": ["object", "null"]},
                        "cdi_device": {
                            "description": "exosuit.dev/<class>=<claim uuid>-<n> (container)",
                            **_NSTR,
                        },
                    }
                ),
            },
            "cdi": _obj({"state": {"enum": [*claims_db.CDI_STATES, None]}, "reason": _NSTR}),
            "links": _LINKS,
        }
    ),
    "ClaimCDI": _obj(
        {
            "claim": _STR,
            "cdi": _obj({"state": {"enum": ["written", "failed"]}, "reason": _NSTR}),
        }
    ),
    "Deployable": _obj(
        {
            "uuid": _STR,
            "parent_id": _NINT,
            "root_id": _NINT,
            "name": _STR,
            "num_accelerators": _INT,
            "device_id": _NINT,
            "attributes_list": {"type": "string", "description": "a JSON list, as Cyborg"},
            "rp_uuid": _NSTR,
            "driver_name": _NSTR,
            "bitstream_id": _NSTR,
            "created_at": _TIME,
            "updated_at": _TIME,
            "links": _LINKS,
        }
    ),
    "Device": _obj(
        {
            "uuid": _STR,
            "type": _STR,
            "vendor": _STR,
            "model": _STR,
            "std_board_info": _NSTR,
            "vendor_board_info": _NSTR,
            "hostname": _STR,
            "created_at": _TIME,
            "updated_at": _TIME,
            "links": _LINKS,
        },
        {
            "status": {"description": "from 2.3", **_STR},
            "presence": {"description": "from 2.4", **_STR},
            "presence_reason": _NSTR,
            "driver_name": _NSTR,
            "pci_address": _NSTR,
            "numa_node": _NINT,
            "firmware_version": _NSTR,
            "status_reason": {"description": "from 2.6", **_NSTR},
            "activation": {"description": "from 2.7", "enum": list(desired_db.STATES)},
            "activation_reason": _NSTR,
            "services": {"type": "array", "items": _ref("DeviceService")},
            "usage": {
                "type": ["object", "null"],
                "additionalProperties": {"type": "number"},
                "description": "figure → value, as the host's last kept report had it",
            },
            "usage_seen_at": _TIME,
            "maintenance": {"description": "from 2.9", "enum": ["draining", "drained", None]},
            "holders": {"type": "array", "items": _ref("Holder")},
            "health": {**_ref("DeviceHealthState"), "description": "from 2.9"},
        },
    ),
    "DeviceHealthState": _obj(
        {
            "state": {"enum": ["ok", "warning", "unhealthy"]},
            "reason": _NSTR,
            "since": _TIME,
            "offered": {**_BOOL, "description": "False while held back from every offer"},
            "held_by": {"enum": ["agent", "operator", None]},
            "offered_at": {
                **_TIME,
                "description": "held back by its agent and healthy again: when it is offered "
                "again at the earliest",
            },
        }
    ),
    "DeviceHealth": _obj(
        {
            "uuid": _STR,
            "hostname": _STR,
            "state": {"enum": ["ok", "warning", "unhealthy"]},
            "reason": _NSTR,
            "since": _TIME,
            "offered": _BOOL,
            "held_by": {"enum": ["agent", "operator", None]},
            "offered_at": _TIME,
            "holders": {"type": "array", "items": _ref("Holder")},
        }
    ),
    "Holder": _obj(
        {
            "attach_handle_uuid": _STR,
            "arq_uuid": _NSTR,
            "arq_state": _NSTR,
            "instance_uuid": _NSTR,
            "project_id": _NSTR,
            "claim_uuid": _NSTR,
        },
        {"device_uuid": {"description": "a host's holders: the device held", **_STR}},
    ),
    "Partitions": _obj(
        {
            "device_uuid": _STR,
            "hostname": _STR,
            "layout": {
                "type": ["object", "null"],
                "description": "the layout set (null: never set; the device is left as it is)",
            },
            "state": {"enum": ["applying", "applied", "failed", None]},
            "reason": _NSTR,
            "generation": {"type": ["integer", "null"]},
            "slices": {"type": "array", "items": _ref("Slice")},
        }
    ),
    "Slice": _obj(
        {
            "attach_handle_uuid": _STR,
            "attach_type": _STR,
            "type": {"description": "mdev type, MIG profile, vf, or whole", **_STR},
            "in_use": {"type": "boolean"},
        }
    ),
    "PartitionOutcome": _obj({"state": {"enum": ["applying", "applied", "failed"]}}),
    "DeviceDrain": _obj(
        {
            "uuid": _STR,
            "hostname": _STR,
            "status": {"enum": ["enabled", "maintaining"]},
            "maintenance": {"enum": ["draining", "drained", None]},
            "holders": {"type": "array", "items": _ref("Holder")},
        }
    ),
    "HostDrain": _obj(
        {
            "hostname": _STR,
            "drained_at": _TIME,
            "maintenance": {"enum": ["draining", "drained", None]},
            "devices": {
                "type": "array",
                "items": _obj(
                    {
                        "uuid": _STR,
                        "status": _STR,
                        "status_reason": _NSTR,
                        "maintenance": {"enum": ["draining", "drained", None]},
                        "holders": {"type": "array", "items": _ref("Holder")},
                    }
                ),
            },
        }
    ),
    "DeviceService": _obj(
        {
            "kind": _STR,
            "name": _STR,
            "enabled": _BOOL,
            "details": {"type": "object", "additionalProperties": _STR},
        }
    ),
    "Service": _obj(
        {
            "id": _INT,
            "device_uuid": _STR,
            "hostname": _STR,
            "device_type": _STR,
            "driver_name": _NSTR,
            "activation": _STR,
            "kind": _STR,
            "name": _STR,
            "enabled": _BOOL,
            "details": {"type": "object", "additionalProperties": _STR},
        }
    ),
    "ActivationOutcomes": _obj(
        {
            "state": {"enum": ["ready", "inactive"]},
            "devices": {
                "type": "array",
                "items": _obj(
                    {
                        "uuid": _STR,
                        "hostname": _STR,
                        "activation": _STR,
                        "outcome": {"enum": ["changed", "unchanged", "refused"]},
                        "reason": _NSTR,
                    }
                ),
            },
        }
    ),
    "Driver": _obj(
        {
            "id": _INT,
            "hostname": {"type": ["string", "null"], "description": "null: every host"},
            "name": _STR,
            "version": _NSTR,
            "enabled": _NBOOL,
            "config_digest": _NSTR,
            "found": _NINT,
            "error": _NSTR,
            "reported_at": _TIME,
            "desired": {"type": ["object", "null"]},
            "observed": _NBOOL,
        }
    ),
    "DriverChange": _obj(
        {
            "driver": _STR,
            "action": {"enum": ["install", "update", "uninstall"]},
            "all_hosts": _BOOL,
            "hosts": {
                "type": "array",
                "items": _obj({"hostname": _STR, "generation": _INT}),
            },
            "deactivated": {"type": "array", "items": _STR},
        }
    ),
    "Discovery": _obj(
        {
            "uuid": _STR,
            "requested_at": _TIME,
            "spread": {"type": "number"},
            "all_hosts": _BOOL,
            "host_count": _INT,
            "received": _INT,
            "complete": _BOOL,
            "last_received_at": _TIME,
            "links": _LINKS,
        },
        {
            "hosts": {
                "type": "array",
                "items": _obj({"hostname": _STR, "generation": _INT, "received_at": _TIME}),
            }
        },
    ),
    "Attribute": _obj(
        {
            "uuid": _STR,
            "deployable_id": _INT,
            "key": _STR,
            "value": _STR,
            "created_at": _TIME,
            "updated_at": _TIME,
            "links": _LINKS,
        }
    ),
    "Host": _obj(
        {
            "hostname": _STR,
            "agent_version": _NSTR,
            "last_report_at": _TIME,
            "report_age_seconds": {"type": ["number", "null"]},
            "snapshot_hash": _NSTR,
            "driver_errors": {"type": "array", "items": {"type": "object"}},
            "devices": _INT,
            "deployables": _INT,
            "attach_handles": _obj({"total": _INT, "in_use": _INT}),
            "placement": {"type": ["object", "null"]},
            "created_at": _TIME,
            "updated_at": _TIME,
            "links": _LINKS,
        },
        {
            "drained_at": {**_TIME, "description": "from 2.9; null: not drained"},
            "maintenance": {"enum": ["draining", "drained", None]},
            "holders": {
                "description": "shown by a host's own GET",
                "type": "array",
                "items": _ref("Holder"),
            },
        },
    ),
    "AttachHandle": _obj(
        {
            "uuid": _STR,
            "hostname": _STR,
            "device_uuid": _STR,
            "deployable_uuid": _STR,
            "deployable_name": _STR,
            "attach_type": _STR,
            "attach_info": {"type": "object"},
            "in_use": _BOOL,
            "presence": _STR,
            "holder": {"type": ["object", "null"]},
            "created_at": _TIME,
            "updated_at": _TIME,
            "links": _LINKS,
        }
    ),
    "AuditEvent": _obj(
        {
            "id": _INT,
            "time": _STR,
            "action": _STR,
            "object_type": _STR,
            "object_uuid": _NSTR,
            "host": _NSTR,
            "actor": _STR,
            "user_id": _NSTR,
            "project_id": _NSTR,
            "request_id": _NSTR,
            "before": {"type": ["object", "null"]},
            "after": {"type": ["object", "null"]},
            "links": _LINKS,
        }
    ),
    "Job": _obj(
        {
            "id": _INT,
            "kind": _STR,
            "key": _NSTR,
            "state": {"enum": list(jobs_db.STATES)},
            "attempts": _INT,
            "run_after": _TIME,
            "lease_expires_at": _TIME,
            "worker": _NSTR,
            "last_error": _NSTR,
            "payload": {},
            "created_at": _TIME,
            "updated_at": _TIME,
            "links": _LINKS,
        }
    ),
    "Summary": _obj(
        {
            "hosts": _obj({"total": _INT, "reporting": _INT, "stale": _INT}),
            "devices": _obj(
                {"total": _INT, "by_type": _COUNTS, "by_status": _COUNTS, "by_presence": _COUNTS}
            ),
            "attach_handles": _obj({"total": _INT, "in_use": _INT, "free": _INT}),
            "arqs": _obj({"total": _INT, "by_state": _COUNTS}),
            "jobs": _obj({"by_state": _COUNTS}),
        }
    ),
    "Image": _obj(
        {
            "uuid": _STR,
            "name": _STR,
            "owner": _NSTR,
            "visibility": {"enum": list(images_db.VISIBILITIES)},
            "vendor": _NSTR,
            "board": _NSTR,
            "function_id": _NSTR,
            "interface_id": _NSTR,
            "format": _STR,
            "status": _STR,
            "size": _NINT,
            "sha256": _NSTR,
            "signed": _BOOL,
            "signature_key_id": _NSTR,
            "source": _STR,
            "created_at": _TIME,
            "updated_at": _TIME,
            "links": _LINKS,
        }
    ),
    "ImageMember": _obj({"image_uuid": _STR, "project_id": _STR, "created_at": _TIME}),
    "Program": _obj(
        {
            "uuid": _STR,
            "deployable_uuid": _NSTR,
            "device_uuid": _NSTR,
            "hostname": _NSTR,
            "image_uuid": _STR,
            "image_source": _STR,
            "function_id": _NSTR,
            "state": _STR,
            "reason": _NSTR,
            "previous_image_uuid": _NSTR,
            "restored": _NBOOL,
            "arq_uuid": _NSTR,
            "created_at": _TIME,
            "updated_at": _TIME,
            "finished_at": _TIME,
        }
    ),
    "DesiredState": _obj(
        {
            "generation": _INT,
            "programs": {"type": "array", "items": {"type": "object"}},
            "discovery": {"type": ["object", "null"]},
            "drivers": {"type": "object"},
            "activations": {"type": "array", "items": {"type": "object"}},
            "partitions": {"type": "array", "items": {"type": "object"}},
            "slices": {"type": "array", "items": {"type": "object"}},
            "containers": {"type": "array", "items": {"type": "object"}},
        }
    ),
    "InventoryAnswer": _obj(
        {"hostname": _STR, "hash": _STR, "changed": _BOOL, "desired_state": _ref("DesiredState")}
    ),
    "HostWork": _obj({"uuid": _STR, "hostname": _NSTR, "state": _STR}),
    "Activation": _obj({"activation": {"enum": list(desired_db.STATES)}}),
    "SignedIn": _obj(
        {
            "token": _STR,
            "expires_at": _NSTR,
            "user": {},
            "project": {},
            "roles": {"type": "array", "items": _STR},
        }
    ),
}

# -- query parameters --------------------------------------------------------------------


def _query(name: str, schema: Schema, description: str, required: bool = False) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


_UUID_FORMAT: Schema = {"type": "string", "format": "uuid"}
_TEXT: Schema = {"type": "string", "maxLength": 255}
_CSV = "comma-separated"


def _paged(paging: pagination.Paging | Iterable[str]) -> tuple[Schema, ...]:
    """The paging parameters of a list (microversion 2.4 and later; ignored below)."""
    if not isinstance(paging, pagination.Paging):
        paging = pagination.Paging(frozenset(paging))
    if paging.marker_pattern is None:
        marker: Schema = _UUID_FORMAT
    else:
        marker = {"type": "string", "pattern": f"^(?:{paging.marker_pattern.pattern})$"}
    since = "From 2.4 on (ignored below): "
    return (
        _query("limit", {"type": "integer", "minimum": 1}, since + "at most this many items."),
        _query(
            "marker", marker, since + f"the last item of the previous page ({paging.marker_kind})."
        ),
        _query(
            "sort_key",
            {"enum": sorted(paging.sort_keys)},
            since + f"the order (default {paging.default_key}).",
        ),
        _query("sort_dir", {"enum": ["asc", "desc"]}, since + f"default {paging.default_dir}."),
    )


# -- operations --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Operation:
    """What the route table does not say about one handler.

    ``ok``: its success statuses; ``errors``: the errors of its own, beyond those every
    operation of its kind can answer (see ``_common_errors``); ``body``: the JSON Schema
    of its JSON body (``raw_body``: any bytes instead); ``returns``: the shape of its
    success body, ``media`` the body's type (a JSON operation that returns nothing answers
    no body).
    """

    summary: str
    ok: tuple[int, ...] = (200,)
    errors: tuple[int, ...] = ()
    body: Schema | None = None
    raw_body: bool = False
    query: tuple[Schema, ...] = ()
    returns: Schema | None = None
    media: str = "application/json"


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


_ATTRIBUTE_BODY: Schema = {
    "anyOf": [
        attributes_schema.POST_ATTRIBUTE_V2_0,
        {
            "description": "openstacksdk's form: the attribute wrapped in ``attribute``",
            "type": "object",
            "properties": {"attribute": attributes_schema.POST_ATTRIBUTE_V2_0},
            "required": ["attribute"],
            "additionalProperties": False,
        },
    ]
}
_ARQ_PATCH_ONE: Schema = {
    "description": "Nova's map naming this ARQ only, or just its list of operations",
    "anyOf": [arqs_schema.PATCH_ARQS_V2_0, arqs_schema.PATCH_ARQS_V2_0["additionalProperties"]],
}
_SNAPSHOT = "InventorySnapshotV1"


def _profile_body() -> Schema:
    """The profile body, its group keys as the handler checks them after the schema
    (exosuit.api.schemas.device_profiles.normalize_groups): prefixed by what they ask for."""
    body: Schema = copy.deepcopy(device_profiles_schema.POST_DEVICE_PROFILE_V2_0)
    group = body["items"]["properties"]["groups"]["items"]
    prefixes = "|".join(re.escape(p) for p in device_profiles_schema._PREFIXES)
    group["propertyNames"] = {**group["propertyNames"], "pattern": f"^({prefixes})"}
    group["description"] = (
        "resources:<RC> (a standard or CUSTOM_ resource class): a positive integer; "
        "trait:<TRAIT> (standard or CUSTOM_): required or forbidden; accel:<key>: free"
    )
    return body


Handler = Callable[..., Any]

_PROGRAM = Operation(
    "Program a deployable (2.6: 202 with the program; below, waits and answers the deployable)",
    ok=(200, 202),
    errors=(404, 409, 502),
    body=deployables_schema.PROGRAM_V2_0,
    returns={"anyOf": [_ref("Deployable"), _obj({"program": _ref("Program")})]},
)

OPERATIONS: dict[Handler, Operation] = {
    root.root: Operation("The API's versions", returns=_ref("Versions")),
    root.v2: Operation("The v2 version document", returns=_ref("Version")),
    root.healthz: Operation("Health: the database answers", returns=_ref("Health")),
    metrics.metrics: Operation("Prometheus metrics", media="text/plain"),
    document: Operation("This document", returns={"type": "object"}),
    dashboard.page: Operation("The dashboard's page", media="text/html"),
    dashboard.static: Operation("A file of the dashboard", errors=(404,), media="*/*"),
    dashboard.sign_in: Operation(
        "Sign in with Keystone (409 under noauth)",
        errors=(401, 409, 502),
        body=dashboard.SIGN_IN_SCHEMA,
        returns=_ref("SignedIn"),
    ),
    device_profiles.list_profiles: Operation(
        "List device profiles",
        query=(
            _query("name", _STR, f"Only these names ({_CSV})."),
            *_paged(device_profiles.SORT_KEYS),
        ),
        returns=_list_of("device_profiles", "DeviceProfile"),
    ),
    device_profiles.create_profile: Operation(
        "Create a device profile",
        ok=(201,),
        errors=(409,),
        body=_profile_body(),
        returns=_ref("DeviceProfile"),
    ),
    device_profiles.delete_profiles: Operation(
        "Delete device profiles",
        ok=(204,),
        errors=(404, 409),
        query=(_query("value", _STR, f"A UUID, or names ({_CSV}).", required=True),),
    ),
    device_profiles.get_profile: Operation(
        "Show a device profile (by name from 2.2)",
        errors=(404,),
        returns=_obj({"device_profile": _ref("DeviceProfile")}),
    ),
    device_profiles.delete_profile: Operation(
        "Delete a device profile (or names, comma-separated)", ok=(204,), errors=(404, 409)
    ),
    arqs.list_arqs: Operation(
        "List accelerator requests",
        errors=(423,),
        query=(
            _query("instance", _UUID_FORMAT, "Only the instance's ARQs."),
            _query("bind_state", {"enum": ["resolved"]}, "With instance: 423 until resolved."),
            _query("state", _STR, f"From 2.4: only these states ({_CSV})."),
            _query("hostname", _STR, "From 2.4: only this host's."),
            _query("device_profile_name", _STR, "From 2.4: only this profile's."),
            *_paged(arqs.SORT_KEYS),
        ),
        returns=_list_of("arqs", "AcceleratorRequest"),
    ),
    arqs.create_arqs: Operation(
        "Create accelerator requests from a device profile",
        ok=(201,),
        errors=(404, 409),
        body=arqs_schema.POST_ARQS_V2_0,
        returns=_obj({"arqs": {"type": "array", "items": _ref("AcceleratorRequest")}}),
    ),
    arqs.patch_arqs: Operation(
        "Bind or unbind accelerator requests",
        ok=(202,),
        errors=(404, 409),
        body=arqs_schema.PATCH_ARQS_V2_0,
    ),
    arqs.delete_arqs: Operation(
        "Delete accelerator requests (by uuids or instance)",
        ok=(204,),
        errors=(404, 409),
        query=(
            _query("arqs", _STR, f"ARQ UUIDs ({_CSV})."),
            _query("instance", _UUID_FORMAT, "Every ARQ of the instance."),
        ),
    ),
    arqs.get_arq: Operation(
        "Show an accelerator request", errors=(404,), returns=_ref("AcceleratorRequest")
    ),
    arqs.patch_arq: Operation(
        "Bind or unbind one accelerator request",
        ok=(202,),
        errors=(404, 409),
        body=_ARQ_PATCH_ONE,
    ),
    arqs.delete_arq: Operation("Delete an accelerator request", ok=(204,), errors=(404, 409)),
    deployables.list_deployables: Operation(
        "List deployables",
        query=_paged(deployables.SORT_KEYS),
        returns=_list_of("deployables", "Deployable"),
    ),
    deployables.get_deployable: Operation(
        "Show a deployable", errors=(404,), returns=_ref("Deployable")
    ),
    deployables.program_deployable: _PROGRAM,
    deployables.program_deployable_again: dataclasses.replace(
        _PROGRAM, summary="The same, where openstacksdk sends it (both UUIDs the deployable's)"
    ),
    deployables.get_program: Operation(
        "A deployable's latest program", errors=(404,), returns=_ref("Program")
    ),
    devices.list_devices: Operation(
        "List devices",
        query=(
            *(
                _query(name, _STR, "Exact match" + (" (from 2.3)." if name == "status" else "."))
                for name in devices_db.FILTERS
            ),
            *_paged(devices.SORT_KEYS),
        ),
        returns=_list_of("devices", "Device"),
    ),
    devices.get_device: Operation("Show a device", errors=(404,), returns=_ref("Device")),
    devices.activate_devices: Operation(
        "Mark devices ready or inactive",
        ok=(202,),
        errors=(404, 409),
        body=devices_schema.POST_DEVICE_ACTIVATIONS_V2_7,
        returns=_ref("ActivationOutcomes"),
    ),
    services.list_services: Operation(
        "List the services devices offer",
        query=(
            _query("hostname", _TEXT, "Only this host's."),
            _query("type", _TEXT, "Only devices of this type."),
            _query("kind", _TEXT, "Only this kind (qat, vgpu, mig …)."),
            _query("name", _TEXT, "Only this name."),
            _query("enabled", {"enum": ["true", "false"]}, "Offered now, or not."),
            *_paged(services.PAGING),
        ),
        returns=_list_of("services", "Service"),
    ),
    drivers.list_drivers: Operation(
        "List each host's drivers: reported, asked, observed",
        query=(
            _query("hostname", _TEXT, "Only this host's."),
            _query("name", _TEXT, "Only this driver."),
            *_paged(drivers.PAGING),
        ),
        returns=_list_of("drivers", "Driver"),
    ),
    drivers.install_driver: Operation(
        "Enable a driver on hosts",
        ok=(202,),
        errors=(404,),
        body=drivers_schema.POST_DRIVER_V2_7,
        returns=_ref("DriverChange"),
    ),
    drivers.update_driver: Operation(
        "Change a driver's options on hosts",
        ok=(202,),
        errors=(404,),
        body=drivers_schema.POST_DRIVER_V2_7,
        returns=_ref("DriverChange"),
    ),
    drivers.uninstall_driver: Operation(
        "Disable a driver on hosts (its free devices become inactive)",
        ok=(202,),
        errors=(404, 409),
        body=drivers_schema.POST_DRIVER_UNINSTALL_V2_7,
        returns=_ref("DriverChange"),
    ),
    discoveries.create_discovery: Operation(
        "Ask hosts to discover now",
        ok=(202,),
        errors=(404,),
        body=discoveries_schema.POST_DISCOVERY_V2_7,
        returns=_ref("Discovery"),
    ),
    discoveries.list_discoveries: Operation(
        "List discoveries",
        query=_paged(discoveries.PAGING),
        returns=_list_of("discoveries", "Discovery"),
    ),
    discoveries.get_discovery: Operation(
        "Show a discovery and its hosts", errors=(404,), returns=_ref("Discovery")
    ),
    claims.create_claim: Operation(
        "Claim devices: bound by Exosuit on one host, without Nova (2.8)",
        ok=(201, 202),
        errors=(404, 409),
        body=claims_schema.POST_CLAIM_V2_8,
        returns=_ref("Claim"),
    ),
    claims.list_claims: Operation(
        "List claims",
        query=(
            _query("project", _TEXT, "An admin: only this project's."),
            _query("hostname", _TEXT, "Only this host's."),
            _query("state", _STR, f"Only these states ({_CSV}: {', '.join(claims_db.STATES)})."),
            _query("consumer", _TEXT, "Only this consumer's."),
            *_paged(claims.PAGING),
        ),
        returns=_list_of("claims", "Claim"),
    ),
    claims.get_claim: Operation("Show a claim", errors=(404,), returns=_ref("Claim")),
    claims.delete_claim: Operation("Release a claim (idempotent)", ok=(204,), errors=(404,)),
    claims.renew_claim: Operation(
        "Move a claim's expiry",
        errors=(404, 409),
        body=claims_schema.POST_RENEW_V2_8,
        returns=_ref("Claim"),
    ),
    devices.enable_device: Operation("Enable a device", errors=(404,)),
    devices.disable_device: Operation("Disable a device (maintenance)", errors=(404,)),
    devices.drain_device: Operation(
        "Drain a device (2.9): no new workload; what holds it keeps it",
        errors=(404,),
        returns=_ref("DeviceDrain"),
    ),
    devices.undrain_device: Operation(
        "Undrain a device (2.9)", errors=(404,), returns=_ref("DeviceDrain")
    ),
    devices.set_device_health: Operation(
        "Clear a device held back as unhealthy, or hold one back by hand (2.9)",
        errors=(400, 404),
        body=devices_schema.POST_DEVICE_HEALTH_V2_9,
        returns=_ref("DeviceHealth"),
    ),
    partitions.get_partitions: Operation(
        "A device's partition layout and slices (2.9)", errors=(404,), returns=_ref("Partitions")
    ),
    partitions.set_partitions: Operation(
        "Set a device's partition layout (2.9): its agent applies it",
        ok=(202,),
        errors=(404, 409),
        body=partitions_schema.PUT_PARTITIONS_V2_9,
        returns=_ref("Partitions"),
    ),
    attributes.list_attributes: Operation(
        "List attributes",
        query=(
            _query("deployable_id", _INT, "Only this deployable's."),
            _query("key", _STR, "Only this key."),
            *_paged(attributes.SORT_KEYS),
        ),
        returns=_list_of("attributes", "Attribute"),
    ),
    attributes.create_attribute: Operation(
        "Create an attribute",
        ok=(201,),
        errors=(404, 409),
        body=_ATTRIBUTE_BODY,
        returns=_ref("Attribute"),
    ),
    attributes.get_attribute: Operation(
        "Show an attribute", errors=(404,), returns=_ref("Attribute")
    ),
    attributes.delete_attribute: Operation("Delete an attribute", ok=(204,), errors=(404,)),
    hosts.list_hosts: Operation(
        "List hosts", query=_paged(hosts.PAGING), returns=_list_of("hosts", "Host")
    ),
    hosts.get_host: Operation("Show a host", errors=(404,), returns=_ref("Host")),
    hosts.drain_host: Operation(
        "Drain a host (2.9): none of its devices takes new workload",
        errors=(404,),
        returns=_ref("HostDrain"),
    ),
    hosts.undrain_host: Operation("Undrain a host (2.9)", errors=(404,), returns=_ref("HostDrain")),
    attach_handles.list_attach_handles: Operation(
        "List attach handles",
        query=(
            _query("hostname", _TEXT, "Only this host's."),
            _query("device_uuid", _UUID_FORMAT, "Only this device's."),
            _query("deployable_uuid", _UUID_FORMAT, "Only this deployable's."),
            _query("in_use", {"enum": ["true", "false"]}, "Held or free."),
            *_paged(attach_handles.SORT_KEYS),
        ),
        returns=_list_of("attach_handles", "AttachHandle"),
    ),
    attach_handles.get_attach_handle: Operation(
        "Show an attach handle", errors=(404,), returns=_ref("AttachHandle")
    ),
    jobs.list_jobs: Operation(
        "List the conductor's jobs",
        query=(
            _query("state", _STR, f"Only these states ({_CSV}: {', '.join(jobs_db.STATES)})."),
            _query("kind", _TEXT, "Only this kind."),
            *_paged(jobs.PAGING),
        ),
        returns=_list_of("jobs", "Job"),
    ),
    jobs.get_job: Operation("Show a job", errors=(404,), returns=_ref("Job")),
    audit.list_audit_events: Operation(
        "List the audit trail (2.9), newest first",
        query=(
            *(
                _query(name, _TEXT, f"Only those whose {name} is this.")
                for name in audit_db.FILTERS
            ),
            _query("since", _STR, "Only those made at or after this ISO 8601 time."),
            _query("until", _STR, "Only those made before this ISO 8601 time."),
            *_paged(audit.PAGING),
        ),
        returns=_list_of("audit_events", "AuditEvent"),
    ),
    audit.get_audit_event: Operation(
        "Show an audit record (2.9)", errors=(404,), returns=_ref("AuditEvent")
    ),
    jobs.retry_job: Operation("Retry a failed job", errors=(404, 409), returns=_ref("Job")),
    summary.get_summary: Operation(
        "The fleet in numbers",
        query=(
            _query(
                "stale_after",
                {"type": "number", "minimum": 0, "maximum": 1e9},
                "Seconds after which a host is stale.",
            ),
        ),
        returns=_ref("Summary"),
    ),
    images.list_images: Operation(
        "List the images the caller sees",
        query=(
            *(
                _query(
                    name,
                    {"enum": list(images_db.VISIBILITIES)} if name == "visibility" else _TEXT,
                    "Exact match.",
                )
                for name in images_db.FILTERS
            ),
            *_paged(images.SORT_KEYS),
        ),
        returns=_list_of("images", "Image"),
    ),
    images.create_image: Operation(
        "Create an image (queued: no data yet)",
        ok=(201,),
        body=images_schema.POST_IMAGE_V2_6,
        returns=_ref("Image"),
    ),
    images.get_image: Operation("Show an image", errors=(404,), returns=_ref("Image")),
    images.delete_image: Operation("Delete an image", ok=(204,), errors=(404, 409)),
    images.download_image: Operation(
        "Download an image's data",
        ok=(200, 206, 304),
        errors=(404, 409, 416),
        media="application/octet-stream",
    ),
    images.upload_image: Operation(
        "Upload an image's data (once)", ok=(204,), errors=(404, 409), raw_body=True
    ),
    images.list_members: Operation(
        "The projects a shared image is shared with",
        errors=(404,),
        returns=_obj({"members": {"type": "array", "items": _ref("ImageMember")}}),
    ),
    images.add_member: Operation(
        "Share an image with a project", errors=(404,), returns=_ref("ImageMember")
    ),
    images.remove_member: Operation("Stop sharing an image", ok=(204,), errors=(404,)),
    agent.put_inventory: Operation(
        "A host's complete inventory snapshot (or its hash only)",
        errors=(412, 429),
        body=_ref(_SNAPSHOT),
        returns=_ref("InventoryAnswer"),
    ),
    agent.get_desired_state: Operation(
        "A host's desired state", ok=(200, 304), returns=_ref("DesiredState")
    ),
    agent_arqs.put_host_work: Operation(
        "A host reports the work a bind waits for",
        errors=(404, 409),
        body=agent_arqs_schema.PUT_HOST_WORK_V1,
        returns=_ref("HostWork"),
    ),
    agent_programs.put_program: Operation(
        "A host reports a program's progress",
        errors=(404, 409),
        body=agent_programs_schema.PUT_PROGRAM_V1,
        returns=_ref("Program"),
    ),
    agent_activations.put_activation: Operation(
        "A host reports a device's install or uninstall step",
        errors=(404, 409),
        body=agent_activations_schema.PUT_ACTIVATION_V1,
        returns=_ref("Activation"),
    ),
    agent_partitions.put_partition: Operation(
        "A host reports how it applied a device's partition layout",
        errors=(404, 409),
        body=partitions_schema.PUT_PARTITION_OUTCOME_V1,
        returns=_ref("PartitionOutcome"),
    ),
    agent_claims.put_claim: Operation(
        "A host reports a claim's CDI spec files",
        errors=(404,),
        body=claims_schema.PUT_AGENT_CLAIM_V1,
        returns=_ref("ClaimCDI"),
    ),
    agent_images.get_image_data: Operation(
        "An image's data, for the host that programs it",
        ok=(200, 206, 304),
        errors=(404, 409, 416, 502),
        media="application/octet-stream",
    ),
}

# -- path parameters ---------------------------------------------------------------------

# A path segment: no slash (a slash would be another path), within its column.
_SEGMENT: Schema = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[^/]+$"}
_PATH_PARAMETERS: dict[str, Schema] = {
    "uuid": _UUID_FORMAT,
    "image_uuid": _UUID_FORMAT,
    "device_uuid": _UUID_FORMAT,
    "claim_uuid": _UUID_FORMAT,
    "again": {**_UUID_FORMAT, "description": "the deployable's UUID again"},
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
            "content": {"application/json": {"schema": _ref("Error")}},
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
    operation = _described(handler)
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


def _described(handler: Handler) -> Operation:
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
    schemas[_SNAPSHOT] = _embedded(wire_schemas.inventory_schema(), _SNAPSHOT)
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
