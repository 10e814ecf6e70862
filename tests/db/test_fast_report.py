"""The fast path of an unchanged agent report (issue 16; exosuit/api/deploy.py,
``UnchangedReports``), on SQLite, PostgreSQL and MariaDB: a report the cache of host
reports answers gets the same status, headers and body as through the application,
is counted in the latency histogram, and anything else (a refused caller, a malformed
body, a report that writes or needs the desired state) goes to the application, which
answers as always."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from exosuit.api.deploy import NoAuthMiddleware, RequestIdMiddleware, loadapp
from exosuit.db import desired_state, models
from tests.conftest import PERSONAS, ApiClient
from tests.db.test_unchanged_reports import DIRECT_READ, statements
from tests.helpers.inventory import fpga, snapshot

HOST = "fast-host"
PATH = f"/agent/v1/hosts/{HOST}/inventory"
HEADER = "Exosuit-Desired-Generation"


@pytest.fixture
def quiet(api):
    """The host's snapshot, applied, and one hash-only report answered (so that this
    process keeps the host): the hash-only report."""
    body = snapshot(HOST, [fpga("0000:0c:00.0")])
    assert api.put(PATH, body, headers={HEADER: "0"}).status_code == 200
    report = {"schema_version": 1, "hash": body["hash"], "hostname": HOST}
    assert "desired_state" not in api.put(PATH, report, headers={HEADER: "0"}).json
    return report


def _answered(api) -> int:
    return api.app.unchanged_reports.answered


def _full_path(api) -> ApiClient:
    """The same application without the fast path (its middleware left out)."""
    app = api.app.application
    pipeline = RequestIdMiddleware(NoAuthMiddleware(app))
    return ApiClient(pipeline, api.headers)


def _shown(response) -> tuple:
    headers = [(k, v) for k, v in response.headerlist if k != "x-openstack-request-id"]
    return response.status, headers, response.body


@pytest.mark.parametrize("usage", [False, True])
def test_a_kept_report_is_answered_as_the_application_answers_it(api, quiet, usage):
    if usage:
        quiet = {**quiet, "usage": {"pci-0000:0c:00.0": {"errors_total": 1}}}
    before = _answered(api)
    fast = api.put(PATH, quiet, headers={HEADER: "0"})
    assert _answered(api) == before + 1
    full = _full_path(api).put(PATH, quiet, headers={HEADER: "0"})
    assert _answered(api) == before + 1
    assert _shown(fast) == _shown(full)
    assert fast.json == {"hostname": HOST, "hash": quiet["hash"], "changed": False}
    assert fast.headers["x-openstack-request-id"].startswith("req-")


def test_its_latency_is_counted_under_the_route(api, quiet):
    latency = api.app.application.latency
    key = ("/agent/v1/hosts/{hostname}/inventory", "PUT", "2xx")
    before = latency.counts().get(key, 0.0)
    assert api.put(PATH, quiet, headers={HEADER: "0"}).status_code == 200
    assert latency.counts().get(key, 0.0) == before + 1


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"hostname": "another-host"}, 400),  # the body names another host
        ({"schema_version": 2}, 400),
        ({"observed_generation": "1"}, 400),  # not a generation: the schema says so
        ({"hash": "sha256:" + "0" * 64}, 412),  # not the host's hash
        ({"observed_generation": 0}, 200),  # news: written by the application
    ],
)
def test_other_reports_go_to_the_application(api, quiet, change, status):
    before = _answered(api)
    body = {**quiet, **change}
    response = api.put(PATH, body, headers={HEADER: "0"})
    assert response.status_code == status, response.text
    assert _answered(api) == before
    assert _shown(response)[0] == _full_path(api).put(PATH, body, headers={HEADER: "0"}).status


@pytest.mark.parametrize(
    "body",
    [b'{"schema_version": 1, "hash": NaN}', b"[1", b'{"schema_version": 1, "hash": "\\u0000"}'],
)
def test_a_malformed_body_gets_the_applications_400(api, quiet, body):
    response = api.put(PATH, body, headers={HEADER: "0"})
    assert response.status_code == 400, response.text
    assert _shown(response) == _shown(_full_path(api).put(PATH, body, headers={HEADER: "0"}))


def test_an_agent_that_does_not_hold_the_state_gets_it(api, database, quiet):
    database.write(desired_state.bump, [HOST])
    before = _answered(api)
    answer = api.put(PATH, quiet, headers={HEADER: "0"}).json
    assert answer["desired_state"]["generation"] == 1
    assert _answered(api) == before
    assert "desired_state" not in api.put(PATH, quiet, headers={HEADER: "1"}).json
    assert _answered(api) == before + 1


@pytest.mark.parametrize("persona", ["member", "reader"])
def test_a_caller_without_the_agent_role_is_refused_as_before(api, quiet, persona):
    before = _answered(api)
    caller = api.as_(PERSONAS[persona])
    response = caller.put(PATH, quiet, headers={HEADER: "0"})
    assert response.status_code == 403, response.text
    assert _answered(api) == before
    assert _shown(response) == _shown(_full_path(caller).put(PATH, quiet, headers={HEADER: "0"}))


def test_the_service_persona_is_answered_fast(api, quiet):
    before = _answered(api)
    caller = api.as_(PERSONAS["service"])
    assert caller.put(PATH, quiet, headers={HEADER: "0"}).status_code == 200
    assert _answered(api) == before + 1


@pytest.mark.parametrize(
    "path", [PATH + "/", PATH + "?x=1", f"/agent/v1/hosts/{'h' * 256}/inventory"]
)
def test_other_paths_go_to_the_application(api, quiet, path):
    before = _answered(api)
    response = api.put(path, quiet, headers={HEADER: "0"})
    assert _answered(api) == before
    assert response.status == _full_path(api).put(path, quiet, headers={HEADER: "0"}).status


def test_a_malformed_identity_header_gets_the_applications_400(api, quiet):
    caller = api.as_({**PERSONAS["service"], "X-User-Id": "u" * 300})
    response = caller.put(PATH, quiet, headers={HEADER: "0"})
    assert response.status_code == 400, response.text
    assert _shown(response) == _shown(_full_path(caller).put(PATH, quiet, headers={HEADER: "0"}))


def test_after_the_report_time_moved_the_next_report_is_answered_fast(api, database, quiet):
    old = dt.datetime(2026, 1, 1)  # older than the resolution: the next report moves it
    database.write(lambda conn: conn.execute(sa.update(models.hosts).values(last_report_at=old)))
    fresh = ApiClient(loadapp(api.app.application.conf, database))  # a cache of its own
    report = {**quiet, "observed_generation": 0}
    with statements(database, fresh) as seen:
        answer = fresh.put(PATH, report, headers={HEADER: "0"}).json
    assert any(s.lstrip().upper().startswith("UPDATE") for s in seen), seen
    assert answer["desired_state"]["generation"] == 0  # it wrote: the state comes along
    before = _answered(fresh)
    with statements(database, fresh) as seen:
        answer = fresh.put(PATH, report, headers={HEADER: "0"}).json
    assert answer == {"hostname": HOST, "hash": quiet["hash"], "changed": False}
    assert _answered(fresh) == before + 1
    assert seen == [DIRECT_READ] or (  # the counter only, never the host's row
        len(seen) == 1 and "metric_counters" in seen[0] and "hosts" not in seen[0]
    ), seen
