"""``exosuit deployable program|program-status`` (API 2.6) against real ``exosuit serve``
processes: ``server``'s simulated host runs its programs (its agent loads ``simulated``
images onto the fake FPGA, and rolls back the ones made to fail); on ``idle``'s the
agent never looks at its desired state, so a program stays pending (the display while
waiting, Ctrl-C, --timeout)."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import uuid

import pytest
import requests

from tests.cli.conftest import CLI, cli_env, run_on_terminal, write_conf
from tests.helpers.agent_processes import drain
from tests.helpers.serve_fixture import ExosuitServer

pytestmark = pytest.mark.slow

VERSION = "2.6"
DEADLINE = 60.0
FUNCTION = "f0f0f0f0-0000-4000-8000-000000000001"
STATES = ("pending", "fetching", "programming", "verifying", "done", "failed")


def start_server(base, text: str = "") -> ExosuitServer:
    return ExosuitServer(base / "data", [write_conf(base / "exosuit.conf", text)]).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = start_server(tmp_path_factory.mktemp("exosuit-cli-programs"))
    try:
        yield started
    finally:
        started.kill()


@pytest.fixture(scope="module")
def idle(tmp_path_factory):
    """A server whose agent reports once at start and then neither reports nor looks
    at its desired state for an hour."""
    text = "[agent]\ndesired_state_interval = 3600\n[serve]\nreport_interval = 3600\n"
    started = start_server(tmp_path_factory.mktemp("exosuit-cli-idle"), text)
    try:
        yield started
    finally:
        started.kill()


def api_get(server, path: str) -> dict:
    headers = {"OpenStack-API-Version": f"accelerator {VERSION}"}
    r = requests.get(server.url + path, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def deployable(server, driver: str = "fake") -> dict:
    found = [
        d for d in api_get(server, "/v2/deployables")["deployables"] if d["driver_name"] == driver
    ]
    assert len(found) == 1, found
    return found[0]


def upload(cli: CLI, tmp_path, data: bytes, name: str | None = None) -> dict:
    name = name or f"sim-{uuid.uuid4().hex[:6]}"
    path = tmp_path / f"{name}.bin"
    path.write_bytes(data)
    return cli.json(
        "image", "upload", "--name", name, "--image-format", "simulated",
        "--function-id", FUNCTION, str(path),
    )  # fmt: skip


def wait_ended(server, deployable_uuid: str) -> dict | None:
    """The deployable's latest program once it ended (None: it never had one)."""
    deadline = time.monotonic() + DEADLINE
    headers = {"OpenStack-API-Version": f"accelerator {VERSION}"}
    while True:
        r = requests.get(
            f"{server.url}/v2/deployables/{deployable_uuid}/program", headers=headers, timeout=10
        )
        if r.status_code == 404:
            return None
        program = r.json()
        if program["state"] in ("done", "failed"):
            return program
        assert time.monotonic() < deadline, program
        time.sleep(0.2)


def progress_lines(stderr: str, program: str) -> list[str]:
    """The states the waiting showed, one plain line per change (not a terminal)."""
    pattern = re.compile(rf"^program {program} of image \S+: (\w+)$")
    return [m.group(1) for line in stderr.splitlines() if (m := pattern.match(line))]


def test_program_wait_loads_the_image(server, tmp_path):
    cli = CLI(server.url)
    fpga = deployable(server)
    image = upload(cli, tmp_path, b"a simulated bitstream\n" * 8)
    result = cli.run("deployable", "program", fpga["uuid"], image["name"], "--wait", "-f", "json")
    program = json.loads(result.stdout)
    assert (program["state"], program["image_uuid"]) == ("done", image["uuid"])
    shown = progress_lines(result.stderr, program["uuid"])
    # The last line is the state it ended in (a pipe is not a terminal: the lines stay).
    assert shown[-1] == "done", result.stderr
    assert set(shown[:-1]) <= set(STATES[:4]), result.stderr
    assert shown == sorted(shown, key=STATES.index)  # forward only
    status = cli.json("deployable", "program-status", fpga["uuid"])
    assert status == program
    assert cli.json("deployable", "show", fpga["uuid"])["bitstream_id"] == image["uuid"]
    # The image loaded already: done at once, and said so.
    again = cli.json("deployable", "program", fpga["uuid"], image["uuid"])
    assert (again["state"], again["reason"]) == ("done", "already loaded")


def test_a_failed_program_exits_1_saying_why(server, tmp_path):
    cli = CLI(server.url)
    fpga = deployable(server)
    loaded = api_get(server, f"/v2/deployables/{fpga['uuid']}")["bitstream_id"]
    image = upload(cli, tmp_path, b"#exosuit-simulated fail=load\n" + uuid.uuid4().bytes)
    result = cli.run(
        "deployable", "program", fpga["uuid"], image["uuid"], "--wait", "-f", "json", check=False
    )
    assert result.returncode == 1, result
    program = json.loads(result.stdout)
    assert program["state"] == "failed" and "fail=load" in program["reason"]
    assert program["restored"] is (True if loaded else None)
    assert result.stderr.splitlines()[-1] == (
        f"error: program {program['uuid']} failed: {program['reason']}"
    )
    assert api_get(server, f"/v2/deployables/{fpga['uuid']}")["bitstream_id"] == loaded


