"""A ResourceClaim prepared for real: the plugin process (called over its Unix socket
by a gRPC client built from its protos), a real ``exosuit serve`` whose claims API
holds the devices and whose agent writes their CDI specs, the stand-in Kubernetes API
server holding the ResourceClaims (kube_standin.py).

Prepare, prepare again, restart the plugin, prepare again (the same CDI ids, from the
checkpoint), unprepare twice; a device Nova's side took; a crash between asking
Exosuit and noting it.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import requests

from exosuit.kubelet import checkpoint
from exosuit.kubelet.checkpoint import ClaimEntry
from tests.helpers.serve_fixture import ExosuitServer
from tests.kubelet.kube_standin import KubeStandIn
from tests.kubelet.plugin_process import DEADLINE, PluginProcess, short_dir, version_of

pytestmark = pytest.mark.slow

NODE = "kube-node"
V2_8 = {"OpenStack-API-Version": "accelerator 2.8"}
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class Exosuit:
    """The real API of the ``exosuit serve`` under test (noauth: admin)."""

    def __init__(self, server: ExosuitServer, cdi_dir: Path) -> None:
        self.url = server.url
        self.cdi_dir = cdi_dir

    def claims(self, **params: str) -> list[dict]:
        r = requests.get(f"{self.url}/v2/claims", params=params, headers=V2_8, timeout=30)
        assert r.status_code == 200, r.text
        return [c for c in r.json()["claims"] if c["state"] != "released"]

    def claim(self, body: dict) -> dict:
        r = requests.post(f"{self.url}/v2/claims", json=body, headers=V2_8, timeout=30)
        assert r.status_code in (201, 202), r.text
        return r.json()

    def release(self, uuid: str) -> None:
        r = requests.delete(f"{self.url}/v2/claims/{uuid}", headers=V2_8, timeout=30)
        assert r.status_code == 204, r.text

    def spec_files(self) -> list[str]:
        return sorted(p.name for p in self.cdi_dir.glob("*.json")) if self.cdi_dir.exists() else []


@pytest.fixture(scope="module")
def exosuit(tmp_path_factory):
    base = tmp_path_factory.mktemp("exosuit-e2e")
    conf = base / "exosuit.conf"
    conf.write_text(f"[DEFAULT]\nhost = {NODE}\n[cdi]\nspec_dir = {base / 'cdi'}\n")
    started = ExosuitServer(base / "data", [conf])
    try:
        started.start()
        api = Exosuit(started, base / "cdi")
        r = requests.get(f"{started.url}/v2", timeout=30)
        if version_of(r.json()["max_version"]) < (2, 8):
            pytest.fail("exosuit serve has no claims API (2.8)")
        yield api
    finally:
        started.kill()


@pytest.fixture(scope="module")
def standin():
    started = KubeStandIn().start()
    started.add_node(NODE)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def plugin(exosuit, standin, tmp_path_factory):
    base = short_dir()
    kubeconfig = standin.kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
    process = PluginProcess(base, NODE, exosuit.url, kubeconfig)
    try:
        yield process.start()
    finally:
        process.kill()
        shutil.rmtree(base, ignore_errors=True)


def wait_until(condition, what: str):
    deadline = time.monotonic() + DEADLINE
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {DEADLINE} s: {what}"
        time.sleep(0.1)


def published(standin: KubeStandIn) -> dict[str, dict]:
    """The devices of the node's slices, by name."""
    return {d["name"]: d for s in standin.slices_of(NODE) for d in s["spec"].get("devices", [])}


def free_devices(standin: KubeStandIn, kind: str, count: int, exclude=()) -> list[dict]:
    devices = wait_until(lambda: published(standin), "the node's ResourceSlices")
    found = [
        d
        for name, d in sorted(devices.items())
        if d["attributes"]["type"]["string"] == kind and name not in exclude
    ]
    assert len(found) >= count
    return found[:count]


