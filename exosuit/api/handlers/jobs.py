"""/v2/jobs (microversion 2.5): the conductor's job table; list, show, and retry a
failed job."""

from __future__ import annotations

import re

from exosuit import exceptions
from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    CSV,
    INT,
    LINKS,
    NSTR,
    STR,
    TEXT,
    TIME,
    Handler,
    Operation,
    Schema,
    list_of,
    obj,
    paged,
    query,
    ref,
)
from exosuit.api.policies import jobs as policies
from exosuit.db import jobs as db
from exosuit.schemas import JSONObject

# Ids are integers (periodic jobs have negative ones), within a 64-bit column.
_ID = re.compile(r"-?[0-9]{1,18}")
PAGING = pagination.Paging(
    sort_keys=frozenset(db.SORT_COLUMNS),
    default_key="id",
    default_dir="desc",
    marker_field="id",
    marker_pattern=_ID,
    marker_kind="a job id",
)


def _serialize(req: wsgi.Request, job: db.JobRow) -> JSONObject:
    return {
        "id": job["id"],
        "kind": job["kind"],
        "key": job["key"],
        "state": job["state"],
        "attempts": job["attempts"],
        "run_after": wsgi.format_time(job["run_after"]),
        "lease_expires_at": wsgi.format_time(job["lease_expires_at"]),
        "worker": job["worker"],
        "last_error": job["last_error"],
        "payload": job["payload"],
        "created_at": wsgi.format_time(job["created_at"]),
        "updated_at": wsgi.format_time(job["updated_at"]),
        "links": [req.link("jobs", str(job["id"]))],
    }


def _states(req: wsgi.Request) -> list[str] | None:
    """``?state=`` (comma-separated); 400 for a state that is none of the four."""
    states = wsgi.query_list(req, "state")
    if states is not None and (not states or set(states) - set(db.STATES)):
        raise wsgi.ApiError(
            400,
            f"state must be one or more of {', '.join(db.STATES)} (comma-separated), "
            f"not {req.GET['state']!r}.",
            "exosuit.job.state",
        )
    return states


def _job_id(req: wsgi.Request) -> int:
    """The id of the path; a job that cannot exist (not an integer) is not found."""
    ident = req.arg("id")
    if not _ID.fullmatch(ident):
        raise exceptions.JobNotFound(ident=ident)
    return int(ident)


def list_jobs(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"jobs": [...]}``, newest (highest id) first by default; filters ``state``
    and ``kind``; ``next`` while more remain."""
    req.app.authorize(req, policies.GET_ALL)
    states = _states(req)
    kind = pagination.text_param(req, "kind")
    page = pagination.page_from_request(req, PAGING)
    rows = req.app.db.read(db.page_jobs, states=states, kind=kind, page=page)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body, PAGING)
    body["jobs"] = [_serialize(req, j) for j in rows]
    return wsgi.json_response(200, body)


def get_job(req: wsgi.Request) -> wsgi.Response:
    """200 with the job; 404 ``exosuit.job.not_found`` (also for an id that is no integer)."""
    req.app.authorize(req, policies.GET_ONE)
    job = req.app.db.read(db.get_job, _job_id(req))
    return wsgi.json_response(200, _serialize(req, job))


def retry_job(req: wsgi.Request) -> wsgi.Response:
    """200 with the job, pending again (due now, attempts reset); 409
    ``exosuit.job.not_failed`` unless it was failed; 404 if there is none."""
    req.app.authorize(req, policies.RETRY)
    job = req.app.db.write(db.retry_job, _job_id(req))
    return wsgi.json_response(200, _serialize(req, job))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Job": obj(
        {
            "id": INT,
            "kind": STR,
            "key": NSTR,
            "state": {"enum": list(db.STATES)},
            "attempts": INT,
            "run_after": TIME,
            "lease_expires_at": TIME,
            "worker": NSTR,
            "last_error": NSTR,
            "payload": {},
            "created_at": TIME,
            "updated_at": TIME,
            "links": LINKS,
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_jobs: Operation(
        "List the conductor's jobs",
        query=(
            query("state", STR, f"Only these states ({CSV}: {', '.join(db.STATES)})."),
            query("kind", TEXT, "Only this kind."),
            *paged(PAGING),
        ),
        returns=list_of("jobs", "Job"),
    ),
    get_job: Operation("Show a job", errors=(404,), returns=ref("Job")),
    retry_job: Operation("Retry a failed job", errors=(404, 409), returns=ref("Job")),
}
