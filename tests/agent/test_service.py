"""The agent loop against a real API over HTTP: cheap unchanged reports, resync from the
cache, Retry-After, backoff while unreachable, and the removal grace."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest
from keystoneauth1 import session as ks_session

from exosuit.agent.cache import AgentCache
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import Agent
from exosuit.api.deploy import loadapp
from tests.helpers.inventory import fpga
from tests.helpers.live import serve_wsgi

HOST = "agent-host-1"


class Recorder:
    """WSGI middleware keeping the bodies of agent reports (and able to answer 429)."""

    def __init__(self, app, busy: int = 0) -> None:
        self.app = app
        self.bodies: list[dict] = []
        self.busy = busy

    def __call__(self, environ, start_response):
        if environ["PATH_INFO"].startswith("/agent/"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            raw = environ["wsgi.input"].read(length)
            import io

            environ["wsgi.input"] = io.BytesIO(raw)
            self.bodies.append(json.loads(raw))
            if self.busy > 0:
                self.busy -= 1
                start_response("429 Too Many Requests", [("Retry-After", "1"),
                                                         ("Content-Type", "text/plain")])
                return [b"busy"]
        return self.app(environ, start_response)


class Devices:
    """A driver whose devices the test changes."""

    name = "static"

    def __init__(self, devices) -> None:
        self.devices = list(devices)

    def discover(self):
        return list(self.devices)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_agent(url, tmp_path, driver, **kw) -> Agent:
    reporter = Reporter(ks_session.Session(), url, HOST, timeout=5)
    kw.setdefault("jitter", 0)
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


def test_resends_the_whole_snapshot_when_the_api_lost_it(conf, db_servers, tmp_path_factory,
                                                          tmp_path):
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
        started = time.monotonic()
        outcome = agent.deliver(agent.snapshot())
        elapsed = time.monotonic() - started
    assert outcome.kind == "ok"
    assert len(recorder.bodies) == 2
    assert 0.9 <= elapsed < 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_backs_off_while_unreachable_and_logs_once_per_change(app, tmp_path, caplog):
    from cheroot import wsgi as cheroot_wsgi

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    agent = make_agent(url, tmp_path, Devices([fpga("0000:0c:00.0")]),
                       backoff_base=0.05, max_backoff=0.2)
    result = {}
    caplog.set_level(logging.INFO, logger="exosuit.agent")
    thread = threading.Thread(target=lambda: result.update(o=agent.deliver(agent.snapshot())))
    thread.start()
    time.sleep(1.5)  # several failed attempts
    server = cheroot_wsgi.Server(("127.0.0.1", port), app, numthreads=2)
    server.prepare()
    serving = threading.Thread(target=server.serve, daemon=True)
    serving.start()
    try:
        thread.join(timeout=10)
    finally:
        server.stop()
    assert result["o"].kind == "ok"
    messages = [r.getMessage() for r in caplog.records]
    assert sum("retrying with exponential backoff" in m for m in messages) == 1
    assert sum("reachable again" in m for m in messages) == 1


def test_a_rejected_snapshot_is_not_retried_in_a_loop(app, tmp_path, caplog):
    bad = Devices([fpga("0000:0c:00.0")])
    with serve_wsgi(app) as url:
        agent = make_agent(url, tmp_path, bad)
        snapshot = agent.snapshot()
        snapshot["devices"][0]["type"] = "not a type"
        from exosuit import schemas

        snapshot["hash"] = schemas.snapshot_hash(snapshot["devices"], snapshot["driver_errors"])
        started = time.monotonic()
        outcome = agent.deliver(snapshot)
    assert outcome.kind == "rejected"
    assert "devices/0/type" in outcome.detail
    assert time.monotonic() - started < 2
    assert agent.state.acknowledged_hash is None


def test_a_missing_device_is_kept_for_the_removal_grace(app, sqlite_api, tmp_path):
    clock = Clock()
    driver = Devices([fpga("0000:0c:00.0"), fpga("0000:0d:00.0")])
    with serve_wsgi(app) as url:
        agent = make_agent(url, tmp_path, driver, removal_grace=120, clock=clock)
        assert agent.deliver(agent.snapshot()).kind == "ok"
        driver.devices = driver.devices[:1]
        clock.now += 30
        assert agent.deliver(agent.snapshot()).kind == "ok"
        devices = {d["pci_address"]: d for d in devices_of(sqlite_api)}
        assert devices["0000:0c:00.0"]["presence"] == "present"
        assert devices["0000:0d:00.0"]["presence"] == "missing"
        assert "removal grace" in devices["0000:0d:00.0"]["presence_reason"]
        # A missing device takes no binds.
        missing = devices["0000:0d:00.0"]
        rp = next(d["rp_uuid"] for d in sqlite_api.get("/v2/deployables").json["deployables"]
                  if d["device_id"] == _device_id(sqlite_api, missing["uuid"]))
        assert _bind(sqlite_api, rp).status_code == 409
        # After the grace it is dropped, and the API deletes it.
        clock.now += 100
        assert agent.deliver(agent.snapshot()).kind == "ok"
        assert [d["pci_address"] for d in devices_of(sqlite_api)] == ["0000:0c:00.0"]
        # A device that comes back within the grace is present again.
        driver.devices = [fpga("0000:0c:00.0"), fpga("0000:0e:00.0")]
        agent.deliver(agent.snapshot())
        driver.devices = [fpga("0000:0c:00.0")]
        clock.now += 10
        agent.deliver(agent.snapshot())
        driver.devices = [fpga("0000:0c:00.0"), fpga("0000:0e:00.0")]
        clock.now += 10
        agent.deliver(agent.snapshot())
    devices = {d["pci_address"]: d for d in devices_of(sqlite_api)}
    assert devices["0000:0e:00.0"]["presence"] == "present"


def test_run_reports_at_once_when_woken(app, sqlite_api, tmp_path):
    driver = Devices([fpga("0000:0c:00.0")])
    with serve_wsgi(app) as url:
        agent = make_agent(url, tmp_path, driver, interval=3600)
        thread = threading.Thread(target=agent.run)
        thread.start()
        try:
            _wait_for(lambda: agent.reports >= 1)
            driver.devices.append(fpga("0000:0d:00.0"))
            woken = time.monotonic()
            agent.wake()
            _wait_for(lambda: len(devices_of(sqlite_api)) == 2)
            assert time.monotonic() - woken < 2
        finally:
            agent.stop()
            thread.join(timeout=5)
    assert not thread.is_alive()


def _device_id(api, uuid):
    from exosuit.db import models

    db = api.app.application.db
    with db.reader() as conn:
        return conn.execute(models.devices.select().where(
            models.devices.c.uuid == uuid)).first().id


def _bind(api, rp_uuid):
    import uuid as uuidlib

    api.post("/v2/device_profiles", [{"name": "grace", "groups": [{"resources:FPGA": "1"}]}])
    (arq,) = api.post("/v2/accelerator_requests", {"device_profile_name": "grace"}).json["arqs"]
    return api.patch("/v2/accelerator_requests", {arq["uuid"]: [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
        {"op": "add", "path": "/instance_uuid", "value": str(uuidlib.uuid4())},
    ]})


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
