"""/v2/devices/{uuid}/usage_history and /v2/allocation_history (microversion 2.11): a
device's usage figures and the attach handles held and free by device model over the
last ``window`` seconds, as the console draws them (doc/dashboard.md, "Charts").

They answer from the history the conductor records in the database
(exosuit/db/usage_history.py), or, when ``[dashboard] prometheus_url`` is set, from that
Prometheus (exosuit/api/prometheus.py): ``source`` says which.
"""

from __future__ import annotations

import datetime as dt
import time

from exosuit import exceptions
from exosuit.api import wsgi
from exosuit.api.describe import INT, STR, TIME, Handler, Operation, Schema, obj, query, ref
from exosuit.api.policies import usage_history as policies
from exosuit.api.prometheus import MAX_POINTS, Prometheus, PrometheusError
from exosuit.conf import DashboardSettings
from exosuit.db import devices as devices_db
from exosuit.db import models
from exosuit.db import usage_history as db
from exosuit.schemas import JSONObject

# The window when none is asked (the console's "last hours"), and the longest one.
DEFAULT_WINDOW = 21600
MIN_WINDOW = 60
MAX_WINDOW = 366 * 86400
DATABASE, PROMETHEUS = "database", "prometheus"


def _window(req: wsgi.Request) -> int:
    """``?window=SECONDS``: a whole number from MIN_WINDOW to MAX_WINDOW."""
    value = req.GET.get("window")
    if value is None:
        return DEFAULT_WINDOW
    if not (value.isascii() and value.isdigit() and MIN_WINDOW <= int(value) <= MAX_WINDOW):
        raise wsgi.ApiError(
            400,
            f"window must be a whole number of seconds from {MIN_WINDOW} to {MAX_WINDOW}, "
            f"not {value!r}.",
            "exosuit.query.window",
        )
    return int(value)


def _prometheus(req: wsgi.Request) -> tuple[Prometheus | None, int]:
    """The Prometheus to ask (None: the database) and the step of a window's points."""
    settings = DashboardSettings.from_conf(req.app.conf)
    if not settings.prometheus_url:
        return None, settings.history_resolution
    return Prometheus(settings.prometheus_url, settings.prometheus_timeout), max(
        settings.history_resolution, 15
    )


def _unavailable(error: PrometheusError) -> wsgi.ApiError:
    return wsgi.ApiError(503, str(error), "exosuit.prometheus.unavailable")


def _at(value: dt.datetime) -> str | None:
    return wsgi.format_time(value)


def get_usage_history(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"device_uuid", "source", "window", "figures": {figure: [{"at", "value"}]}}``:
    the device's figures (``utilization_percent``, ``memory_used_bytes`` …) over the last
    ``window`` seconds, oldest first ({} when none was recorded). 404; 503
    ``exosuit.prometheus.unavailable`` when the Prometheus configured does not answer."""
    req.app.authorize(req, policies.USAGE)
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):  # no device has such an id
        raise exceptions.DeviceNotFound(uuid=uuid)
    uuid = uuid.lower()
    req.app.db.read(devices_db.get, uuid)  # 404 for an unknown device
    window = _window(req)
    prometheus, step = _prometheus(req)
    if prometheus is None:
        since = models.utcnow() - dt.timedelta(seconds=window)
        figures = req.app.db.read(db.device_history, uuid, since)
    else:
        try:
            figures = prometheus.device_usage(
                uuid, window=window, step=max(step, -(-window // MAX_POINTS)), now=time.time()
            )
        except PrometheusError as error:
            raise _unavailable(error) from error
    body: JSONObject = {
        "device_uuid": uuid,
        "source": DATABASE if prometheus is None else PROMETHEUS,
        "window": window,
        "figures": {
            name: [{"at": _at(at), "value": value} for at, value in points]
            for name, points in figures.items()
        },
    }
    return wsgi.json_response(200, body)


def get_allocation_history(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"source", "window", "models": [{"type", "vendor", "model", "points":
    [{"at", "held", "free"}]}]}``: each device model's attach handles held and free over
    the last ``window`` seconds, oldest first. 503 ``exosuit.prometheus.unavailable``
    when the Prometheus configured does not answer."""
    req.app.authorize(req, policies.ALLOCATION)
    window = _window(req)
    prometheus, step = _prometheus(req)
    if prometheus is None:
        since = models.utcnow() - dt.timedelta(seconds=window)
        found = req.app.db.read(db.allocation_history, since)
    else:
        try:
            found = prometheus.allocation(
                window=window, step=max(step, -(-window // MAX_POINTS)), now=time.time()
            )
        except PrometheusError as error:
            raise _unavailable(error) from error
    return wsgi.json_response(200, _allocation(found, window, prometheus is None))


def _allocation(found: list[db.ModelHistory], window: int, from_database: bool) -> JSONObject:
    return {
        "source": DATABASE if from_database else PROMETHEUS,
        "window": window,
        "models": [
            {
                "type": m.type,
                "vendor": m.vendor,
                "model": m.model,
                "points": [
                    {"at": _at(at), "held": held, "free": free} for at, held, free in m.points
                ],
            }
            for m in found
        ],
    }


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

NUMBER: Schema = {"type": "number"}
SOURCE: Schema = {"enum": [DATABASE, PROMETHEUS], "description": "where the points come from"}

SHAPES: dict[str, Schema] = {
    "UsageHistory": obj(
        {
            "device_uuid": STR,
            "source": SOURCE,
            "window": INT,
            "figures": {
                "type": "object",
                "description": "figure (doc/drivers.md, Usage figures) → its points",
                "additionalProperties": {"type": "array", "items": ref("UsagePoint")},
            },
        }
    ),
    "UsagePoint": obj({"at": TIME, "value": NUMBER}),
    "AllocationHistory": obj(
        {
            "source": SOURCE,
            "window": INT,
            "models": {"type": "array", "items": ref("ModelAllocation")},
        }
    ),
    "ModelAllocation": obj(
        {
            "type": STR,
            "vendor": STR,
            "model": STR,
            "points": {"type": "array", "items": ref("AllocationPoint")},
        }
    ),
    "AllocationPoint": obj({"at": TIME, "held": NUMBER, "free": NUMBER}),
}

_WINDOW = query(
    "window",
    {"type": "integer", "minimum": MIN_WINDOW, "maximum": MAX_WINDOW},
    f"Seconds back from now (default {DEFAULT_WINDOW}).",
)

OPERATIONS: dict[Handler, Operation] = {
    get_usage_history: Operation(
        "A device's usage over time",
        errors=(503,),
        query=(_WINDOW,),
        returns=ref("UsageHistory"),
    ),
    get_allocation_history: Operation(
        "Attach handles held and free by device model over time",
        errors=(503,),
        query=(_WINDOW,),
        returns=ref("AllocationHistory"),
    ),
}