def slice_lists(standin: KubeStandIn) -> int:
    """How many times the slices were listed (once per sync)."""
    with standin.lock:
        return sum(1 for r in standin.requests if r == ("GET", SLICES))


def results(devices: list[dict], request: str = "fpga") -> list[dict]:
    return [
        {"request": request, "driver": "exosuit.dev", "pool": NODE, "device": d["name"]}
        for d in devices
    ]


def prepare_until_ready(plugin: PluginProcess, claim, version: str = "v1"):
    """NodePrepareResources as the kubelet calls it: again while the claim's CDI specs
    are not written yet (the plugin says so in the claim's error)."""
    deadline = time.monotonic() + 3 * DEADLINE
    while True:
        answer = plugin.prepare([claim], version).claims[claim[1]]
        if "not ready yet" not in answer.error or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def answered(answer) -> list[tuple]:
    return [
        (tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids))
        for d in answer.devices
    ]


def test_prepare_restart_prepare_unprepare(plugin, standin, exosuit):
    devices = free_devices(standin, "FPGA", 2)
    uid = standin.add_claim("ml", "two-fpgas", results(devices))
    claim = ("ml", uid, "two-fpgas")
    consumer = f"k8s:ml/two-fpgas/{uid}"

    first = prepare_until_ready(plugin, claim)
    assert first.error == ""
    [held] = exosuit.claims(consumer=consumer)
    assert held["state"] == "bound" and held["cdi"]["state"] == "written"
    assert held["hostname"] == NODE and held["container"] is True
    handles = [d["attributes"]["attachHandleUuid"]["string"] for d in devices]
    assert sorted(d["attach_handle_uuid"] for d in held["devices"]) == sorted(handles)
    cdi_of = {d["attach_handle_uuid"]: d["cdi_device"] for d in held["devices"]}
    assert answered(first) == [
        (("fpga",), NODE, d["name"], (cdi_of[h],)) for d, h in zip(devices, handles, strict=True)
    ]
    assert all(c.startswith(f"exosuit.dev/fpga={held['uuid']}-") for c in cdi_of.values())
    spec_name = f"exosuit.dev-fpga_{held['uuid']}.json"
    assert spec_name in exosuit.spec_files()
    spec = json.loads((exosuit.cdi_dir / spec_name).read_text())
    assert {f"exosuit.dev/fpga={d['name']}" for d in spec["devices"]} == set(cdi_of.values())

    # The same call again: the same answer, no second claim.
    assert answered(plugin.prepare([claim]).claims[uid]) == answered(first)
    assert [c["uuid"] for c in exosuit.claims(consumer=consumer)] == [held["uuid"]]

    # The devices stay in the slices (a Kubernetes claim holds them): two more syncs
    # (lists of the slices) since the claim was made, and nothing written.
    writes, syncs = len(standin.writes), slice_lists(standin)
    wait_until(lambda: slice_lists(standin) >= syncs + 2, "two more syncs")
    assert {d["name"] for d in devices} <= set(published(standin))
    assert len(standin.writes) == writes

    # Restart: the answer comes from the checkpoint. The ResourceClaim is gone from the
    # API server meanwhile, so a plugin that read it again would fail.
    assert plugin.stop() == 0
    entry = checkpoint.read(plugin.checkpoint)[uid]
    assert entry.prepared and entry.claim_uuid == held["uuid"]
    saved = standin.claims.pop(("ml", "two-fpgas"))
    plugin.start()
    again = plugin.prepare([claim]).claims[uid]
    assert again.error == "" and answered(again) == answered(first)
    standin.claims[("ml", "two-fpgas")] = saved

    # Unprepare: the claim released, its CDI spec removed, the entry gone; twice.
    for _ in range(2):
        assert plugin.unprepare([claim]).claims[uid].error == ""
        assert exosuit.claims(consumer=consumer) == []
        assert uid not in checkpoint.read(plugin.checkpoint)
    wait_until(lambda: spec_name not in exosuit.spec_files(), "the CDI spec removed")


