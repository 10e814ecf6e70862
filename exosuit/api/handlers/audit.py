"""/v2/audit_events (microversion 2.9): the audit trail, read by admins; newest first,
filtered by object, host, actor, action and time, paged (doc/audit.md)."""

from __future__ import annotations

import datetime as dt
import re

from exosuit import exceptions, notifications
from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    INT,
    LINKS,
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
    ref,
)
from exosuit.api.policies import audit as policies
from exosuit.db import audit as db
from exosuit.schemas import JSONObject

# Ids are positive integers within a 64-bit column.
_ID = re.compile(r"[0-9]{1,18}")
PAGING = pagination.Paging(
    sort_keys=frozenset(db.SORT_COLUMNS),
    default_key="id",
    default_dir="desc",
    marker_field="id",
    marker_pattern=_ID,
    marker_kind="an audit event id",
)
# The time range's parameters: at or after ``since``, before ``until``.
TIME_PARAMS = ("since", "until")


def parse_time(text: str) -> dt.datetime:
    """An ISO 8601 time of a query parameter as naive UTC (as the records hold it); one
    without an offset is UTC. Raises ValueError (with what is wrong) for anything else."""
    value = dt.datetime.fromisoformat(text.strip())
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _times(req: wsgi.Request) -> dict[str, dt.datetime]:
    """``since`` and ``until`` given; 400 ``exosuit.query.<name>`` for one that is no time."""
    times = {}
    for name in TIME_PARAMS:
        text = pagination.text_param(req, name)
        if text is None:
            continue
        try:
            times[name] = parse_time(text)
        except ValueError:
            raise wsgi.ApiError(
                400,
                f"{name} must be an ISO 8601 time (2026-11-25T21:00:00Z), not {text!r}.",
                f"exosuit.query.{name}",
            ) from None
    return times


def _filters(req: wsgi.Request) -> dict[str, str]:
    filters = {}
    for name in db.FILTERS:
        value = pagination.text_param(req, name)
        if value is not None:
            # UUIDs are stored in lower case; a host's or driver's name as it is.
            uuid = name == "object_uuid" and wsgi.is_uuid_like(value)
            filters[name] = value.lower() if uuid else value
    return filters


def _serialize(req: wsgi.Request, event: db.AuditEventRow) -> JSONObject:
    return {
        **notifications.payload_of(event),
        "links": [req.link("audit_events", str(event["id"]))],
    }


def list_audit_events(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"audit_events": [...]}``, newest (highest id) first by default; exact
    filters ``object_type``, ``object_uuid``, ``host``, ``actor``, ``user_id``,
    ``project_id``, ``action``, ``request_id``; ``since`` (inclusive) and ``until``
    (exclusive) ISO 8601 times; ``next`` while more remain. 400 for a bad time."""
    req.app.authorize(req, policies.GET_ALL)
    filters = _filters(req)
    times = _times(req)
    page = pagination.page_from_request(req, PAGING)
    rows = req.app.db.read(db.page_events, filters=filters, page=page, **times)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body, PAGING)
    body["audit_events"] = [_serialize(req, e) for e in rows]
    return wsgi.json_response(200, body)


def get_audit_event(req: wsgi.Request) -> wsgi.Response:
    """200 with the record; 404 ``exosuit.audit_event.not_found`` (also for an id that
    is no integer, and for a record purged past retention)."""
    req.app.authorize(req, policies.GET_ONE)
    ident = req.arg("id")
    if not _ID.fullmatch(ident):
        raise exceptions.AuditEventNotFound(ident=ident)
    event = req.app.db.read(db.get_event, int(ident))
    return wsgi.json_response(200, _serialize(req, event))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "AuditEvent": obj(
        {
            "id": INT,
            "time": STR,
            "action": STR,
            "object_type": STR,
            "object_uuid": NSTR,
            "host": NSTR,
            "actor": STR,
            "user_id": NSTR,
            "project_id": NSTR,
            "request_id": NSTR,
            "before": {"type": ["object", "null"]},
            "after": {"type": ["object", "null"]},
            "links": LINKS,
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_audit_events: Operation(
        "List the audit trail (2.9), newest first",
        query=(
            *(query(name, TEXT, f"Only those whose {name} is this.") for name in db.FILTERS),
            query("since", STR, "Only those made at or after this ISO 8601 time."),
            query("until", STR, "Only those made before this ISO 8601 time."),
            *paged(PAGING),
        ),
        returns=list_of("audit_events", "AuditEvent"),
    ),
    get_audit_event: Operation(
        "Show an audit record (2.9)", errors=(404,), returns=ref("AuditEvent")
    ),
}
