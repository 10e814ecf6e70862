"""``exosuit serve`` as a user runs it: a real process on a free port, a data directory,
a configuration file, a restart, Ctrl-C and SIGTERM."""

from __future__ import annotations

import signal
import socket
import uuid

import pytest
import requests

from tests.functional.serve_fixture import ExosuitServer, write_config

pytestmark = pytest.mark.slow


@pytest.fixture
def servers():
    """Every ExosuitServer a test starts; all are killed at teardown, stopped or not."""
    started: list[ExosuitServer] = []

    def start(data_dir, config_files=()) -> ExosuitServer:
        server = ExosuitServer(data_dir, config_files)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()


def _port_open(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def test_serve_prints_where_it_listens_and_answers_within_10_seconds(servers, tmp_path):
    server = servers(tmp_path / "data")

    assert server.startup_seconds < 10, server.output
    # --port 0: the kernel picked a port, and the banner says which.
    assert server.url.startswith("http://127.0.0.1:")
    assert int(server.url.rsplit(":", 1)[1]) > 0
    assert f"serving Cyborg's v2 API at {server.url}/v2" in server.output
    # Without a configuration file the simulated host is this machine.
    assert server.host == socket.gethostname()
    database = tmp_path / "data" / "exosuit.sqlite"
    assert f"database: {database}" in server.output
    assert database.is_file()
    assert f"--os-endpoint {server.url}/v2 accelerator device list" in server.output

    # The address printed is where the version documents are, and they point back at it.
    root = server.get("/").json()
    assert root["versions"][0]["links"][0]["href"] == f"{server.url}/v2/"
    v2 = server.get("/v2").json()
    assert v2["id"] == "v2.0" and v2["status"] == "CURRENT"
    assert v2["links"][0]["href"] == f"{server.url}/v2/"
    devices = server.get("/v2/devices").json()["devices"]
    assert sorted(d["type"] for d in devices) == ["FPGA", "GPU"]


def test_simulated_host_is_named_by_default_host_in_the_config_file(servers, tmp_path):
    config = write_config(tmp_path / "exosuit.conf", host="sim-host-1")
    server = servers(tmp_path / "data", [config])

    assert server.host == "sim-host-1"
    assert "simulated host 'sim-host-1'" in server.output
    devices = server.get("/v2/devices").json()["devices"]
    assert len(devices) == 2
    assert {d["hostname"] for d in devices} == {"sim-host-1"}
    assert server.get("/v2/devices", params={"hostname": "sim-host-1"}).json()["devices"]
    assert server.get("/v2/devices", params={"hostname": socket.gethostname()}
                      ).json()["devices"] == []
    names = sorted(d["name"] for d in server.get("/v2/deployables").json()["deployables"])
    assert len(names) == 2
    assert "sim-host-1_FakeDevice" in names
    (gpu_name,) = [n for n in names if n != "sim-host-1_FakeDevice"]
    assert gpu_name.startswith("sim-host-1_0000_")  # <host>_<PCI address>


def test_data_survives_a_restart_in_the_same_data_dir(servers, tmp_path):
    config = write_config(tmp_path / "exosuit.conf", host="sim-host-1")
    first = servers(tmp_path / "data", [config])
    devices = {d["uuid"]: d for d in first.get("/v2/devices").json()["devices"]}
    deployables = {d["uuid"]: d["rp_uuid"]
                   for d in first.get("/v2/deployables").json()["deployables"]}
    fpga = next(d for d in first.get("/v2/deployables").json()["deployables"]
                if d["name"] == "sim-host-1_FakeDevice")
    r = first.post("/v2/device_profiles",
                   [{"name": "kept-profile", "groups": [{"resources:FPGA": "1"}]}])
    assert r.status_code == 201, r.text
    profile = r.json()
    r = first.post("/v2/accelerator_requests", {"device_profile_name": "kept-profile"})
    assert r.status_code == 201, r.text
    (arq,) = r.json()["arqs"]
    instance = str(uuid.uuid4())
    r = requests.patch(f"{first.url}/v2/accelerator_requests", timeout=10, json={arq["uuid"]: [
        {"op": "add", "path": "/hostname", "value": "sim-host-1"},
        {"op": "add", "path": "/device_rp_uuid", "value": fpga["rp_uuid"]},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]})
    assert r.status_code == 202, r.text
    bound = first.get(f"/v2/accelerator_requests/{arq['uuid']}").json()
    assert bound["state"] == "Bound"
    assert first.stop(signal.SIGINT) == 0, first.output

    second = servers(tmp_path / "data", [config])
    assert "Running upgrade" not in second.output  # the schema was already there
    after = {d["uuid"]: d for d in second.get("/v2/devices").json()["devices"]}
    assert set(after) == set(devices)  # the same devices, re-reported, not duplicated
    assert {d["uuid"]: d["rp_uuid"] for d in second.get("/v2/deployables").json()["deployables"]
            } == deployables
    kept = second.get(f"/v2/device_profiles/{profile['uuid']}").json()["device_profile"]
    assert kept["name"] == "kept-profile"
    assert kept["groups"] == [{"resources:FPGA": "1"}]
    arq_after = second.get(f"/v2/accelerator_requests/{arq['uuid']}").json()
    assert arq_after["state"] == "Bound"
    assert arq_after["instance_uuid"] == instance
    assert arq_after["attach_handle_uuid"] == bound["attach_handle_uuid"]
    assert arq_after["attach_handle_info"] == bound["attach_handle_info"]


def test_a_second_serve_on_the_same_data_dir_refuses_to_start(servers, tmp_path):
    first = servers(tmp_path / "data")
    second = ExosuitServer(tmp_path / "data")
    with pytest.raises(RuntimeError, match="did not print its address"):
        second.start()
    assert "already uses the state directory" in second.output, second.output
    assert "Traceback" not in second.output
    assert second.process.wait(10) == 1
    assert first.get("/v2/devices").status_code == 200  # the first one is unharmed


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_serve_cleanly(servers, tmp_path, signum):
    server = servers(tmp_path / "data")
    # A client that keeps its connection open (as openstacksdk's session does).
    session = requests.Session()
    assert session.get(f"{server.url}/v2/devices", timeout=10).status_code == 200

    code = server.stop(signum)

    assert code == 0, server.output
    assert server.stop_seconds < 5, server.output
    assert server.output.rstrip().endswith("Exosuit stopped."), server.output
    assert "Traceback" not in server.output
    assert not _port_open(server.url)
    session.close()
