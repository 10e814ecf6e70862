"""/v2/summary (microversion 2.5): the fleet in numbers."""

from __future__ import annotations

import math

from exosuit.api import wsgi
from exosuit.api.describe import COUNTS, INT, Handler, Operation, Schema, obj, query, ref
from exosuit.api.policies import summary as policies
from exosuit.db import summary as db
from exosuit.schemas import JSONObject

# A bound that keeps the cut-off a date (about 31 years); no host is staler than that.
_MAX_STALE_AFTER = 1e9


def _stale_after(req: wsgi.Request) -> float:
    """``?stale_after=SECONDS`` (a number, 0 or more); default ``[api] stale_report_after``."""
    value = req.GET.get("stale_after")
    if value is None:
        return float(req.app.conf.api.stale_report_after)
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= _MAX_STALE_AFTER:  # also NaN
        raise wsgi.ApiError(
            400,
            f"stale_after must be a number of seconds from 0 to {_MAX_STALE_AFTER:.0f}, "
            f"not {value!r}.",
            "exosuit.query.stale_after",
        )
    return seconds


def _serialize(summary: db.Summary) -> JSONObject:
    handles, in_use = summary.attach_handles, summary.attach_handles_in_use
    return {
        "hosts": {
            "total": summary.hosts,
            "reporting": summary.hosts - summary.stale_hosts,
            "stale": summary.stale_hosts,
        },
        "devices": {
            "total": sum(summary.devices_by_type.values()),
            "by_type": summary.devices_by_type,
            "by_status": summary.devices_by_status,
            "by_presence": summary.devices_by_presence,
        },
        "attach_handles": {"total": handles, "in_use": in_use, "free": handles - in_use},
        "arqs": {
            "total": sum(summary.arqs_by_state.values()),
            "by_state": summary.arqs_by_state,
        },
        "jobs": {"by_state": summary.jobs_by_state},
    }


def get_summary(req: wsgi.Request) -> wsgi.Response:
    """200 with the counts; a host is stale when its last report is older than
    ``stale_after`` seconds."""
    req.app.authorize(req, policies.GET)
    stale_after = _stale_after(req)
    summary = req.app.db.read(db.summarize, stale_after=stale_after)
    return wsgi.json_response(200, _serialize(summary))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Summary": obj(
        {
            "hosts": obj({"total": INT, "reporting": INT, "stale": INT}),
            "devices": obj(
                {"total": INT, "by_type": COUNTS, "by_status": COUNTS, "by_presence": COUNTS}
            ),
            "attach_handles": obj({"total": INT, "in_use": INT, "free": INT}),
            "arqs": obj({"total": INT, "by_state": COUNTS}),
            "jobs": obj({"by_state": COUNTS}),
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    get_summary: Operation(
        "The fleet in numbers",
        query=(
            query(
                "stale_after",
                {"type": "number", "minimum": 0, "maximum": 1e9},
                "Seconds after which a host is stale.",
            ),
        ),
        returns=ref("Summary"),
    ),
}
