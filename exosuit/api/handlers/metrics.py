"""/metrics: Prometheus metrics, for every process (see exosuit/metrics.py; every metric is
listed in doc/metrics.md).

Two audiences (doc/metrics.md, "Who sees what"). Anyone (a public route) gets the fleet's
series: counts by type, model, state and health, jobs, Placement, request latency; none
names a host, a PCI address, a device, an ARQ, an instance, a claim or a project. A caller
who offers credentials is authenticated (exosuit/api/deploy.py, ``PublicRoutes``) and, if
``exosuit:metrics:detail`` allows it (admin by default), gets the per-device series too.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Iterator

import webob
from oslo_policy import policy

from exosuit import metrics as db_metrics
from exosuit.api import wsgi
from exosuit.api.describe import Handler, Operation, Schema
from exosuit.api.handlers import agent, deployables
from exosuit.api.policies import metrics as policies
from exosuit.db import Connection, fleet_metrics
from exosuit.db.fleet_metrics import DEVICE_LABELS, HOLDER_LABELS, STATE_LABELS, DeviceSeries
from exosuit.metrics import Families, Family
from exosuit.placement import metrics as placement_metrics

# The per-device families of fixed name; a driver's figure of one of these names (one of
# ``exosuit_device_<figure>``) is left out rather than mixed into them.
INFO = "exosuit_device_info"
HANDLES = "exosuit_device_attach_handles"
HOLDER = "exosuit_device_holder"

# What the fleet's series count devices by: the device labels that name no host, place or
# device (``type``, ``vendor``, ``model``) and every state label.
_KIND = ("type", "vendor", "model")
_KIND_AT = tuple(DEVICE_LABELS.index(n) for n in _KIND)
_COUNTED = _KIND + STATE_LABELS


def _fleet_families(
    found: DeviceSeries, ages: fleet_metrics.Series, stale_after: float
) -> Iterator[Family]:
    """The public series: devices and attach handles counted by kind and state, hosts
    by whether they report. No label names a host, a device, a holder or a project."""
    devices: collections.Counter[tuple[str, ...]] = collections.Counter()
    for labels, _ in found.info:
        devices[tuple(labels[i] for i in _KIND_AT) + labels[len(DEVICE_LABELS) :]] += 1
    yield Family(
        "exosuit_devices",
        "gauge",
        "Devices, by type, vendor, model, driver, status, activation, presence, health and "
        "whether they are offered (the fleet's count of exosuit_device_info).",
        _COUNTED,
        [(labels, float(n)) for labels, n in sorted(devices.items())],
    )
    handles: collections.Counter[tuple[str, ...]] = collections.Counter()
    for labels, value in found.handles:
        handles[tuple(labels[i] for i in _KIND_AT) + labels[len(DEVICE_LABELS) :]] += int(value)
    yield Family(
        "exosuit_attach_handles",
        "gauge",
        "Attach handles, by their device's type, vendor and model and by state: free, or "
        "in_use (held by an ARQ).",
        (*_KIND, "state"),
        [(labels, float(n)) for labels, n in sorted(handles.items())],
    )
    reporting = sum(1 for _, age in ages if age <= stale_after)
    yield Family(
        "exosuit_hosts",
        "gauge",
        "Hosts whose agent has reported, by state: reporting (within [api] "
        "stale_report_after) or stale.",
        ("state",),
        [(("reporting",), float(reporting)), (("stale",), float(len(ages) - reporting))],
    )


def _device_families(found: DeviceSeries) -> Iterator[Family]:
    """The per-device series (an admin's: they name hosts, PCI addresses and holders)."""
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


def _fleet_and_devices(conn: Connection, stale_after: float, detail: bool) -> Iterator[Family]:
    found = fleet_metrics.read_devices(conn, stale_after=stale_after)
    ages = fleet_metrics.report_ages(conn)
    yield from _fleet_families(found, ages, stale_after)
    if detail:
        yield from _device_families(found)
        yield Family(
            "exosuit_host_report_age_seconds",
            "gauge",
            "Seconds since each host's agent last reported (kept at most once per [api] "
            "report_age_resolution for an unchanged report).",
            ("hostname",),
            ages,
        )


# What /metrics exposes to anyone: the declarations of every module that counts
# something and the service's gauges; ``devices`` adds the fleet's counts and, for an
# admin, the per-device series.
EXPOSED = (
    *placement_metrics.ALL,
    deployables.CHANGES,
    agent.CHANGES,
    Families(_service_families),
)


def devices(stale_after: float, detail: bool = True) -> Families:
    """The fleet's counts and, when ``detail``, the per-device families (with the
    figures of hosts that reported within ``stale_after`` seconds) and each host's
    report age."""
    return Families(functools.partial(_fleet_and_devices, stale_after=stale_after, detail=detail))


# The WSGI environ key PublicRoutes sets when it answered a public route without
# authenticating anyone (exosuit/api/deploy.py).
ANONYMOUS = "exosuit.anonymous"


def sees_detail(req: wsgi.Request) -> bool:
    """Whether the caller gets the per-device series: authenticated (not the anonymous
    side of a public route) and allowed by ``exosuit:metrics:detail``."""
    if req.environ.get(ANONYMOUS):
        return False
    try:
        req.app.authorize(req, policies.DETAIL)
    except (policy.PolicyNotAuthorized, policy.InvalidScope, wsgi.ApiError):
        return False
    return True


def metrics(req: wsgi.Request) -> wsgi.Response:
    """200, Prometheus text format (OpenMetrics when Accept asks for it; gzip when
    Accept-Encoding allows it), streamed: the counters every process keeps in the
    database, gauges read from it (the devices', the job queue's, Placement's, the
    hosts'), and this process's request latency (every worker's, in multiprocess mode).
    A public route ([api] public_routes): the per-device series only to a caller who
    authenticated and whom ``exosuit:metrics:detail`` allows; the header
    ``Exosuit-Metrics`` says which answer this is (``fleet`` or ``detail``)."""
    detail = sees_detail(req)
    declared = (*EXPOSED, devices(req.app.conf.api.stale_report_after, detail))
    found = db_metrics.stream(
        req.app.db,
        declared,
        req.headers.get("Accept", ""),
        accept_encoding=req.headers.get("Accept-Encoding", ""),
        latency=req.app.latency,
    )
    headers = [
        ("Content-Type", found.content_type),
        ("Vary", "Accept, Accept-Encoding, X-Auth-Token, Authorization"),
        ("Exosuit-Metrics", "detail" if detail else "fleet"),
    ]
    if found.encoding:
        headers.append(("Content-Encoding", found.encoding))
    return webob.Response(status=200, headerlist=headers, app_iter=found.chunks)


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {}


OPERATIONS: dict[Handler, Operation] = {
    metrics: Operation("Prometheus metrics", media="text/plain"),
}
