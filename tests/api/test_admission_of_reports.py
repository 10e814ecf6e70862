"""Admission control through the API: a changed inventory snapshot that finds every
apply slot taken gets 429 with Retry-After in the error envelope, an unchanged report
never waits, and the agent's reporter waits as told."""

from __future__ import annotations

import json

import pytest

from exosuit.agent.clock import FakeClock
from exosuit.agent.reporter import Reporter
from exosuit.agent.transport import WsgiSession
from exosuit.api.admission import RETRY_AFTER_MAX, RETRY_AFTER_MIN
from exosuit.api.deploy import loadapp
from tests.conftest import ApiClient, make_test_conf
from tests.helpers.inventory import fpga, snapshot

HOST = "busy-host"
URL = f"/agent/v1/hosts/{HOST}/inventory"


@pytest.fixture
def app(sqlite_database):
    # One apply slot and no wait for it: the slot the test holds refuses the next at once.
    conf = make_test_conf(**{"api.inventory_concurrency": 1, "api.inventory_wait": 0})
    return loadapp(conf, sqlite_database)


def hostnames(api: ApiClient) -> list[str]:
    devices = api.get("/v2/devices").json["devices"]
    return sorted({d["hostname"] for d in devices})


def test_a_changed_snapshot_gets_429_while_every_slot_is_taken(app):
    api = ApiClient(app)
    first = snapshot(HOST, [fpga("0000:0c:00.0")])
    assert api.put(URL, first).status_code == 200
    changed = snapshot(HOST, [fpga("0000:0c:00.0"), fpga("0000:0d:00.0")])

    with app.application.inventory_admission.slot():  # another host's snapshot being applied
        busy = api.put(URL, changed)
        # The same snapshot again needs no slot: it is not even validated.
        unchanged = api.put(URL, first)

    assert busy.status_code == 429, busy.text
    assert RETRY_AFTER_MIN <= int(busy.headers["Retry-After"]) <= RETRY_AFTER_MAX
    error = json.loads(busy.json["error_message"])
    assert error["code"] == "exosuit.inventory.busy"
    assert "retry later" in error["faultstring"]
    assert unchanged.status_code == 200, unchanged.text
    assert unchanged.json["changed"] is False
    assert len(api.get("/v2/devices").json["devices"]) == 1  # the refused one wrote nothing

    again = api.put(URL, changed)  # the slot is free again
    assert again.status_code == 200, again.text
    assert again.json["changed"] is True
    assert len(api.get("/v2/devices").json["devices"]) == 2


def test_the_reporter_reads_the_429_as_a_retry_after_the_given_seconds(app):
    reporter = Reporter(WsgiSession(app), "http://exosuit.local", HOST, clock=FakeClock())
    body = snapshot(HOST, [fpga("0000:0c:00.0")])
    with app.application.inventory_admission.slot():
        outcome = reporter.report(body)
    assert outcome.kind == "retry"
    assert outcome.retry_after in {float(s) for s in range(RETRY_AFTER_MIN, RETRY_AFTER_MAX + 1)}
    assert outcome.detail.startswith("429 ")
    assert reporter.report(body).kind == "ok"
    assert hostnames(ApiClient(app)) == [HOST]
