"""/agent/v1: agents put their host's inventory snapshot and get its desired state
(in the answer, or polled with ``GET …/desired_state``)."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
from typing import Any

from exosuit import schemas
from exosuit.api import wsgi
from exosuit.api.describe import BOOL, INT, SNAPSHOT, STR, Handler, Operation, Schema, obj, ref
from exosuit.api.policies import agent as policies
from exosuit.context import RequestContext
from exosuit.db import changes, models
from exosuit.db import desired_state as desired_db
from exosuit.db import inventory as db
from exosuit.db import programs as programs_db
from exosuit.metrics import Counter
from exosuit.schemas import names

# Counted by exosuit/db/changes.py: the version an API process's cache of host reports
# compares (exosuit/api/report_cache.py).
CHANGES = Counter(
    changes.HOST_REPORTS,
    "Committed transactions that changed a host's snapshot hash or desired-state "
    "generation (or added or deleted a host), by slot (one of 16 rows, so that writers do "
    "not queue on one): their sum is the version the API's cache of host reports compares.",
    ("slot",),
)


def put_inventory(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"hostname", "hash", "changed", "desired_state"}`` (as ``GET …/desired_state``).

    The snapshot is complete; its difference from the database is applied in one
    transaction. When its hash equals the last one applied, the body is not even
    validated and nothing is written but, at most once per ``[api]
    report_age_resolution`` seconds, the report time. A body with only
    ``schema_version`` and ``hash`` asks whether the API has that snapshot: 200 if so,
    412 if not (send it whole). A snapshot that breaks the schema (or whose hash does
    not match its content) gets a 400, nothing written. A changed one waits up to
    ``[api] inventory_wait`` s for one of ``[api] inventory_concurrency`` transactions
    to apply it (group commit), else 429.

    An unchanged report that wrote nothing, sent with the header
    ``Exosuit-Desired-Generation`` naming the host's current desired-state generation
    (the agent holds that state), is answered without ``desired_state``: one indexed
    read in all, or none of its own when this process read the host since and the
    counter of such changes, read once for the reports that came meanwhile, says
    nothing changed (exosuit/api/report_cache.py).
    """
    req.app.authorize(req, policies.REPORT)
    hostname = req.arg("hostname")
    body = _report(req, hostname)
    known = _known(req, hostname)
    kept: db.HostReport | None = None
    if known is not None and known.snapshot_hash == body["hash"]:
        changed, (wrote, kept) = False, _touch(req, known, hostname, body)
        # A write of the report time alone leaves the desired state as it was.
        only_time = kept is not None and kept.observed_generation == known.observed_generation
        held = (not wrote or only_time) and _holds(req.environ, known)
    else:
        changed, held, wrote = _apply(req, hostname, body, new=known is None), False, True
    if kept is not None and known is not None:  # only the report time (and generation) moved
        req.app.host_reports.replace(hostname, known, kept)
    elif wrote:  # or may have: read the host again next time
        req.app.host_reports.forget(hostname)
    answer: dict[str, Any] = {"hostname": hostname, "hash": body["hash"], "changed": changed}
    if not held:
        answer["desired_state"] = req.app.db.read(desired_db.desired_state, hostname)
    return wsgi.json_response(200, answer)


# The route ``unchanged_answer`` serves, as the router names it (the latency's label).
INVENTORY_ROUTE = "/agent/v1/hosts/{hostname}/inventory"
_PREFIX, _SUFFIX = "/agent/v1/hosts/", "/inventory"


class _Caller:
    """What ``Application.authorize`` reads of a request: its context."""

    __slots__ = ("context",)

    def __init__(self, context: RequestContext) -> None:
        self.context = context


def unchanged_answer(app: wsgi.App, environ: dict[str, Any]) -> bytes | None:
    """The body of ``put_inventory``'s answer to an unchanged report that writes nothing
    and whose agent holds the current desired state, when this process's cache answers
    it; None for any other request (``put_inventory`` answers it: anything unusual,
    any error, any write, any database read but the shared counter's).

    Called after authentication, before routing, microversions and webob: the same
    checks, in the same functions, as ``put_inventory``'s path to the same answer (the
    caller's identity headers, the policy, the body's size, JSON and strings, its hash,
    schema version and host, the cache's rule, the report time's resolution, the
    observed generation, the held desired state). The body, once read, is put back in
    ``wsgi.input`` for the full path."""
    hostname = _reported_host(environ)
    if hostname is None:
        return None
    try:
        app.authorize(_Caller(app.context(environ)), policies.REPORT)
    except Exception:  # noqa: BLE001 - refused or malformed: the full path says how
        return None
    body = _quick_body(app, environ, hostname)
    if body is None:
        return None
    known = app.host_reports.get(hostname)
    if known is None or known.snapshot_hash != body["hash"]:
        return None
    if _stale(known, app.conf.api.report_age_resolution):
        return None
    observed = body.get("observed_generation")
    if observed is not None and (not isinstance(observed, int) or known.moved(observed)):
        return None
    if not _holds(environ, known):
        return None
    return wsgi.encode_json({"hostname": hostname, "hash": body["hash"], "changed": False})


