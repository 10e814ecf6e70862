"""doc/operations.md, step by step, against a real ``exosuit serve``: the simulated
devices' metrics at /metrics (and the Grafana dashboard's queries answered by them), a
claim seen as the holder, the FPGA drained while held (new claims refused), drained once
the claim is released (``--wait``), given a partition layout of 4 functions by its agent
while drained, undrained, the audit trail of all of it read (API and ``exosuit audit
list``), and the GPU's partitions read."""

from __future__ import annotations

import json
import time
import uuid

import requests

from tests.cli.conftest import HOST
from tests.cli.test_cli_drain import Waiting, _release
from tests.deploy.test_grafana_dashboard import load, unknown_names
from tests.helpers.metrics import Scrape

FPGA = "0000:0c:00.0"
DEADLINE = 60.0


def _metrics(server) -> Scrape:
    # The per-device series need credentials (doc/metrics.md, "Who sees what"): noauth
    # takes any bearer token as an admin's, as a Prometheus scrape sends it.
    headers = {"Accept-Encoding": "gzip", "Authorization": "Bearer noauth"}
    r = requests.get(f"{server.url}/metrics", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Encoding"] == "gzip"  # as Prometheus asks; requests undoes it
    return Scrape(r.text)


def _partitions(server, device: str, layout: dict | None = None) -> dict:
    """GET the device's partitions, or PUT ``layout`` (API 2.9)."""
    url = f"{server.url}/v2/devices/{device}/partitions"
    headers = {"OpenStack-API-Version": "accelerator 2.9"}
    if layout is None:
        r = requests.get(url, headers=headers, timeout=10)
        assert r.status_code == 200, r.text
    else:
        r = requests.put(url, json=layout, headers=headers, timeout=10)
        assert r.status_code == 202, r.text
    return r.json()


def _eventually(check, what: str):
    deadline = time.monotonic() + DEADLINE
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {DEADLINE} s: {what}"
        time.sleep(0.2)


def test_the_newcomer_walkthrough(server, cli, api):
    devices = {d["pci_address"]: d for d in api.list("/v2/devices", "devices", version="2.9")}
    fpga = devices[FPGA]
    (gpu,) = [d for d in devices.values() if d["type"] == "GPU"]

    # 2. The devices' metrics.
    found = _metrics(server)
    for address, device in devices.items():
        (info,) = found.of("exosuit_device_info", device_uuid=device["uuid"])
        assert info.labels["hostname"] == HOST and info.labels["pci_address"] == address
        assert (info.labels["status"], info.labels["activation"]) == ("enabled", "ready")
    assert found.value("exosuit_device_attach_handles", device_uuid=fpga["uuid"], state="free") > 0
    assert 0 <= found.value("exosuit_device_utilization_percent", device_uuid=gpu["uuid"]) <= 100
    assert found.of("exosuit_device_memory_used_bytes", device_uuid=gpu["uuid"])
    assert found.of("exosuit_device_errors_total", device_uuid=fpga["uuid"])
    assert found.of("exosuit_host_report_age_seconds", hostname=HOST)
    assert found.of("exosuit_job_queue_depth") and found.of("exosuit_placement_sync_lag_seconds")
    assert found.types["exosuit_api_request_duration_seconds"] == "histogram"

    # 3. Who holds what.
    cli.run("profile", "create", "fpga-1", "--group", "resources:FPGA=1")
    claim = cli.json("claim", "create", "--profile", "fpga-1", "--consumer", "walkthrough")
    found = _metrics(server)
    (holder,) = found.of("exosuit_device_holder", claim_uuid=claim["uuid"])
    assert holder.labels["device_uuid"] == fpga["uuid"] and holder.labels["instance_uuid"] == ""
    assert (
        found.value("exosuit_device_attach_handles", device_uuid=fpga["uuid"], state="in_use") == 1
    )
    # The dashboard reads only what this server exports (held devices included).
    assert unknown_names(load(), found) == []

    # 4. Drain the FPGA: the claim keeps it, new claims are refused.
    table = cli.run("device", "drain", fpga["uuid"]).stdout
    assert "draining" in table and f"(claim {claim['uuid']})" in table
    refused = cli.run(
        "claim", "create", "--profile", "fpga-1", "--consumer", "another", check=False
    )
    assert refused.returncode == 1 and "exosuit.claim.unsatisfiable" in refused.stderr
    found = _metrics(server)
    assert found.of("exosuit_device_info", device_uuid=fpga["uuid"])[0].labels["status"] == (
        "maintaining"
    )
    assert found.of("exosuit_device_holder", claim_uuid=claim["uuid"])
    waiting = Waiting(cli, "device", "drain", fpga["uuid"], "--wait")
    waiting.saw(f"device {fpga['uuid']}: draining, 1 attach handle(s) still held")
    _release(api, claim)
    status, stdout = waiting.result()
    assert status == 0, waiting.lines
    assert json.loads(stdout)["maintenance"] == "drained"
    shown = cli.json(
        "device", "show", fpga["uuid"], "-c", "status", "-c", "maintenance", "-c", "holders"
    )
    assert shown == {"status": "maintaining", "maintenance": "drained", "holders": []}
    assert not _metrics(server).of("exosuit_device_holder", device_uuid=fpga["uuid"])

    # 5. Maintenance on the drained FPGA: 4 functions instead of 16, applied by the agent.
    answer = _partitions(server, fpga["uuid"], {"vfs": 4})
    assert (answer["layout"], answer["state"]) == ({"vfs": 4}, "applying")
    applied = _eventually(
        lambda: (
            (p := _partitions(server, fpga["uuid"]))["state"] == "applied"
            and len(p["slices"]) == 4
            and p
        ),
        "the agent applied the layout and reported 4 functions",
    )
    assert {(s["type"], s["in_use"]) for s in applied["slices"]} == {("vf", False)}
    # … the same from the command line (set again: unchanged, applied at once).
    assert cli.json("partition", "set", fpga["uuid"], "--vfs", "4", "--wait")["state"] == "applied"
    assert "vf: 4 (0 in use)" in cli.run("partition", "show", fpga["uuid"]).stdout
    _eventually(
        lambda: (
            _metrics(server)
            .of("exosuit_device_attach_handles", device_uuid=fpga["uuid"], state="free")[0]
            .value
            == 4
        ),
        "/metrics counts the 4 functions",
    )
    assert cli.json("device", "undrain", fpga["uuid"])["status"] == "enabled"
    again = cli.json("claim", "create", "--profile", "fpga-1", "--consumer", "after")
    assert again["devices"][0]["device_uuid"] == fpga["uuid"]
    cli.run("claim", "release", again["uuid"])

    # 6. The audit trail: who set the layout (the admin), who applied it (the host).
    trail = api.list("/v2/audit_events", "audit_events", version="2.9", object_uuid=fpga["uuid"])
    by_action = {e["action"]: e for e in trail}
    assert by_action["partition"]["after"]["layout"] == {"vfs": 4}
    assert by_action["partition"]["actor"].endswith(":admin")  # serve: noauth, admin
    assert by_action["partition.applied"]["actor"] == f"host:{HOST}"
    assert [e["id"] for e in trail] == sorted((e["id"] for e in trail), reverse=True)
    (profile,) = api.list(
        "/v2/audit_events", "audit_events", version="2.9", object_type="device_profile"
    )
    assert (profile["action"], profile["after"]["name"]) == ("create", "fpga-1")
    # … from the command line: the drain, the layout, the undrain, newest first.
    actions = [e["action"] for e in cli.json("audit", "list", "--object", fpga["uuid"])]
    order = ("undrain", "partition.applied", "partition", "drain")
    assert [actions.index(a) for a in order] == sorted(actions.index(a) for a in order), actions
    claimed = cli.json("audit", "list", "--object", claim["uuid"])
    assert [e["action"] for e in claimed] == ["release", "create"]

    # 7. Health: a fault injected through the simulated driver's file holds the GPU back.
    faults = server.data_dir / "agent" / "drivers" / "simulated" / "health.json"
    faults.parent.mkdir(parents=True, exist_ok=True)
    faults.write_text(json.dumps({"nvidia_gpu": {"state": "unhealthy", "reason": "XID 79"}}))

    def gpu_info():
        cli.run("discover-services", "--host", HOST, "--wait")
        (info,) = _metrics(server).of("exosuit_device_info", device_uuid=gpu["uuid"])
        return info.labels

    held = _eventually(lambda: (i := gpu_info())["health"] == "unhealthy" and i, "unhealthy")
    assert held["health_offered"] == "false"
    faults.write_text("{}")
    _eventually(lambda: gpu_info()["health"] == "ok", "healthy again")
    cli.run("device", "health", gpu["uuid"], "--clear")
    (info,) = _metrics(server).of("exosuit_device_info", device_uuid=gpu["uuid"])
    assert (info.labels["health"], info.labels["health_offered"]) == ("ok", "true")

    # The GPU: one whole slice, free.
    partitions = _partitions(server, gpu["uuid"])
    assert (partitions["device_uuid"], partitions["layout"]) == (gpu["uuid"], None)
    assert [(s["type"], s["in_use"]) for s in partitions["slices"]] == [("whole", False)]
    assert str(uuid.UUID(partitions["slices"][0]["attach_handle_uuid"]))