def test_v1beta1_prepares_as_v1_does(plugin, standin, exosuit):
    [gpu] = free_devices(standin, "GPU", 1)
    uid = standin.add_claim("default", "one-gpu", results([gpu], "gpu"))
    claim = ("default", uid, "one-gpu")
    answer = prepare_until_ready(plugin, claim, "v1beta1")
    assert answer.error == ""
    [(requests_, pool, name, (cdi,))] = answered(answer)
    assert (requests_, pool, name) == (("gpu",), NODE, gpu["name"])
    [held] = exosuit.claims(consumer=f"k8s:default/one-gpu/{uid}")
    assert cdi == f"exosuit.dev/gpu={held['uuid']}-0"
    assert plugin.unprepare([claim], "v1beta1").claims[uid].error == ""
    assert exosuit.claims(consumer=f"k8s:default/one-gpu/{uid}") == []


def test_a_device_held_elsewhere_fails_that_claim_only(plugin, standin, exosuit):
    """A standalone claim (or Nova) took a device the scheduler chose: that claim's
    prepare says why, the other claim of the call is prepared; the device leaves the
    slices, and comes back once released."""
    taken, free = free_devices(standin, "FPGA", 2)
    other = exosuit.claim(
        {
            "attach_handles": [taken["attributes"]["attachHandleUuid"]["string"]],
            "hostname": NODE,
            "consumer": "batch job 7",
        }
    )
    wait_until(lambda: taken["name"] not in published(standin), "the held device unpublished")
    lost = standin.add_claim("default", "too-late", results([taken]))
    fine = standin.add_claim("default", "in-time", results([free]))
    response = plugin.prepare([("default", lost, "too-late"), ("default", fine, "in-time")])
    assert set(response.claims) == {lost, fine}
    assert "Exosuit refused the claim" in response.claims[lost].error
    assert exosuit.claims(consumer=f"k8s:default/too-late/{lost}") == []
    assert (
        lost not in checkpoint.read(plugin.checkpoint)
        or not checkpoint.read(plugin.checkpoint)[lost].prepared
    )
    answer = prepare_until_ready(plugin, ("default", fine, "in-time"))
    assert answer.error == ""
    for uid, name in ((lost, "too-late"), (fine, "in-time")):
        assert plugin.unprepare([("default", uid, name)]).claims[uid].error == ""
    exosuit.release(other["uuid"])
    wait_until(lambda: taken["name"] in published(standin), "the device published again")


def test_after_a_crash_between_asking_and_noting(plugin, standin, exosuit):
    """The plugin died after Exosuit made the claim and before the checkpoint said
    which: prepare finds the claim by its consumer (no second one), and so does
    unprepare."""
    [device] = free_devices(standin, "FPGA", 1)
    uid = standin.add_claim("default", "crashed", results([device]))
    claim = ("default", uid, "crashed")
    consumer = f"k8s:default/crashed/{uid}"
    assert plugin.stop() == 0
    claims = checkpoint.read(plugin.checkpoint)
    checkpoint.write(plugin.checkpoint, {**claims, uid: ClaimEntry("default", "crashed")})
    made = exosuit.claim(
        {
            "attach_handles": [device["attributes"]["attachHandleUuid"]["string"]],
            "hostname": NODE,
            "consumer": consumer,
            "container": True,
        }
    )
    plugin.start()
    answer = prepare_until_ready(plugin, claim)
    assert answer.error == ""
    assert answered(answer)[0][3] == (f"exosuit.dev/fpga={made['uuid']}-0",)
    assert [c["uuid"] for c in exosuit.claims(consumer=consumer)] == [made["uuid"]]

    # Crashed again, before noting the claim: unprepare still releases it.
    assert plugin.stop() == 0
    claims = checkpoint.read(plugin.checkpoint)
    checkpoint.write(plugin.checkpoint, {**claims, uid: ClaimEntry("default", "crashed")})
    plugin.start()
    assert plugin.unprepare([claim]).claims[uid].error == ""
    assert exosuit.claims(consumer=consumer) == []
