"""/metrics: Prometheus metrics, for every process (see exosuit/metrics.py; every metric is
listed in doc/metrics.md)."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import webob

from exosuit import metrics as db_metrics
from exosuit.api import wsgi
from exosuit.api.describe import Handler, Operation, Schema
from exosuit.api.handlers import agent, deployables
from exosuit.db import Connection, fleet_metrics
from exosuit.db.fleet_metrics import DEVICE_LABELS, HOLDER_LABELS, STATE_LABELS
from exosuit.metrics import Families, Family
from exosuit.placement import metrics as placement_metrics

# The per-device families of fixed name; a driver's figure of one of these names (one of
# ``exosuit_device_<figure>``) is left out rather than mixed into them.
INFO = "exosuit_device_info"
HANDLES = "exosuit_device_attach_handles"
HOLDER = "exosuit_device_holder"


def _device_families(conn: Connection, stale_after: float) -> Iterator[Family]:
    found = fleet_metrics.read_devices(conn, stale_after=stale_after)
    yield Family(
        INFO,
        "gauge",
        "A device (always 1) with its driver, status (enabled, maintaining), activation "
        "(inactive, activating, ready, deactivating) and presence (present, lost).",
        DEVICE_LABELS + STATE_LABELS,
        found.info,
    )
    yield Family(
        HANDLES,
        "gauge",
        "A device's attach handles, by state: free, or in_use (held by an ARQ).",
        DEVICE_LABELS + ("state",),
        found.handles,
    )
    yield Family(
        HOLDER,
        "gauge",
        "Who holds one of a device's attach handles (1 per held handle): the ARQ, and the "
        "instance (Nova) or claim (standalone) and project behind it.",
        DEVICE_LABELS + HOLDER_LABELS,
        found.holders,
    )
    fixed = (INFO, HANDLES, HOLDER)
    for figure in sorted(found.usage):
        if "exosuit_device_" + figure not in fixed:
            yield Family(
                "exosuit_device_" + figure,
                "gauge",
                "A device's live figure as its driver read it (doc/drivers.md, Usage), kept "
                "with the host's report at most once per [api] report_age_resolution.",
                DEVICE_LABELS,
                found.usage[figure],
            )


def _service_families(conn: Connection) -> Iterator[Family]:
    queue = fleet_metrics.job_queue(conn)
    yield Family(
        "exosuit_jobs",
        "gauge",
        "Jobs in the job table, by kind and state (pending, running, succeeded, failed).",
        ("kind", "state"),
        queue.by_state,
    )
    yield Family(
        "exosuit_job_queue_depth",
        "gauge",
        "Pending jobs due now (a conductor may take them), by kind.",
        ("kind",),
        queue.due,
    )
    yield Family(
        "exosuit_job_queue_oldest_age_seconds",
        "gauge",
        "How long the oldest pending job due now has waited past its due time, by kind "
        "(0: none waits).",
        ("kind",),
        queue.oldest_due,
    )
    yield Family(
        "exosuit_placement_sync_lag_seconds",
        "gauge",
        "Age of the oldest change Placement has not received yet: the oldest pending or "
        "running Placement sync (0: none).",
        (),
        fleet_metrics.sync_lag(conn),
    )
    yield Family(
        "exosuit_host_report_age_seconds",
        "gauge",
        "Seconds since each host's agent last reported (kept at most once per [api] "
        "report_age_resolution for an unchanged report).",
        ("hostname",),
        fleet_metrics.report_ages(conn),
    )


# What /metrics exposes: the declarations of every module that counts something, the
# service's gauges and the devices' (with their stale-usage cut-off).
EXPOSED = (
    *placement_metrics.ALL,
    deployables.CHANGES,
    agent.CHANGES,
    Families(_service_families),
)


def devices(stale_after: float) -> Families:
    """The per-device families, with the figures of hosts that reported within
    ``stale_after`` seconds."""
    return Families(functools.partial(_device_families, stale_after=stale_after))


def metrics(req: wsgi.Request) -> wsgi.Response:
    """200, Prometheus text format (OpenMetrics when Accept asks for it; gzip when
    Accept-Encoding allows it), streamed: the counters every process keeps in the
    database, gauges read from it (the devices', the job queue's, Placement's, the
    hosts'), and this process's request latency (every worker's, in multiprocess mode).
    A public route ([api] public_routes)."""
    declared = (*EXPOSED, devices(req.app.conf.api.stale_report_after))
    found = db_metrics.stream(
        req.app.db,
        declared,
        req.headers.get("Accept", ""),
        accept_encoding=req.headers.get("Accept-Encoding", ""),
        latency=req.app.latency,
    )
    headers = [("Content-Type", found.content_type), ("Vary", "Accept, Accept-Encoding")]
    if found.encoding:
        headers.append(("Content-Encoding", found.encoding))
    return webob.Response(status=200, headerlist=headers, app_iter=found.chunks)


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {}


OPERATIONS: dict[Handler, Operation] = {
    metrics: Operation("Prometheus metrics", media="text/plain"),
}
