"""``exosuit device drain|undrain`` and ``exosuit host drain|undrain`` (API 2.9,
doc/devices.md "Drain") against a real ``exosuit serve``: a claimed simulated device
drains while its claim holds it (the holder shown), ``--wait`` shows the progress until
the claim is released, ``device show`` and ``host show`` give the maintenance, and
undraining offers the devices again."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid

import requests

from tests.cli.conftest import HOST, cli_env

V = "2.9"
DEADLINE = 60.0
FPGA = "0000:0c:00.0"  # the simulated FPGA of exosuit serve's host


def _fpga(api) -> dict:
    return next(
        d for d in api.list("/v2/devices", "devices", version=V) if d["pci_address"] == FPGA
    )


def _claim(api, cli) -> dict:
    name = f"drain-{uuid.uuid4().hex[:8]}"
    cli.run("profile", "create", name, "--group", "resources:FPGA=1")
    body = {"device_profile_name": name, "hostname": HOST, "consumer": name}
    return api.post("/v2/claims", body, version="2.8")


def _release(api, claim: dict) -> None:
    r = requests.delete(
        f"{api.url}/v2/claims/{claim['uuid']}",
        headers={"OpenStack-API-Version": "accelerator 2.8"},
        timeout=10,
    )
    assert r.status_code == 204, r.text


class Waiting:
    """A ``--wait`` command running in the background, its stderr read line by line."""

    def __init__(self, cli, *args: str) -> None:
        argv = [cli.script, "--os-endpoint", cli.url, *args, "-f", "json"]
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env()
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with self.process.stderr:
            for line in self.process.stderr:
                self.lines.append(line.rstrip("\n"))

    def saw(self, text: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not any(text in line for line in self.lines):
            assert self.process.poll() is None, f"ended: {self.lines}"
            assert time.monotonic() < deadline, f"never showed {text!r}: {self.lines}"
            time.sleep(0.1)

    def result(self) -> tuple[int, str]:
        # Not communicate(): the reader thread owns stderr.
        with self.process.stdout:
            stdout = self.process.stdout.read()
        self.process.wait(timeout=DEADLINE)
        self._reader.join(timeout=10)
        return self.process.returncode, stdout


def test_a_held_device_drains_once_its_claim_is_released(cli, api):
    device = _fpga(api)
    claim = _claim(api, cli)
    (held,) = claim["devices"]
    assert held["device_uuid"] == device["uuid"]

    answer = cli.json("device", "drain", device["uuid"])
    assert (answer["status"], answer["maintenance"]) == ("maintaining", "draining")
    assert [h["claim_uuid"] for h in answer["holders"]] == [claim["uuid"]]
    table = cli.run("device", "drain", device["uuid"]).stdout  # idempotent; holders readable
    assert f"(claim {claim['uuid']})" in table and "draining" in table
    shown = cli.json("device", "show", device["uuid"])
    assert (shown["maintenance"], shown["holders"]) == ("draining", answer["holders"])
    listed = cli.json("device", "list", "--status", "maintaining", "--long")
    assert [(d["uuid"], d["maintenance"]) for d in listed] == [(device["uuid"], "draining")]

    waiting = Waiting(cli, "device", "drain", device["uuid"], "--wait")
    waiting.saw(f"device {device['uuid']}: draining, 1 attach handle(s) still held")
    _release(api, claim)
    status, stdout = waiting.result()
    assert status == 0, waiting.lines
    drained = json.loads(stdout)
    assert (drained["maintenance"], drained["holders"]) == ("drained", [])
    assert cli.json("device", "show", device["uuid"])["maintenance"] == "drained"

    undrained = cli.json("device", "undrain", device["uuid"])
    assert (undrained["status"], undrained["maintenance"]) == ("enabled", None)
    assert _fpga(api)["status"] == "enabled"


def test_a_host_drains_with_every_device_and_is_undrained(cli, api):
    claim = _claim(api, cli)
    waiting = Waiting(cli, "host", "drain", HOST, "--wait")
    waiting.saw(f"host {HOST}: draining, 1 attach handle(s) still held")
    shown = cli.json("host", "show", HOST)
    assert shown["maintenance"] == "draining" and shown["drained_at"]
    assert [h["claim_uuid"] for h in shown["holders"]] == [claim["uuid"]]
    _release(api, claim)
    status, stdout = waiting.result()
    assert status == 0, waiting.lines
    assert f"host {HOST}: drained" in waiting.lines
    rows = json.loads(stdout)
    devices = api.list("/v2/devices", "devices", version=V, hostname=HOST)
    assert {r["uuid"] for r in rows} == {d["uuid"] for d in devices}
    assert {(r["status"], r["maintenance"]) for r in rows} == {("maintaining", "drained")}
    assert cli.json("host", "show", HOST)["maintenance"] == "drained"
    long = cli.json("host", "list", "--long")
    assert [(h["hostname"], h["maintenance"]) for h in long] == [(HOST, "drained")]

    undrained = cli.run("host", "undrain", HOST, "-f", "json")
    assert f"host {HOST}: not drained" in undrained.stderr
    assert {r["status"] for r in json.loads(undrained.stdout)} == {"enabled"}
    assert cli.json("host", "show", HOST)["maintenance"] is None


def test_unknown_names_and_older_apis_are_refused_clearly(cli):
    missing = cli.run("device", "drain", str(uuid.uuid4()), check=False)
    assert missing.returncode == 1 and "exosuit.device.not_found" in missing.stderr
    missing = cli.run("host", "undrain", "nowhere", check=False)
    assert missing.returncode == 1 and "exosuit.host.not_found" in missing.stderr
    old = cli.run("--os-accelerator-api-version", "2.8", "host", "drain", HOST, check=False)
    assert old.returncode == 1 and "2.9" in old.stderr
