"""``exosuit partition show|set`` (API 2.9, doc/devices.md "Partitions") against a real
``exosuit serve``: its agent applies the layouts to the simulated devices (the FPGA's
functions as VFs, the H100's MIG instances), ``--wait`` waits for the outcome, the
slices follow, a layout that would remove a slice in use is refused, and one the device
cannot make fails with its reason."""

from __future__ import annotations

import json
import uuid

import requests

from tests.cli.conftest import HOST

V = "2.9"
FPGA = "0000:0c:00.0"  # the simulated FPGA of exosuit serve's host
GPU = "0000:84:00.0"  # its simulated GPU: an H100 (MIG profiles, no vGPU type)


def _device(api, address: str) -> dict:
    return next(
        d for d in api.list("/v2/devices", "devices", version=V) if d["pci_address"] == address
    )


def test_layouts_are_applied_by_the_agent_and_slices_follow(cli, api):
    fpga = _device(api, FPGA)["uuid"]
    shown = cli.json("partition", "show", fpga)
    assert (shown["layout"], shown["state"]) == (None, None)
    assert {s["type"] for s in shown["slices"]} == {"vf"} and len(shown["slices"]) == 16

    applied = cli.json("partition", "set", fpga, "--vfs", "4", "--wait", "--timeout", "120")
    assert (applied["layout"], applied["state"]) == ({"vfs": 4}, "applied")
    # The agent reports at once after applying: the slices are there when it says so.
    assert len(cli.json("partition", "show", fpga)["slices"]) == 4
    table = cli.run("partition", "show", fpga).stdout
    assert "vf: 4 (0 in use)" in table and "applied" in table

    gpu = _device(api, GPU)["uuid"]
    mig = cli.json("partition", "set", gpu, "--mig", "1g.10gb=3", "--wait", "--timeout", "120")
    assert mig["state"] == "applied"
    slices = cli.json("partition", "show", gpu)["slices"]
    assert [(s["attach_type"], s["type"]) for s in slices] == [("MIG", "1g.10gb")] * 3


def test_a_layout_the_device_cannot_make_fails_with_its_reason(cli, api):
    gpu = _device(api, GPU)["uuid"]
    failed = cli.run(
        "partition",
        "set",
        gpu,
        "--vfs",
        "2",
        "--wait",
        "--timeout",
        "120",
        "-f",
        "json",
        check=False,
    )
    assert failed.returncode == 1, failed.stderr
    assert "has no SR-IOV VFs" in failed.stderr
    assert json.loads(failed.stdout)["state"] == "failed"


def test_a_layout_the_device_does_not_list_is_refused_at_once(cli, api):
    gpu = _device(api, GPU)["uuid"]
    refused = cli.run("partition", "set", gpu, "--mdev", "nvidia-223=1", check=False)
    assert refused.returncode == 1, refused.stderr
    assert "'nvidia-223' is not one of its vGPU (mdev) types" in refused.stderr
    assert "exosuit.partition.unsupported" in refused.stderr
    assert cli.json("partition", "show", gpu)["layout"] != {"mdev": {"nvidia-223": 1}}


def test_a_slice_in_use_is_never_removed(cli, api):
    fpga = _device(api, FPGA)["uuid"]
    cli.json("partition", "set", fpga, "--vfs", "4", "--wait", "--timeout", "120")
    name = f"part-{uuid.uuid4().hex[:8]}"
    cli.run("profile", "create", name, "--group", "resources:FPGA=1")
    body = {"device_profile_name": name, "hostname": HOST, "consumer": name}
    claim = api.post("/v2/claims", body, version="2.8")
    refused = cli.run("partition", "set", fpga, "--vfs", "2", check=False)
    assert refused.returncode == 1
    assert "exosuit.partition.in_use" in refused.stderr
    assert "changing the VF count removes every VF" in refused.stderr
    assert cli.json("partition", "show", fpga)["layout"] == {"vfs": 4}
    r = requests.delete(
        f"{api.url}/v2/claims/{claim['uuid']}",
        headers={"OpenStack-API-Version": "accelerator 2.8"},
        timeout=10,
    )
    assert r.status_code == 204, r.text
    again = cli.json("partition", "set", fpga, "--vfs", "2", "--wait", "--timeout", "120")
    assert again["state"] == "applied"


def test_bad_options_and_older_apis_are_refused_clearly(cli):
    both = cli.run("partition", "set", str(uuid.uuid4()), "--vfs", "2", "--mig", "x=1", check=False)
    assert both.returncode == 2 and "not allowed with" in both.stderr
    bad = cli.run("partition", "set", str(uuid.uuid4()), "--mdev", "nvidia-1", check=False)
    assert bad.returncode == 2 and "not TYPE=COUNT" in bad.stderr
    missing = cli.run("partition", "show", str(uuid.uuid4()), check=False)
    assert missing.returncode == 1 and "exosuit.device.not_found" in missing.stderr
    old = cli.run(
        "--os-accelerator-api-version", "2.8", "partition", "show", str(uuid.uuid4()), check=False
    )
    assert old.returncode == 1 and "2.9" in old.stderr
