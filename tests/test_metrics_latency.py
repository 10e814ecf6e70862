"""The API's request latency histogram (in-process, SQLite): one series per route
template, method and status class, never the raw path; the body's end is what is
timed; an unknown method or path folds into ``other`` / ``unmatched``."""

from __future__ import annotations

import uuid

import pytest
import webob

from exosuit.api.deploy import LatencyMiddleware
from exosuit.metrics import LATENCY_BUCKETS, LATENCY_NAME
from tests.conftest import ApiClient
from tests.helpers.metrics import scrape


def _count(app, route: str, method: str, status: str) -> float:
    return app.latency.counts().get((route, method, status), 0.0)


def test_requests_are_counted_by_route_template_method_and_status_class(sqlite_api):
    app = sqlite_api.app.application
    for _ in range(3):
        assert sqlite_api.get(f"/v2/devices/{uuid.uuid4()}").status_code == 404
    assert sqlite_api.get("/v2/devices").status_code == 200
    assert sqlite_api.get("/devices").status_code == 200  # Cyborg's path without /v2
    assert sqlite_api.request("BREW", "/v2/devices").status_code == 405
    assert sqlite_api.get("/no/such/thing").status_code == 404
    assert _count(app, "/v2/devices/{uuid}", "GET", "4xx") == 3
    assert _count(app, "/v2/devices", "GET", "2xx") == 2
    assert _count(app, "/v2/devices", "other", "4xx") == 1
    assert _count(app, "unmatched", "GET", "4xx") == 1
    found = scrape(sqlite_api)
    assert found.types[LATENCY_NAME] == "histogram"
    routes = {s.labels["route"] for s in found.of(LATENCY_NAME + "_count")}
    assert "/v2/devices/{uuid}" in routes and not any("-" in r for r in routes)
    buckets = found.of(LATENCY_NAME + "_bucket", route="/v2/devices/{uuid}", status="4xx")
    assert len(buckets) == len(LATENCY_BUCKETS) + 1  # and +Inf
    (inf,) = [b for b in buckets if b.labels["le"] == "+Inf"]
    assert inf.value == 3


def test_a_streamed_body_is_timed_when_the_server_closes_it(sqlite_api):
    app = sqlite_api.app.application
    before = _count(app, "/metrics", "GET", "2xx")
    environ = webob.Request.blank("/metrics").environ
    statuses = []
    body = sqlite_api.app(environ, lambda status, headers, exc_info=None: statuses.append(status))
    chunks = list(body)
    assert statuses == ["200 OK"] and b"".join(chunks).startswith(b"# HELP")
    assert _count(app, "/metrics", "GET", "2xx") == before  # not yet: not closed
    body.close()
    assert _count(app, "/metrics", "GET", "2xx") == before + 1


def test_a_request_refused_before_routing_is_named_by_its_path(sqlite_api):
    """keystonemiddleware's 401 comes before the application routes: the middleware
    finds the route itself (and ``unmatched`` for a path that names none)."""
    application = sqlite_api.app.application

    def refuse(environ, start_response):
        start_response("401 Unauthorized", [("Content-Type", "text/plain")])
        return [b"no"]

    refused = ApiClient(LatencyMiddleware(refuse, application))
    refused.get(f"/v2/accelerator_requests/{uuid.uuid4()}")
    refused.get("/accelerator_requests")
    refused.get("/nothing/here")
    assert _count(application, "/v2/accelerator_requests/{uuid}", "GET", "4xx") == 1
    assert _count(application, "/v2/accelerator_requests", "GET", "4xx") == 1
    assert _count(application, "unmatched", "GET", "4xx") == 1


def test_an_application_that_raises_is_counted_as_5xx(sqlite_api):
    application = sqlite_api.app.application

    def broken(environ, start_response):
        raise RuntimeError("boom")

    middleware = LatencyMiddleware(broken, application)
    environ = webob.Request.blank("/v2/devices").environ
    with pytest.raises(RuntimeError):
        middleware(environ, lambda *a: None)
    assert _count(application, "/v2/devices", "GET", "5xx") == 1
