"""`exosuit serve --placement-url …` keeps a running Placement equal to its simulated devices."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid

import pytest
import requests

from tests.helpers.serve_fixture import ExosuitServer, _script
from tests.placement.conftest import inventory

pytestmark = pytest.mark.slow  # starts (and stops) server processes


class PlacementServe(ExosuitServer):
    """``exosuit serve`` with extra command-line arguments."""

    def __init__(self, data_dir, config_files, extra: list[str]) -> None:
        super().__init__(data_dir, config_files)
        self.extra = extra

    def start(self):
        import os
        import threading

        argv = [
            _script("exosuit"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--data-dir",
            str(self.data_dir),
            *self.extra,
        ]
        for path in self.config_files:
            argv += ["--config-file", str(path)]
        began = time.monotonic()
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self._wait_until_serving(began)
        except BaseException:
            self.kill()
            raise
        return self


def _wait(condition, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.fixture
def served(placement, placement_api, tmp_path):
    host = f"serve-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "exosuit.conf"
    config.write_text(
        f"[DEFAULT]\nhost = {host}\n"
        "[agent]\nenabled_drivers = simulated\n"
        "[conductor]\npoll_interval = 0.2\n"
    )
    server = PlacementServe(tmp_path / "data", [config], ["--placement-url", placement.url])
    try:
        yield server.start()
    finally:
        server.kill()


def test_serve_keeps_placement_equal_to_its_simulated_devices(served, placement_api):
    host = served.host
    assert f"placement: {placement_api.url}" in served.output

    deployables = served.get("/v2/deployables").json()["deployables"]
    assert len(deployables) == 2  # one fake FPGA, one GPU

    def tree():
        if not placement_api.providers(name=host):
            return None
        found = placement_api.tree(host)
        return (
            found
            if len(found["children"]) == 2
            and all(c["inventories"] and len(c["traits"]) > 1 for c in found["children"].values())
            else None
        )

    found = _wait(tree)
    assert set(found["children"]) == {d["rp_uuid"] for d in deployables}
    by_rc = {next(iter(c["inventories"])): c for c in found["children"].values()}
    assert by_rc["FPGA"]["inventories"] == {"FPGA": inventory(16)}
    assert by_rc["FPGA"]["traits"] == {"CUSTOM_FAKE_DEVICE", "OWNER_CYBORG"}
    # serve offers its simulated devices at once; a GPU made inactive is fully reserved
    # until an operator marks it ready again and the agent installs it (doc/devices.md).
    assert by_rc["PGPU"]["inventories"] == {"PGPU": inventory(1)}
    assert "OWNER_CYBORG" in by_rc["PGPU"]["traits"]
    gpu_rp = next(u for u, c in found["children"].items() if "PGPU" in c["inventories"])
    for state, reserved in (("inactive", 1), ("ready", 0)):
        response = requests.post(
            served.url + "/v2/device_activations",
            json={"state": state, "type": "GPU"},
            headers={"OpenStack-API-Version": "accelerator 2.7"},
            timeout=10,
        )
        assert response.status_code == 202, response.text
        _wait(
            lambda r=reserved: (
                placement_api.inventories(gpu_rp) == {"PGPU": inventory(1, reserved=r)}
            )
        )

    # Disabling a device through the API reaches Placement.
    devices = served.get("/v2/devices").json()["devices"]
    fpga_device = next(d for d in devices if d["type"] == "FPGA")
    response = served.post(f"/v2/devices/{fpga_device['uuid']}/disable", None)
    assert response.status_code == 200
    fpga_rp = next(u for u, c in found["children"].items() if "FPGA" in c["inventories"])
    _wait(lambda: placement_api.inventories(fpga_rp) == {"FPGA": inventory(16, reserved=16)})

    metrics = served.get("/metrics").text
    assert 'exosuit_placement_syncs_total{job="sync",result="succeeded"}' in metrics
    assert served.stop(signal.SIGINT) == 0
