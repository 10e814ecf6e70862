"""The agent loop against a real API over HTTP: cheap unchanged reports, resync from the
cache, Retry-After, backoff while unreachable, the removal grace, the first report's
jitter, the interval and uevents.

Every agent here waits on a FakeClock: the waits take no real time, and the tests read
which waits the agent asked for.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading

import pytest
from keystoneauth1 import session as ks_session

from exosuit.agent.cache import AgentCache
from exosuit.agent.clock import FakeClock
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import COALESCE_SECONDS, Agent
from exosuit.api.deploy import loadapp
from tests.helpers.inventory import fpga
from tests.helpers.live import serve_wsgi

HOST = "agent-host-1"


class Recorder:
    """WSGI middleware keeping the bodies of agent reports (and able to answer 429), and
    the time on ``clock`` of each."""

    def __init__(self, app, busy: int = 0, clock: FakeClock | None = None) -> None:
        self.app = app
        self.bodies: list[dict] = []
        self.times: list[float] = []
        self.busy = busy
        self.clock = clock

    def __call__(self, environ, start_response):
        if environ["PATH_INFO"].startswith("/agent/"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            raw = environ["wsgi.input"].read(length)
            import io

            environ["wsgi.input"] = io.BytesIO(raw)
            self.bodies.append(json.loads(raw))
            if self.clock is not None:
                self.times.append(self.clock.now())
            if self.busy > 0:
                self.busy -= 1
                start_response(
                    "429 Too Many Requests", [("Retry-After", "1"), ("Content-Type", "text/plain")]
                )
                return [b"busy"]
        return self.app(environ, start_response)


class Devices:
    """A driver whose devices the test changes."""

    name = "static"

    def __init__(self, devices) -> None:
        self.devices = list(devices)
        self.discoveries = 0

    def discover(self):
        self.discoveries += 1
        return list(self.devices)


def make_agent(url, tmp_path, driver, **kw) -> Agent:
    reporter = Reporter(ks_session.Session(), url, HOST, timeout=5)
    kw.setdefault("jitter", 0)
    kw.setdefault("clock", FakeClock())
    kw.setdefault("rng", random.Random(8))
    return Agent(HOST, [driver], reporter, AgentCache(str(tmp_path / "cache")), **kw)


@pytest.fixture
def app(conf, sqlite_database):
    return loadapp(conf, sqlite_database)


def devices_of(api, version="2.4"):
    return api.get("/v2/devices", version=version).json["devices"]


def test_unchanged_reports_send_only_the_hash(app, sqlite_api, tmp_path):
    recorder = Recorder(app)
    driver = Devices([fpga("0000:0c:00.0"), fpga("0000:0d:00.0")])
    with serve_wsgi(recorder) as url:
        agent = make_agent(url, tmp_path, driver)
        assert agent.deliver(agent.snapshot()).kind == "ok"
        assert agent.deliver(agent.snapshot()).kind == "ok"
        # A restarted agent resumes from its cache: still only the hash.
        again = make_agent(url, tmp_path, driver)
        assert again.deliver(again.snapshot()).kind == "ok"
    assert [("devices" in b) for b in recorder.bodies] == [True, False, False]
    assert len(devices_of(sqlite_api)) == 2


def test_resends_the_whole_snapshot_when_the_api_lost_it(
    conf, db_servers, tmp_path_factory, tmp_path
):
    from exosuit.db.api import Database
    from tests.conftest import ApiClient, new_database_url

    driver = Devices([fpga("0000:0c:00.0")])
    first = Database(new_database_url("sqlite", db_servers, tmp_path_factory))
    with serve_wsgi(loadapp(conf, first)) as url:
        agent = make_agent(url, tmp_path, driver)
        assert agent.deliver(agent.snapshot()).kind == "ok"
    # The control plane comes back with an empty database (restored from an old backup).
    second = Database(new_database_url("sqlite", db_servers, tmp_path_factory))
    recorder = Recorder(loadapp(conf, second))
    with serve_wsgi(recorder) as url:
        agent = make_agent(url, tmp_path, driver)
        assert agent.deliver(agent.snapshot()).kind == "ok"
    assert [("devices" in b) for b in recorder.bodies] == [False, True]
    api = ApiClient(recorder.app)
    assert len(devices_of(api)) == 1
    # Applying the same snapshot again produced no duplicate.
    assert len(api.get("/v2/deployables").json["deployables"]) == 1


def test_honours_retry_after(app, tmp_path):
    recorder = Recorder(app, busy=1)
    with serve_wsgi(recorder) as url:
        agent = make_agent(url, tmp_path, Devices([fpga("0000:0c:00.0")]))
        outcome = agent.deliver(agent.snapshot())
    assert outcome.kind == "ok"
    assert len(recorder.bodies) == 2
    assert agent.clock.waits == [1.0]  # Retry-After: 1, no backoff of its own


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_backs_off_while_unreachable_and_logs_once_per_change(app, tmp_path, caplog):
    from cheroot import wsgi as cheroot_wsgi

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    clock = FakeClock()
    agent = make_agent(
        url, tmp_path, Devices([fpga("0000:0c:00.0")]), clock=clock, backoff_base=1, max_backoff=8
    )
    server = cheroot_wsgi.Server(("127.0.0.1", port), app, numthreads=2)

    def api_comes_back() -> None:
        server.prepare()
        threading.Thread(target=server.serve, daemon=True).start()

    clock.call_later(40, api_comes_back)  # after several failed attempts
    caplog.set_level(logging.INFO, logger="exosuit.agent")
    try:
        outcome = agent.deliver(agent.snapshot())
    finally:
        server.stop()
    assert outcome.kind == "ok"
    waits = clock.waits
    assert len(waits) >= 5
    # Exponential from backoff_base, capped at max_backoff, each jittered to half-whole.
    for failures, wait in enumerate(waits, start=1):
        ceiling = min(8, 2 ** (failures - 1))
        assert ceiling / 2 <= wait <= ceiling, (failures, waits)
    assert sum(waits[:-1]) < 40 <= sum(waits)  # reported at the first attempt after
    messages = [r.getMessage() for r in caplog.records]
    assert sum("retrying with exponential backoff" in m for m in messages) == 1
    assert sum("reachable again" in m for m in messages) == 1


def test_a_wake_up_ends_the_backoff_with_a_new_discovery(tmp_path):
    clock = FakeClock()
    driver = Devices([fpga("0000:0c:00.0")])
    agent = make_agent(
        f"http://127.0.0.1:{_free_port()}", tmp_path, driver, clock=clock, max_backoff=60
    )
    clock.call_later(10, agent.wake)
    assert agent.deliver(agent.snapshot()) is None  # superseded: discover again
    assert clock.now() == pytest.approx(1_000_010 + COALESCE_SECONDS)
    assert clock.waits[-1] == COALESCE_SECONDS


def test_a_rejected_snapshot_is_not_retried_in_a_loop(app, tmp_path, caplog):
    bad = Devices([fpga("0000:0c:00.0")])
    with serve_wsgi(app) as url:
        agent = make_agent(url, tmp_path, bad)
        snapshot = agent.snapshot()
        snapshot["devices"][0]["type"] = "not a type"
        from exosuit import schemas

        snapshot["hash"] = schemas.snapshot_hash(snapshot["devices"], snapshot["driver_errors"])
        outcome = agent.deliver(snapshot)
    assert outcome.kind == "rejected"
    assert "devices/0/type" in outcome.detail
    assert agent.clock.waits == []  # given up at once
    assert agent.state.acknowledged_hash is None


def test_a_missing_device_is_kept_for_the_removal_grace(app, sqlite_api, tmp_path):
    clock = FakeClock()
    driver = Devices([fpga("0000:0c:00.0"), fpga("0000:0d:00.0")])
    with serve_wsgi(app) as url:
        agent = make_agent(url, tmp_path, driver, removal_grace=120, clock=clock)
        assert agent.deliver(agent.snapshot()).kind == "ok"
        driver.devices = driver.devices[:1]
        clock.advance(30)
        assert agent.deliver(agent.snapshot()).kind == "ok"
        devices = {d["pci_address"]: d for d in devices_of(sqlite_api)}
        assert devices["0000:0c:00.0"]["presence"] == "present"
        assert devices["0000:0d:00.0"]["presence"] == "missing"
        assert "removal grace" in devices["0000:0d:00.0"]["presence_reason"]
        # A missing device takes no binds.
        missing = devices["0000:0d:00.0"]
        rp = next(
            d["rp_uuid"]
            for d in sqlite_api.get("/v2/deployables").json["deployables"]
            if d["device_id"] == _device_id(sqlite_api, missing["uuid"])
        )
        assert _bind(sqlite_api, rp).status_code == 409
        # After the grace it is dropped, and the API deletes it.
        clock.advance(100)
        assert agent.deliver(agent.snapshot()).kind == "ok"
        assert [d["pci_address"] for d in devices_of(sqlite_api)] == ["0000:0c:00.0"]
        # A device that comes back within the grace is present again.
        driver.devices = [fpga("0000:0c:00.0"), fpga("0000:0e:00.0")]
        agent.deliver(agent.snapshot())
        driver.devices = [fpga("0000:0c:00.0")]
        clock.advance(10)
        agent.deliver(agent.snapshot())
        driver.devices = [fpga("0000:0c:00.0"), fpga("0000:0e:00.0")]
        clock.advance(10)
        agent.deliver(agent.snapshot())
    devices = {d["pci_address"]: d for d in devices_of(sqlite_api)}
    assert devices["0000:0e:00.0"]["presence"] == "present"


def test_run_reports_at_once_when_woken(app, sqlite_api, tmp_path):
    clock = FakeClock()
    start = clock.now()
    recorder = Recorder(app, clock=clock)
    driver = Devices([fpga("0000:0c:00.0")])
    with serve_wsgi(recorder) as url:
        agent = make_agent(url, tmp_path, driver, interval=3600, clock=clock)

        def plugged() -> None:
            driver.devices.append(fpga("0000:0d:00.0"))
            agent.wake()

        clock.call_at(start + 100, plugged)
        clock.call_at(start + 200, agent.stop)
        agent.run()
    assert len(devices_of(sqlite_api)) == 2
    # Reported at start, then as soon as the uevent burst was over: not an hour later.
    assert recorder.times == [start, start + 100 + COALESCE_SECONDS]
    assert clock.waits == [3600, COALESCE_SECONDS, 3600]


def test_a_burst_of_uevents_makes_one_discovery(app, tmp_path):
    clock = FakeClock()
    start = clock.now()
    driver = Devices([fpga("0000:0c:00.0")])
    with serve_wsgi(app) as url:
        agent = make_agent(url, tmp_path, driver, interval=3600, clock=clock)
        for offset in (100, 100.05, 100.1, 100.15):  # a VF creation: several uevents
            clock.call_at(start + offset, agent.wake)
        clock.call_at(start + 500, agent.stop)
        agent.run()
    assert driver.discoveries == 2  # the first report, then one for the whole burst
    assert agent.reports == 2


def test_the_first_report_is_jittered_then_one_per_interval(app, tmp_path):
    clock = FakeClock()
    start = clock.now()
    recorder = Recorder(app, clock=clock)
    with serve_wsgi(recorder) as url:
        agent = make_agent(
            url, tmp_path, Devices([fpga("0000:0c:00.0")]), clock=clock, jitter=10, interval=60
        )
        clock.call_at(start + 200, agent.stop)
        agent.run()
    first = clock.waits[0]
    assert 0 < first <= 10
    assert clock.waits == [first, 60, 60, 60, 60]
    assert recorder.times == [start + first + 60 * n for n in range(4)]
    # Only the first report carries the devices; the unchanged ones send the hash.
    assert [("devices" in b) for b in recorder.bodies] == [True, False, False, False]


def test_agents_booting_together_spread_their_first_reports(tmp_path):
    firsts = []
    for seed in range(20):
        clock = FakeClock()
        agent = make_agent(
            "http://127.0.0.1:9",
            tmp_path / str(seed),
            Devices([]),
            clock=clock,
            jitter=10,
            rng=random.Random(seed),
        )
        clock.call_later(0, agent.stop)  # stopped during the jitter: nothing reported
        agent.run()
        firsts.append(clock.waits[0])
    assert all(0 < f <= 10 for f in firsts)
    assert max(firsts) - min(firsts) > 5


def _device_id(api, uuid):
    from exosuit.db import models

    db = api.app.application.db
    with db.reader() as conn:
        return conn.execute(models.devices.select().where(models.devices.c.uuid == uuid)).first().id


def _bind(api, rp_uuid):
    import uuid as uuidlib

    api.post("/v2/device_profiles", [{"name": "grace", "groups": [{"resources:FPGA": "1"}]}])
    (arq,) = api.post("/v2/accelerator_requests", {"device_profile_name": "grace"}).json["arqs"]
    return api.patch(
        "/v2/accelerator_requests",
        {
            arq["uuid"]: [
                {"op": "add", "path": "/hostname", "value": HOST},
                {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
                {"op": "add", "path": "/instance_uuid", "value": str(uuidlib.uuid4())},
            ]
        },
    )