def test_refusals_are_one_line_each(server, tmp_path):
    cli = CLI(server.url)
    image = upload(cli, tmp_path, b"another simulated bitstream")
    gpu = deployable(server, "nvidia_gpu")
    result = cli.run("deployable", "program", gpu["uuid"], image["uuid"], check=False)
    assert result.returncode == 1 and "cannot program it" in result.stderr
    result = cli.run("deployable", "program", gpu["uuid"], "no-such-image", check=False)
    assert result.returncode == 1 and "could not be found" in result.stderr
    # A held attach handle: drain it first.
    fpga = deployable(server)
    wait_ended(server, fpga["uuid"])
    arq = bind(server, fpga)
    try:
        result = cli.run("deployable", "program", fpga["uuid"], image["uuid"], check=False)
        assert result.returncode == 1, result
        assert "drain it first: ARQ " + arq[:8] in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        r = requests.delete(f"{server.url}/v2/accelerator_requests/{arq}", timeout=10)
        assert r.status_code == 204, r.text
    result = cli.run(
        "--os-accelerator-api-version", "2.5", "deployable", "program-status", fpga["uuid"],
        check=False,
    )  # fmt: skip
    assert result.returncode == 1 and "needs API 2.6" in result.stderr


def bind(server, fpga: dict) -> str:
    """An ARQ bound to the FPGA (the noauth admin holds a service token)."""
    name = f"one-fpga-{uuid.uuid4().hex[:6]}"
    group = {"resources:FPGA": "1"}
    r = requests.post(
        f"{server.url}/v2/device_profiles", json=[{"name": name, "groups": [group]}], timeout=10
    )
    assert r.status_code == 201, r.text
    r = requests.post(
        f"{server.url}/v2/accelerator_requests", json={"device_profile_name": name}, timeout=10
    )
    [arq] = r.json()["arqs"]
    ops = [
        {"op": "add", "path": "/hostname", "value": server.host},
        {"op": "add", "path": "/device_rp_uuid", "value": fpga["rp_uuid"]},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    r = requests.patch(f"{server.url}/v2/accelerator_requests", json={arq["uuid"]: ops}, timeout=10)
    assert r.status_code == 202, r.text
    return arq["uuid"]


# -- a program that stays pending ----------------------------------------------------------------


def test_without_wait_the_program_is_shown_pending(idle, tmp_path):
    cli = CLI(idle.url)
    fpga = deployable(idle)
    image = upload(cli, tmp_path, b"pending bitstream")
    program = cli.json("deployable", "program", fpga["uuid"], image["uuid"])
    assert (program["state"], program["image_uuid"]) == ("pending", image["uuid"])
    assert cli.json("deployable", "program-status", fpga["uuid"])["state"] == "pending"
    # The same request again is the same program; waiting for it gives up at --timeout.
    result = cli.run(
        "deployable", "program", fpga["uuid"], image["uuid"], "--wait", "--timeout", "2",
        check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: gave up waiting after 2 s: program {program['uuid']} is still pending "
        f"(it goes on; see `exosuit deployable program-status {fpga['uuid']}`)"
    )
    # On a terminal the state turns with a spinner.
    code, out = run_on_terminal(
        [cli.script, "--os-endpoint", cli.url, "deployable", "program", fpga["uuid"],
         image["uuid"], "--wait", "--timeout", "2"],
        120,
        cli_env(),
    )  # fmt: skip
    assert code == 1, out
    spinner = rf"\r\x1b\[K[|/\\-] program {program['uuid']} of image {image['uuid']}: "
    assert re.search(spinner + r"\x1b\[33mpending\x1b\[0m", out), out


def test_ctrl_c_stops_the_waiting_not_the_program(idle, tmp_path):
    cli = CLI(idle.url)
    fpga = deployable(idle)
    # The pending program of the test before, when this module runs whole; its own one
    # otherwise (run alone, or if that program ended meanwhile).
    headers = {"OpenStack-API-Version": f"accelerator {VERSION}"}
    r = requests.get(
        f"{idle.url}/v2/deployables/{fpga['uuid']}/program", headers=headers, timeout=10
    )
    if r.status_code == 200:
        image_uuid = r.json()["image_uuid"]
    else:
        assert r.status_code == 404, r.text
        image_uuid = upload(cli, tmp_path, b"pending bitstream")["uuid"]
    process = subprocess.Popen(
        [cli.script, "--os-endpoint", cli.url, "deployable", "program", fpga["uuid"],
         image_uuid, "--wait", "-f", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )  # fmt: skip
    progress: list[str] = []
    reader = threading.Thread(target=drain, args=(process.stderr, progress), daemon=True)
    reader.start()
    deadline = time.monotonic() + DEADLINE
    while not progress:
        assert time.monotonic() < deadline, "no progress line"
        time.sleep(0.1)
    process.send_signal(2)  # SIGINT, as Ctrl-C
    code = process.wait(timeout=DEADLINE)
    reader.join(timeout=10)
    assert code == 130
    with process.stdout as stdout:
        program = json.loads(stdout.read())
    assert program["state"] == "pending"
    assert progress[-1] == (
        f"stopped waiting: program {program['uuid']} goes on on its host "
        f"(`exosuit deployable program-status {fpga['uuid']}`)\n"
    )
    assert "Traceback" not in "".join(progress)
    assert api_get(idle, f"/v2/deployables/{fpga['uuid']}/program")["state"] == "pending"
