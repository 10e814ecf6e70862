"""The history endpoints (microversion 2.11) with ``[dashboard] prometheus_url`` set: they
answer from a real Prometheus (Debian's ``prometheus``; the Makefile's SYSTEM_PACKAGES)
that scrapes a real HTTP server's /metrics, not from the database; a Prometheus that does
not answer is a 503 with what went wrong. Also, from the database: a window only shows
the buckets in it."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import socket
import subprocess
import threading
import time
import wsgiref.simple_server
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa

from exosuit.api.deploy import loadapp
from exosuit.db import inventory, models
from exosuit.db import usage_history as history_db
from tests.conftest import ApiClient, make_test_conf, require
from tests.helpers.inventory import fpga, snapshot

V = "2.11"
HOST = "prom-host"
ADDRESS = "0000:5e:00.0"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DEADLINE = 120.0  # generous: two shared cores


class _Quiet(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def http_server(app):
    """``app`` on a real HTTP port of 127.0.0.1; its base URL."""
    server = wsgiref.simple_server.make_server("127.0.0.1", 0, app, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, what: str):
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"not within {DEADLINE} s: {what}")


@contextlib.contextmanager
def prometheus(tmp_path: Path, target: str):
    """A Prometheus scraping ``target``'s /metrics every second; its base URL."""
    require(Path(PROMETHEUS).is_file(), f"prometheus is not installed at {PROMETHEUS}")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: exosuit\n"
        # The per-device series need credentials (doc/metrics.md, "Who sees what"):
        # noauth takes any bearer token as an admin's.
        "    authorization:\n      type: Bearer\n      credentials: noauth\n"
        "    static_configs:\n"
        f"      - targets: ['{target.removeprefix('http://')}']\n"
    )
    log = tmp_path / "prometheus.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=output,
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready():
            if process.poll() is not None:
                pytest.fail(f"prometheus exited: {log.read_text()[-2000:]}")
            try:
                return requests.get(f"{url}/-/ready", timeout=5).status_code == 200
            except requests.ConnectionError:
                return False

        wait_for(ready, "Prometheus is ready")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def seed(database) -> str:
    """HOST reports an FPGA (4 attach handles) 25 % busy; its uuid."""
    database.write(inventory.apply_snapshot, HOST, snapshot(HOST, [fpga(ADDRESS, handles=4)]))
    dev, hosts = models.devices, models.hosts

    def write(conn):
        uuid, identity = conn.execute(sa.select(dev.c.uuid, dev.c.identity)).one()
        usage = {identity: {"utilization_percent": 25, "memory_used_bytes": 2**30}}
        conn.execute(
            sa.update(hosts)
            .where(hosts.c.hostname == HOST)
            .values(usage=json.dumps(usage), usage_at=models.utcnow())
        )
        return uuid

    return database.write(write)


@pytest.mark.slow
def test_the_history_answers_from_a_real_prometheus(sqlite_database, tmp_path):
    uuid = seed(sqlite_database)
    scraped = loadapp(make_test_conf(), sqlite_database)
    with http_server(scraped) as target, prometheus(tmp_path, target) as url:

        def scraped_twice():
            r = requests.get(
                f"{url}/api/v1/query",
                params={"query": "count_over_time(exosuit_device_utilization_percent[1m])"},
                timeout=10,
            )
            result = r.json()["data"]["result"]
            return result and float(result[0]["value"][1]) >= 2

        wait_for(scraped_twice, "Prometheus scraped the device's usage twice")
        api = ApiClient(
            loadapp(make_test_conf(**{"dashboard.prometheus_url": url + "/"}), sqlite_database)
        )
        r = api.get(f"/v2/devices/{uuid}/usage_history?window=600", version=V)
        assert r.status_code == 200, r.text
        body = r.json
        assert body["source"] == "prometheus" and body["window"] == 600
        assert set(body["figures"]) == {"utilization_percent", "memory_used_bytes"}
        points = body["figures"]["utilization_percent"]
        assert points and {p["value"] for p in points} == {25.0}
        assert body["figures"]["memory_used_bytes"][-1]["value"] == 2.0**30
        last = dt.datetime.fromisoformat(points[-1]["at"])
        assert abs((dt.datetime.now(dt.UTC) - last).total_seconds()) < 900

        r = api.get("/v2/allocation_history?window=600", version=V)
        assert r.status_code == 200, r.text
        (model,) = r.json["models"]
        assert (model["type"], model["vendor"], model["model"]) == ("FPGA", "0xABCD", "Fake FPGA")
        assert model["points"][-1]["held"] == 0.0 and model["points"][-1]["free"] == 4.0
        # Nothing was recorded in the database: the answer came from Prometheus.
        assert sqlite_database.read(history_db.device_history, uuid, dt.datetime(2000, 1, 1)) == {}


def test_a_prometheus_that_does_not_answer_is_a_503_saying_so(sqlite_database):
    uuid = seed(sqlite_database)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    api = ApiClient(loadapp(make_test_conf(**{"dashboard.prometheus_url": url}), sqlite_database))
    for path in (f"/v2/devices/{uuid}/usage_history", "/v2/allocation_history"):
        r = api.get(path, version=V)
        assert r.status_code == 503, r.text
        fault = json.loads(r.json["error_message"])
        assert fault["code"] == "exosuit.prometheus.unavailable"
        assert fault["faultstring"].startswith(f"Prometheus at {url} did not answer: ")


def test_a_window_shows_only_the_buckets_in_it(sqlite_database):
    uuid = seed(sqlite_database)
    shape = history_db.Retention(300, 21600, 3600, 172800)
    now = models.utcnow()
    for hours in (5, 1, 0):
        at = now - dt.timedelta(hours=hours)
        sqlite_database.write(history_db.sample, shape, stale_after=10**6, now=at)
    api = ApiClient(loadapp(make_test_conf(), sqlite_database))
    counts = {}
    for window in (7200, 21600):
        r = api.get(f"/v2/devices/{uuid}/usage_history?window={window}", version=V)
        assert r.status_code == 200, r.text
        counts[window] = len(r.json["figures"]["utilization_percent"])
    assert counts == {7200: 2, 21600: 3}
