"""``exosuit-kubelet-plugin`` as the kubelet meets it: a real process serving its gRPC
services on Unix sockets, called by a real gRPC client built from the plugin's protos;
a real ``exosuit serve`` (host ``kube-node``, its simulated FPGA and GPU) as Exosuit;
the stand-in Kubernetes API server (kube_standin.py) for ResourceClaims, the Node and
the ResourceSlices it publishes."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time

import grpc
import pytest
import requests

from tests.helpers.serve_fixture import ExosuitServer, _script
from tests.kubelet.kube_standin import KubeStandIn, slice_errors
from tests.kubelet.plugin_process import DEADLINE, PluginProcess, short_dir

pytestmark = pytest.mark.slow

NODE = "kube-node"


@pytest.fixture(scope="module")
def exosuit(tmp_path_factory):
    base = tmp_path_factory.mktemp("exosuit-kube")
    conf = base / "exosuit.conf"
    conf.write_text(f"[DEFAULT]\nhost = {NODE}\n[cdi]\nspec_dir = {base / 'cdi'}\n")
    started = ExosuitServer(base / "data", [conf])
    try:
        yield started.start()
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
def sockets():
    base = short_dir()
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def plugin(exosuit, standin, sockets, tmp_path_factory):
    kubeconfig = standin.kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
    process = PluginProcess(sockets, NODE, exosuit.url, kubeconfig)
    try:
        yield process.start()
    finally:
        process.kill()


def api_list(exosuit, path: str, key: str, **params) -> list[dict]:
    """Every item of an Exosuit list (2.7), following ``next``."""
    headers = {"OpenStack-API-Version": "accelerator 2.7"}
    body = requests.get(exosuit.url + path, params=params, headers=headers, timeout=30).json()
    items = body[key]
    while body.get("next"):
        body = requests.get(body["next"], headers=headers, timeout=30).json()
        items += body[key]
    return items


def wait_for_slices(standin: KubeStandIn) -> list[dict]:
    deadline = time.monotonic() + DEADLINE
    while not standin.slices_of(NODE):
        assert time.monotonic() < deadline, "no ResourceSlice published"
        time.sleep(0.1)
    return standin.slices_of(NODE)


# -- registration -----------------------------------------------------------------------------


def test_getinfo_names_the_dra_plugin_and_its_socket(plugin):
    info = plugin.info()
    assert info.type == "DRAPlugin"
    assert info.name == "exosuit.dev"
    assert info.endpoint == str(plugin.dra_socket.absolute())
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert plugin.registration_socket.is_socket() and plugin.dra_socket.is_socket()


def test_the_kubelets_verdict_is_heard(plugin):
    plugin.notify(False, "driver name clashes")
    plugin.wait_for_output("the kubelet refused the registration: driver name clashes")
    plugin.notify(True)
    plugin.wait_for_output("registered with the kubelet as exosuit.dev")


# -- ResourceSlices -----------------------------------------------------------------------------


def test_the_nodes_devices_are_published(plugin, standin, exosuit):
    [body] = wait_for_slices(standin)
    assert standin.refused == []
    assert slice_errors(body) == []
    assert body["spec"]["pool"]["name"] == NODE and body["spec"]["nodeName"] == NODE
    assert body["metadata"]["ownerReferences"][0]["uid"] == standin.nodes[NODE]["metadata"]["uid"]
    # exosuit serve's simulated host: the fake FPGA's 16 functions and a whole GPU, each
    # attach handle one device named after its PCI function.
    handles = api_list(exosuit, "/v2/attach_handles", "attach_handles", hostname=NODE)
    types = {d["uuid"]: d["type"].lower() for d in api_list(exosuit, "/v2/devices", "devices")}
    expected = {
        "{}-{domain}-{bus}-{device}-{function}".format(types[h["device_uuid"]], **h["attach_info"])
        for h in handles
    }
    assert len(expected) == len(handles) >= 17
    assert {d["name"] for d in body["spec"]["devices"]} == expected
    gpus = [d for d in body["spec"]["devices"] if d["attributes"]["type"] == {"string": "GPU"}]
    assert gpus and all("memory" in d.get("capacity", {}) for d in gpus)


# -- prepare and unprepare: what needs no claim ---------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_every_claim_gets_its_own_answer(plugin, standin, version):
    """A claim that is not there, one not allocated, one with another driver's devices
    only, one naming a device this node does not have: four answers in one call, each
    failure its own claim's error, never the call's."""
    missing_uid = "0c4c1f8e-1b9e-4c55-8f0e-000000000001"
    unallocated = standin.add_claim("default", f"waiting-{version}", None)
    other = standin.add_claim(
        "default",
        f"other-{version}",
        [{"request": "gpu", "driver": "gpu.example.com", "pool": NODE, "device": "gpu-0"}],
    )
    unknown = standin.add_claim(
        "default",
        f"unknown-{version}",
        [{"request": "fpga", "driver": "exosuit.dev", "pool": NODE, "device": "fpga-9999"}],
    )
    response = plugin.prepare(
        [
            ("default", missing_uid, "gone"),
            ("default", unallocated, f"waiting-{version}"),
            ("default", other, f"other-{version}"),
            ("default", unknown, f"unknown-{version}"),
        ],
        version,
    )
    assert set(response.claims) == {missing_uid, unallocated, other, unknown}
    assert "ResourceClaim default/gone not found" in response.claims[missing_uid].error
    assert "is not allocated" in response.claims[unallocated].error
    assert response.claims[other].error == "" and list(response.claims[other].devices) == []
    assert "fpga-9999" in response.claims[unknown].error


def test_a_claim_of_another_uid_is_refused(plugin, standin):
    standin.add_claim("default", "recreated", [])
    response = plugin.prepare([("default", "0c4c1f8e-0000-0000-0000-00000000000b", "recreated")])
    [answer] = response.claims.values()
    assert "deleted (and made again)" in answer.error


def test_another_nodes_pool_is_refused(plugin, standin):
    uid = standin.add_claim(
        "default",
        "elsewhere",
        [{"request": "fpga", "driver": "exosuit.dev", "pool": "node-b", "device": "fpga-x"}],
    )
    response = plugin.prepare([("default", uid, "elsewhere")])
    assert "not this node's (kube-node)" in response.claims[uid].error


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_unprepare_of_an_unknown_claim_succeeds_every_time(plugin, version):
    claims = [("default", "0c4c1f8e-dead-4c55-8f0e-00000000000c", "never-prepared")]
    for _ in range(2):
        response = plugin.unprepare(claims, version)
        assert dict(response.claims) == {claims[0][1]: response.claims[claims[0][1]]}
        assert response.claims[claims[0][1]].error == ""


# -- stopping ---------------------------------------------------------------------------------


def test_a_stopped_plugin_takes_its_sockets_with_it(exosuit, standin, tmp_path):
    base = short_dir()
    try:
        kubeconfig = standin.kubeconfig(tmp_path / "kubeconfig")
        process = PluginProcess(base, "node-stop", exosuit.url, kubeconfig).start()
        try:
            assert process.stop(signal.SIGTERM) == 0
        finally:
            process.kill()
        assert not process.registration_socket.exists()
        assert not process.dra_socket.exists()
        with pytest.raises(grpc.RpcError):
            process.info(timeout=2)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_without_a_node_name_it_says_so(exosuit, tmp_path):
    result = subprocess.run(
        [_script("exosuit-kubelet-plugin"), "--os-endpoint", exosuit.url],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "--node-name (or $NODE_NAME) is required" in result.stderr
