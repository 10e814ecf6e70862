"""``exosuit serve`` as a user runs it: a real process on a free port, a data directory,
a configuration file, a restart, Ctrl-C and SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
import requests

from tests.helpers.serve_fixture import ExosuitServer, write_config

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


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


def test_serve_prints_where_it_listens_and_answers(servers, tmp_path):
    server = servers(tmp_path / "data")

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
    assert (
        server.get("/v2/devices", params={"hostname": socket.gethostname()}).json()["devices"] == []
    )
    names = sorted(d["name"] for d in server.get("/v2/deployables").json()["deployables"])
    assert len(names) == 2
    assert "sim-host-1_FakeDevice" in names
    (gpu_name,) = [n for n in names if n != "sim-host-1_FakeDevice"]
    assert gpu_name.startswith("sim-host-1_0000_")  # <host>_<PCI address>


def test_data_survives_a_restart_in_the_same_data_dir(servers, tmp_path):
    config = write_config(tmp_path / "exosuit.conf", host="sim-host-1")
    first = servers(tmp_path / "data", [config])
    devices = {d["uuid"]: d for d in first.get("/v2/devices").json()["devices"]}
    deployables = {
        d["uuid"]: d["rp_uuid"] for d in first.get("/v2/deployables").json()["deployables"]
    }
    fpga = next(
        d
        for d in first.get("/v2/deployables").json()["deployables"]
        if d["name"] == "sim-host-1_FakeDevice"
    )
    r = first.post(
        "/v2/device_profiles", [{"name": "kept-profile", "groups": [{"resources:FPGA": "1"}]}]
    )
    assert r.status_code == 201, r.text
    profile = r.json()
    r = first.post("/v2/accelerator_requests", {"device_profile_name": "kept-profile"})
    assert r.status_code == 201, r.text
    (arq,) = r.json()["arqs"]
    instance = str(uuid.uuid4())
    r = requests.patch(
        f"{first.url}/v2/accelerator_requests",
        timeout=10,
        json={
            arq["uuid"]: [
                {"op": "add", "path": "/hostname", "value": "sim-host-1"},
                {"op": "add", "path": "/device_rp_uuid", "value": fpga["rp_uuid"]},
                {"op": "add", "path": "/instance_uuid", "value": instance},
            ]
        },
    )
    assert r.status_code == 202, r.text
    bound = first.get(f"/v2/accelerator_requests/{arq['uuid']}").json()
    assert bound["state"] == "Bound"
    assert first.stop(signal.SIGINT) == 0, first.output

    second = servers(tmp_path / "data", [config])
    assert "Running upgrade" not in second.output  # the schema was already there
    after = {d["uuid"]: d for d in second.get("/v2/devices").json()["devices"]}
    assert set(after) == set(devices)  # the same devices, re-reported, not duplicated
    assert {
        d["uuid"]: d["rp_uuid"] for d in second.get("/v2/deployables").json()["deployables"]
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
def test_signal_stops_serve_cleanly(servers, tmp_path, signum, request):
    # Requests in progress may take 600 s to finish: a stop that waited for the idle
    # keep-alive connection below would outlast the fixture's 60 s and be killed.
    config = tmp_path / "exosuit.conf"
    config.write_text("[api]\nshutdown_timeout = 600\n")
    server = servers(tmp_path / "data", [config])
    # A client that keeps its connection open (as openstacksdk's session does).
    session = requests.Session()
    request.addfinalizer(session.close)
    assert session.get(f"{server.url}/v2/devices", timeout=10).status_code == 200

    code = server.stop(signum)

    assert code == 0, server.output  # not killed: the idle connection did not hold it
    assert server.output.rstrip().endswith("Exosuit stopped."), server.output
    assert "Traceback" not in server.output
    assert not _port_open(server.url)
    session.close()


def test_serve_with_keystone_in_its_config_asks_for_a_token(servers, tmp_path):
    """Regression (issue 14): a file that asks for Keystone was overridden to noauth, and a
    request without a token was an admin. Now it gets 401; the in-process agent, trusted,
    still reports."""
    config = tmp_path / "exosuit.conf"
    config.write_text(
        "[DEFAULT]\nhost = ks-host\n[api]\nauth_strategy = keystone\n"
        # No Keystone answers there: a request without a token is refused before any call.
        "[keystone_authtoken]\nwww_authenticate_uri = http://127.0.0.1:9/identity\n"
        "auth_url = http://127.0.0.1:9/identity\n"
    )
    server = servers(tmp_path / "data", [config])

    assert "authentication: keystone" in server.output
    assert server.get("/v2").status_code == 200  # public
    for path in ("/v2/devices", "/v2/device_profiles", "/v2/accelerator_requests"):
        assert server.get(path).status_code == 401, path
    admin = {"X-Roles": "admin", "X-Project-Id": "p", "X-User-Id": "u"}
    # Identity headers are not trusted under Keystone: still no token, still 401.
    assert requests.get(f"{server.url}/v2/devices", headers=admin, timeout=10).status_code == 401
    # The in-process agent reported the simulated host (the server starts only then).
    assert "simulated host 'ks-host'" in server.output


def test_serve_listens_with_a_production_sized_backlog(servers, tmp_path):
    """Regression (issue 14): cheroot's default listen backlog of 5 reset connections
    of a burst of clients (binds, agents). The kernel shows the backlog of a listening
    socket as its Send-Q."""
    import shutil
    import subprocess
    import urllib.parse

    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed: cannot read the listen backlog")
    server = servers(tmp_path / "data")
    port = urllib.parse.urlsplit(server.url).port
    lines = subprocess.run(
        ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    (listening,) = [line.split() for line in lines if line.strip()]
    assert int(listening[2]) >= 1024, listening  # Send-Q: the backlog ([api] backlog)


def test_a_malformed_chunked_body_is_400_not_500(servers, tmp_path):
    """Regression (issue 14): exosuit serve answered 500 to a malformed chunked body."""
    import urllib.parse

    server = servers(tmp_path / "data")
    address = urllib.parse.urlsplit(server.url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as conn:
        conn.sendall(
            b"POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"zz-not-a-size\r\n[]\r\n0\r\n\r\n"
        )
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    assert 400 <= status < 500, answer[:300]
    assert server.get("/v2/device_profiles").json()["device_profiles"] == []


def test_sigterm_while_serve_starts_stops_it_cleanly(servers, tmp_path):
    """SIGTERM as the banner's first line comes (the server is made, its own handlers are
    not yet installed: exosuit/stopping.py) ends the start with status 0, no traceback,
    and leaves the data directory free for the next start."""
    from tests.helpers.agent_processes import drain, wait_for
    from tests.helpers.serve_fixture import _script

    argv = [_script("exosuit"), "serve", "--port", "0", "--data-dir", str(tmp_path / "data")]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    lines: list[str] = []
    reader = threading.Thread(target=drain, args=(process.stdout, lines), daemon=True)
    reader.start()
    try:
        wait_for(lambda: "serving Cyborg's v2 API" in "".join(lines), 120, "the banner")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, "".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    reader.join(timeout=30)
    assert "Traceback" not in "".join(lines)
    # Nothing was left behind: the agent cache's lock is free, the next start serves.
    again = servers(tmp_path / "data")
    assert again.get("/v2/devices").status_code == 200


@pytest.fixture
def taken_port():
    """A port something else listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def test_serve_on_a_taken_port_says_so_before_migrating(taken_port, tmp_path):
    data = tmp_path / "data"
    argv = [*ExosuitServer(data).argv(), "--port", str(taken_port)]  # the last --port wins
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done
    assert f"cannot listen on 127.0.0.1:{taken_port}: it is taken" in done.stderr, done.stderr
    assert f'make run ARGS="--port {taken_port + 1}"' in done.stderr
    assert "Traceback" not in done.stderr
    assert not (data / "exosuit.sqlite").exists()  # nothing migrated


def test_make_run_on_a_taken_port_stops_before_building_anything(taken_port, tmp_path):
    # `make run` checks with the system's Python, before the virtualenv and migrations:
    # run where no virtualenv exists (a copy of the Makefile and the package's checker).
    (tmp_path / "exosuit").mkdir()
    for name in ("Makefile", "exosuit/__init__.py", "exosuit/port_check.py"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    done = subprocess.run(
        ["make", "-s", "run", f"ARGS=--port {taken_port} --data-dir {tmp_path}/data"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1:{taken_port}: it is taken" in done.stderr, done.stderr
    assert not (tmp_path / ".venv").exists()  # nothing built
