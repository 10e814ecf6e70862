"""exosuit-api under each of its HTTP servers ([api] server): real processes."""

from __future__ import annotations

import json
import signal
import urllib.request

import pytest

from bench._common import api_server
from tests.helpers.inventory import fpga, snapshot


def _call(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read() or b"null")


@pytest.mark.parametrize("server", ["granian", "gunicorn"])
def test_exosuit_api_serves_and_stops(server, tmp_path):
    db_url = f"sqlite:///{tmp_path}/api.sqlite"
    with api_server(db_url, workers=2, threads=2, extra=f"server = {server}\n") as (url, proc):
        status, version = _call(url + "/v2")
        assert status == 200 and version["max_version"] == "2.4"
        status, answer = _call(url + "/agent/v1/hosts/h1/inventory", "PUT",
                               snapshot("h1", [fpga("0000:0c:00.0")]))
        assert status == 200 and answer["changed"] is True
        status, body = _call(url + "/v2/devices")
        assert [d["hostname"] for d in body["devices"]] == ["h1"]
        # Errors keep Cyborg's envelope through the server.
        with pytest.raises(urllib.error.HTTPError) as error:
            _call(url + "/v2/devices/" + "0" * 8 + "-0000-0000-0000-" + "0" * 12)
        assert error.value.code == 404
        assert "error_message" in json.loads(error.value.read())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
