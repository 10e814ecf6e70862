"""/metrics: Prometheus metrics, for every process (see exosuit/metrics.py)."""

from __future__ import annotations

import webob

from exosuit import metrics as db_metrics
from exosuit.api import wsgi
from exosuit.placement import metrics as _placement_metrics  # noqa: F401 (declares them)


def metrics(req: wsgi.Request):
    """200, Prometheus text format (OpenMetrics when Accept asks for it): the counters
    every process keeps in the database (the conductor's Placement requests, syncs,
    repairs …) and gauges read from it. A public route ([api] public_routes)."""
    body, content_type = db_metrics.render(req.app.db, req.headers.get("Accept", ""))
    return webob.Response(body=body, status=200, headerlist=[
        ("Content-Type", content_type), ("Content-Length", str(len(body)))])
