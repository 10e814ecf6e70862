"""exosuit-api under each of its HTTP servers ([api] server): real processes."""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest

from bench._common import api_server
from exosuit.api.microversion import VERSIONS
from tests.helpers.inventory import fpga, snapshot


def _call(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read() or b"null")


@pytest.mark.parametrize("server", ["granian", "granian-wsgi", "gunicorn"])
def test_exosuit_api_serves_and_stops(server, tmp_path):
    db_url = f"sqlite:///{tmp_path}/api.sqlite"
    # granian-wsgi: [api] granian_interface = wsgi (granian's own WSGI interface).
    extra = "server = granian\ngranian_interface = wsgi\n" if server == "granian-wsgi" else ""
    extra = extra or f"server = {server}\n"
    with api_server(db_url, workers=2, threads=2, extra=extra) as (url, proc):
        status, version = _call(url + "/v2")
        assert status == 200 and version["max_version"] == VERSIONS[-1]  # pinned elsewhere
        status, answer = _call(
            url + "/agent/v1/hosts/h1/inventory", "PUT", snapshot("h1", [fpga("0000:0c:00.0")])
        )
        assert status == 200 and answer["changed"] is True
        status, body = _call(url + "/v2/devices")
        assert [d["hostname"] for d in body["devices"]] == ["h1"]
        # Errors keep Cyborg's envelope through the server.
        with pytest.raises(urllib.error.HTTPError) as error:
            _call(url + "/v2/devices/" + "0" * 8 + "-0000-0000-0000-" + "0" * 12)
        assert error.value.code == 404
        assert "error_message" in json.loads(error.value.read())
        proc.send_signal(signal.SIGTERM)
        # Generous: on a busy machine the workers take their time to stop.
        assert proc.wait(timeout=120) == 0


@pytest.mark.parametrize("server", ["granian", "gunicorn"])
def test_sigterm_does_not_wait_forever_for_a_stalled_request(server, tmp_path):
    """Regression (issue 14): SIGTERM waited for requests in progress without limit (a
    client that never sends the body it announced held the server for minutes). Now
    ``[api] shutdown_timeout`` bounds it."""
    import socket
    import time
    import urllib.parse

    db_url = f"sqlite:///{tmp_path}/api.sqlite"
    extra = f"server = {server}\nshutdown_timeout = 2\n"
    with api_server(db_url, workers=1, threads=2, extra=extra) as (url, proc):
        address = urllib.parse.urlsplit(url)
        stalled = socket.create_connection((address.hostname, address.port), timeout=10)
        try:
            # Headers announce 1 MB; the body never comes.
            stalled.sendall(
                b"PUT /agent/v1/hosts/h1/inventory HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"
            )
            time.sleep(1)  # let a worker take the request (not an assertion on time)
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)  # before the fix: minutes, or never
            assert time.monotonic() - began < 120
        finally:
            stalled.close()


def _children(pid: int) -> set[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(p) for p in f.read().split()}


def test_a_gunicorn_worker_that_exits_leaves_the_metrics_folder_to_the_others(tmp_path):
    """Regression: a worker is a fork of exosuit-api, and its exit unwound through the
    code that removes the multiprocess metrics folder at exit, so a worker restarted by
    gunicorn took every worker's request-latency files with it (and the next request of
    another worker found the folder gone). Only the process that made it removes it."""
    from tests.helpers.agent_processes import wait_for

    temp = tmp_path / "tmp"
    temp.mkdir()
    db_url = f"sqlite:///{tmp_path}/api.sqlite"
    extra = "server = gunicorn\n"
    with api_server(db_url, workers=2, threads=2, extra=extra, env={"TMPDIR": str(temp)}) as (
        url,
        proc,
    ):
        (folder,) = temp.glob("exosuit-api-metrics-*")
        workers = wait_for(
            lambda: len(found := _children(proc.pid)) == 2 and found,
            timeout=120,
            what="two gunicorn workers",
        )
        for _ in range(10):
            assert _call(url + "/v2/devices")[0] == 200
        leaving = min(workers)
        os.kill(leaving, signal.SIGTERM)
        wait_for(
            lambda: leaving not in (found := _children(proc.pid)) and len(found) == 2,
            timeout=120,
            what="gunicorn replaced the worker that left",
        )
        assert folder.is_dir()
        for _ in range(10):  # whichever worker answers, it counts and sums every worker's
            with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
                assert response.status == 200
                assert b"exosuit_api_request_duration_seconds" in response.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
    assert not folder.exists()  # removed by exosuit-api itself once it stopped
