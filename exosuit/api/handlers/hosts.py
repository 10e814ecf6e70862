"""/v2/hosts (microversion 2.5): the hosts whose agents report, list and show; drain and
undrain (2.9, doc/devices.md)."""

from __future__ import annotations

import re
import urllib.parse

from exosuit import exceptions
from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    INT,
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
    ref,
)
from exosuit.api.policies import hosts as policies
from exosuit.db import drain as drain_db
from exosuit.db import hosts as db
from exosuit.schemas import JSONObject

# What a hostname can be (no control character: PostgreSQL refuses NUL in a string).
_HOSTNAME = re.compile(r"[^\x00-\x1f\x7f]{1,255}")
PAGING = pagination.Paging(
    sort_keys=frozenset(db.SORT_COLUMNS),
    default_key="hostname",
    default_dir="asc",
    marker_field="hostname",
    marker_pattern=_HOSTNAME,
    marker_kind="a hostname",
)


def _serialize_placement(host: db.HostRow) -> JSONObject | None:
    if host["placement_id"] is None:  # the conductor has not synced the host yet
        return None
    return {
        "compute_rp_uuid": host["placement_compute_rp_uuid"],
        "synced_at": wsgi.format_time(host["placement_synced_at"]),
        "verified_at": wsgi.format_time(host["placement_verified_at"]),
        "failures": host["placement_failures"],
        "last_error": host["placement_last_error"],
    }


def _serialize(req: wsgi.Request, host: db.HostRow) -> JSONObject:
    body: JSONObject = {
        "hostname": host["hostname"],
        "agent_version": host["agent_version"],
        "last_report_at": wsgi.format_time(host["last_report_at"]),
        "report_age_seconds": host["report_age_seconds"],
        "snapshot_hash": host["snapshot_hash"],
        "driver_errors": [
            {"driver": e.get("driver"), "error": e.get("error")} for e in host["driver_errors"]
        ],
        "devices": host["devices"],
        "deployables": host["deployables"],
        "attach_handles": {
            "total": host["attach_handles"],
            "in_use": host["attach_handles_in_use"],
        },
        "placement": _serialize_placement(host),
        "created_at": wsgi.format_time(host["created_at"]),
        "updated_at": wsgi.format_time(host["updated_at"]),
        "links": [req.link("hosts", urllib.parse.quote(host["hostname"], safe=""))],
    }
    if req.version.matches((2, 9)):
        # Drain (doc/devices.md): draining while a device of it is held, then drained.
        body["drained_at"] = wsgi.format_time(host["drained_at"])
        body["maintenance"] = host["maintenance"]
        if "holders" in host:
            body["holders"] = host["holders"]
    if req.version.matches((2, 11)):
        # The desired state asked of the host's agent and what it last said it applied
        # (doc/agent-api.md): a desired generation ahead of the observed one is on its way.
        body["desired_generation"] = host["desired_generation"]
        body["observed_generation"] = host["observed_generation"]
        body["observed_at"] = wsgi.format_time(host["observed_at"])
    return body


def list_hosts(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"hosts": [...]}``, by hostname by default; ``next`` while more remain."""
    req.app.authorize(req, policies.GET_ALL)
    page = pagination.page_from_request(req, PAGING)
    rows = req.app.db.read(db.list_hosts, page=page)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body, PAGING)
    body["hosts"] = [_serialize(req, h) for h in rows]
    return wsgi.json_response(200, body)


def get_host(req: wsgi.Request) -> wsgi.Response:
    """200 with the host; 404 ``exosuit.host.not_found``."""
    req.app.authorize(req, policies.GET_ONE)
    hostname = _hostname(req)
    host = req.app.db.read(db.get, hostname, holders=req.version.matches((2, 9)))
    return wsgi.json_response(200, _serialize(req, host))


def _hostname(req: wsgi.Request) -> str:
    hostname = req.arg("hostname")
    if not _HOSTNAME.fullmatch(hostname):  # no host has such a name
        raise exceptions.HostNotFound(hostname=hostname)
    return hostname


def _serialize_drain(answer: drain_db.DrainedHost) -> JSONObject:
    return {**answer, "drained_at": wsgi.format_time(answer["drained_at"])}


def drain_host(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"hostname", "drained_at", "maintenance", "devices": [{"uuid", "status",
    "status_reason", "maintenance", "holders"}]}`` (2.9): none of the host's devices
    takes new workload (each maintaining), nor will those it reports later; what holds
    them keeps them. ``maintenance``: ``draining`` while a device is held, ``drained``
    once none is. Idempotent; 404 ``exosuit.host.not_found``."""
    req.app.authorize(req, policies.DRAIN)
    answer = req.app.db.write(drain_db.drain_host, _hostname(req), drain=True)
    return wsgi.json_response(200, _serialize_drain(answer))


def undrain_host(req: wsgi.Request) -> wsgi.Response:
    """200 as drain (2.9): the host's devices are enabled again, but those Exosuit
    disabled itself (they keep their ``status_reason``); the host is no longer drained."""
    req.app.authorize(req, policies.UNDRAIN)
    answer = req.app.db.write(drain_db.drain_host, _hostname(req), drain=False)
    return wsgi.json_response(200, _serialize_drain(answer))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "HostDrain": obj(
        {
            "hostname": STR,
            "drained_at": TIME,
            "maintenance": {"enum": ["draining", "drained", None]},
            "devices": {
                "type": "array",
                "items": obj(
                    {
                        "uuid": STR,
                        "status": STR,
                        "status_reason": NSTR,
                        "maintenance": {"enum": ["draining", "drained", None]},
                        "holders": {"type": "array", "items": ref("Holder")},
                    }
                ),
            },
        }
    ),
    "Host": obj(
        {
            "hostname": STR,
            "agent_version": NSTR,
            "last_report_at": TIME,
            "report_age_seconds": {"type": ["number", "null"]},
            "snapshot_hash": NSTR,
            "driver_errors": {"type": "array", "items": {"type": "object"}},
            "devices": INT,
            "deployables": INT,
            "attach_handles": obj({"total": INT, "in_use": INT}),
            "placement": {"type": ["object", "null"]},
            "created_at": TIME,
            "updated_at": TIME,
            "links": LINKS,
        },
        {
            "drained_at": {**TIME, "description": "from 2.9; null: not drained"},
            "maintenance": {"enum": ["draining", "drained", None]},
            "holders": {
                "description": "shown by a host's own GET",
                "type": "array",
                "items": ref("Holder"),
            },
            "desired_generation": {
                "type": "integer",
                "description": "from 2.11: the desired state's generation asked of the agent",
            },
            "observed_generation": {
                "type": ["integer", "null"],
                "description": "from 2.11: the generation the agent last said it applied",
            },
            "observed_at": {**TIME, "description": "from 2.11: when it said so"},
        },
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_hosts: Operation("List hosts", query=paged(PAGING), returns=list_of("hosts", "Host")),
    get_host: Operation("Show a host", errors=(404,), returns=ref("Host")),
    drain_host: Operation(
        "Drain a host (2.9): none of its devices takes new workload",
        errors=(404,),
        returns=ref("HostDrain"),
    ),
    undrain_host: Operation("Undrain a host (2.9)", errors=(404,), returns=ref("HostDrain")),
}