def _reported_host(environ: dict[str, Any]) -> str | None:
    """The host of a ``PUT …/hosts/{hostname}/inventory`` with no query string and a
    plain ASCII host name (the full path decodes any other from UTF-8); None otherwise."""
    path = environ.get("PATH_INFO", "")
    if (
        environ.get("REQUEST_METHOD") != "PUT"
        or not path.startswith(_PREFIX)
        or not path.endswith(_SUFFIX)
        or environ.get("QUERY_STRING")
    ):
        return None
    hostname = path[len(_PREFIX) : -len(_SUFFIX)]
    if not names.is_name(hostname):
        return None
    return hostname if hostname.isprintable() and hostname.isascii() else None


def _quick_body(app: wsgi.App, environ: dict[str, Any], hostname: str) -> dict[str, Any] | None:
    """The report's body if it is an unchanged report's as ``_report`` would accept it
    (read within ``[api] max_agent_body_size``, JSON, strings clean, its hash, schema
    version 1, its host); None otherwise. What was read is put back in ``wsgi.input``."""
    length = environ.get("CONTENT_LENGTH")
    if not length or not length.isdigit() or not length.isascii():
        return None
    size = int(length)
    if size == 0 or size > app.conf.api.max_agent_body_size:
        return None
    data = environ["wsgi.input"].read(size)
    environ["wsgi.input"] = io.BytesIO(data)
    if len(data) != size or wsgi.suspect_escape(data):
        return None
    try:
        body = json.loads(data, parse_constant=wsgi.not_json)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("hash"), str)
        or body.get("schema_version") != 1
        or body.get("hostname", hostname) != hostname
    ):
        return None
    return body


def get_desired_state(req: wsgi.Request) -> wsgi.Response:
    """200 the host's desired state ``{"generation", "programs": [...]}`` with ``ETag:
    "<generation>"``; 304 when ``If-None-Match`` names the current generation (the
    agent polls it every ``[agent] desired_state_interval``). A host never seen has
    generation 0 and nothing to run."""
    req.app.authorize(req, policies.REPORT)
    hostname = req.arg("hostname")
    current = req.app.db.read(programs_db.generation, hostname)
    if str(current) in req.if_none_match:  # webob's matcher holds the tags unquoted
        return wsgi.json_response(304, headers=[("ETag", _etag(current))])
    desired = req.app.db.read(desired_db.desired_state, hostname)
    return wsgi.json_response(200, desired, headers=[("ETag", _etag(desired["generation"]))])


def _etag(generation: int) -> str:
    return f'"{generation}"'


def _known(req: wsgi.Request, hostname: str) -> db.HostReport | None:
    """What an unchanged report of ``hostname`` is answered from: this process's entry if
    nothing it shows changed since, else read (and kept)."""
    cache = req.app.host_reports
    known = cache.get(hostname)
    if known is not None:
        return known
    found = req.app.db.read(db.host_report_versioned, hostname)
    if found is None:
        return None
    cache.put(hostname, *found)
    return found[1]


def _report(req: wsgi.Request, hostname: str) -> dict[str, Any]:
    """The body, checked only as far as an unchanged report needs: its hash, its
    schema version and its host (whose name, in the path, is a name: doc/names.md)."""
    try:
        names.check("host name", hostname)
    except names.NameInvalid as error:
        raise wsgi.ApiError(400, str(error), names.CODE) from None
    body = wsgi.extract_json(req)
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("hash"), str)
        or body.get("schema_version") != 1
    ):
        wsgi.validate(body, schemas.inventory_schema())  # names what is wrong
    if body.get("hostname", hostname) != hostname:
        raise wsgi.ApiError(
            400,
            f"The snapshot is for host {body['hostname']!r} but was sent for "
            f"{hostname!r}: a host has one name everywhere.",
            "exosuit.inventory.hostname",
        )
    report: dict[str, Any] = body  # an object: it has a hash, or the schema passed it
    return report


def _verify(body: dict[str, Any]) -> None:
    """400 unless the whole snapshot matches the schema and its hash its content."""
    wsgi.validate(body, schemas.inventory_schema())
    expected = schemas.snapshot_hash(
        body["devices"], body.get("driver_errors", []), body.get("drivers")
    )
    if expected != body["hash"]:
        raise wsgi.ApiError(
            400,
            f"The snapshot's hash {body['hash']} does not match its content ({expected}).",
            "exosuit.inventory.hash",
        )


@functools.cache
def _extras_schema() -> dict[str, Any]:
    """What an unchanged report carries beside its hash and is kept: the generation its
    agent observed and its usage, as the snapshot's schema bounds them."""
    properties = schemas.inventory_schema()["properties"]
    return {
        "type": "object",
        "properties": {k: properties[k] for k in ("observed_generation", "usage")},
    }


def _holds(environ: dict[str, Any], known: db.HostReport) -> bool:
    """Whether the agent says it holds the host's current desired state: its
    ``Exosuit-Desired-Generation`` header names that generation (a header that is not a
    whole number is ignored: the answer carries the desired state)."""
    value = environ.get("HTTP_EXOSUIT_DESIRED_GENERATION")
    return (
        value is not None
        and value.isascii()
        and value.isdigit()
        and len(value) <= 10
        and int(value) == known.desired_generation
    )


def _touch(
    req: wsgi.Request, known: db.HostReport, hostname: str, body: dict[str, Any]
) -> tuple[bool, db.HostReport | None]:
    """An unchanged report: move the host's last report time, with the report's usage,
    at most once per ``[api] report_age_resolution`` seconds, and the generation its
    agent observed when that moved (nothing else is written; what is written is
    checked against the snapshot's schema first). Whether it wrote, and, when the
    report time moved, what the host's entry in the cache becomes: the same hash and
    desired generation (neither was written, nor is the cache's counter moved by such
    a write), a report time no later than the one written (taken before it), and the
    observed generation sent (both only grow: an older value than the database's
    costs a compare-and-set that finds nothing to do, never a wrong answer)."""
    resolution = req.app.conf.api.report_age_resolution
    stale = _stale(known, resolution)
    observed = body.get("observed_generation")
    moved = known.moved(observed) if isinstance(observed, int) else observed is not None
    if not (stale or moved):
        return False, None
    extras = {k: body[k] for k in ("observed_generation", "usage") if k in body}
    if not stale:
        extras.pop("usage", None)
    wsgi.validate(extras, _extras_schema())
    before = models.utcnow()
    usage = extras.get("usage")
    observe = observed if moved else None
    timed = req.app.inventory_writes.run(
        hostname,
        lambda conn: db.touch_host(
            conn, hostname, body["hash"], resolution, usage=usage, observed_generation=observe
        ),
        refuse=False,
    )
    if not timed:
        return True, None
    generation = observed if moved else known.observed_generation
    return True, dataclasses.replace(known, last_report_at=before, observed_generation=generation)


def _apply(req: wsgi.Request, hostname: str, body: dict[str, Any], *, new: bool) -> bool:
    """A changed report: 412 if it is only a hash, else verified and applied in one
    transaction once an admission slot is free (429 when none comes). Whether the
    database changed. ``new``: the host had no row when the report came."""
    if "devices" not in body:
        raise wsgi.ApiError(
            412,
            f"The API does not have snapshot {body['hash']} of host "
            f"{hostname}: send the whole snapshot.",
            "exosuit.inventory.unknown",
        )
    # The costly part (validation, hashing, the write) waits for its turn in this
    # process's group commit (exosuit/db/group_commit.py), which applies it with the
    # other hosts' snapshots waiting then, and answers once they are committed.
    new_devices = _new_devices(req)
    result = req.app.inventory_writes.run(
        hostname,
        lambda conn: db.apply_snapshot(
            conn, hostname, body, new_devices=new_devices, expect_new=new
        ),
        prepare=lambda: _verify(body),
    )
    return result.changed


def _new_devices(req: wsgi.Request) -> db.NewDevices:
    """How the devices a snapshot reports for the first time start ([inventory])."""
    options = req.app.conf.inventory
    return db.NewDevices(options.new_device_activation, frozenset(options.ready_drivers))


def _stale(known: db.HostReport, resolution: float) -> bool:
    """Whether an unchanged report should move the host's last report time."""
    if known.last_report_at is None:
        return True
    return (models.utcnow() - known.last_report_at).total_seconds() >= resolution


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "DesiredState": obj(
        {
            "generation": INT,
            "programs": {"type": "array", "items": {"type": "object"}},
            "discovery": {"type": ["object", "null"]},
            "drivers": {"type": "object"},
            "activations": {"type": "array", "items": {"type": "object"}},
            "partitions": {"type": "array", "items": {"type": "object"}},
            "slices": {"type": "array", "items": {"type": "object"}},
            "containers": {"type": "array", "items": {"type": "object"}},
        }
    ),
    "InventoryAnswer": obj(
        {"hostname": STR, "hash": STR, "changed": BOOL, "desired_state": ref("DesiredState")}
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    put_inventory: Operation(
        "A host's complete inventory snapshot (or its hash only)",
        errors=(412, 429),
        body=ref(SNAPSHOT),
        returns=ref("InventoryAnswer"),
    ),
    get_desired_state: Operation(
        "A host's desired state", ok=(200, 304), returns=ref("DesiredState")
    ),
}
