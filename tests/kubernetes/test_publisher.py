"""The node's ResourceSlices kept equal to its inventory (exosuit/kubernetes/publisher.py)
through the kubernetes client, against the stand-in API server (kube_standin.py), and
the inventory read from a real Exosuit API over HTTP (exosuit/kubelet/exosuit_api.py)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from keystoneauth1 import session as ksa_session
from kubernetes import client

from exosuit.api.deploy import loadapp
from exosuit.kubelet.exosuit_api import ExosuitApi
from exosuit.kubernetes.publisher import SlicePublisher
from exosuit.kubernetes.slices import Inventory
from tests.conftest import PERSONAS
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.live import serve_wsgi
from tests.kubelet.kube_standin import KubeStandIn
from tests.kubernetes.test_kubernetes_slices import NODE, device, handle, pci


@pytest.fixture
def standin():
    started = KubeStandIn().start()
    try:
        yield started
    finally:
        started.stop()


def kube_client(standin: KubeStandIn) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = standin.url
    return client.ApiClient(configuration)


def _uuid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def fpga_inventory(count: int, held: int = 0) -> Inventory:
    """The same FPGA (the same uuids) every time, with ``count`` handles, the first
    ``held`` of them held by ARQs."""
    dev = device(uuid=_uuid("fpga"))
    handles = [
        handle(
            dev,
            info=pci(i),
            uuid=_uuid(f"handle-{i}"),
            in_use=i < held,
            holder={"arq_uuid": "x"} if i < held else None,
        )
        for i in range(count)
    ]
    return Inventory(NODE, [dev], handles)


def pools(standin: KubeStandIn, node: str = NODE) -> list[dict]:
    return [s["spec"]["pool"] for s in standin.slices_of(node)]


def published_names(standin: KubeStandIn, node: str = NODE) -> list[str]:
    return sorted(d["name"] for s in standin.slices_of(node) for d in s["spec"].get("devices", []))


def test_the_first_sync_creates_the_slices_owned_by_the_node(standin):
    node_uid = standin.add_node(NODE)
    publisher = SlicePublisher(kube_client(standin), NODE)
    result = publisher.sync(fpga_inventory(200))
    assert (result.generation, result.created, result.replaced, result.deleted) == (1, 2, 0, 0)
    assert standin.refused == []
    assert pools(standin) == [{"name": NODE, "generation": 1, "resourceSliceCount": 2}] * 2
    assert len(published_names(standin)) == 200
    for body in standin.slices_of(NODE):
        assert body["metadata"]["name"].startswith(f"{NODE}-exosuit.dev-")
        assert body["metadata"]["ownerReferences"][0]["uid"] == node_uid


def test_an_unchanged_inventory_writes_nothing(standin):
    standin.add_node(NODE)
    publisher = SlicePublisher(kube_client(standin), NODE)
    publisher.sync(fpga_inventory(20))
    writes = len(standin.writes)
    again = publisher.sync(fpga_inventory(20))
    assert not again.changed and again.generation == 1
    # A new publisher (a restarted plugin) finds them equal too.
    assert not SlicePublisher(kube_client(standin), NODE).sync(fpga_inventory(20)).changed
    assert len(standin.writes) == writes


def test_a_change_rewrites_the_pool_at_the_next_generation(standin):
    standin.add_node(NODE)
    publisher = SlicePublisher(kube_client(standin), NODE)
    publisher.sync(fpga_inventory(150))
    names = {s["metadata"]["name"] for s in standin.slices_of(NODE)}
    result = publisher.sync(fpga_inventory(150, held=3))  # Nova took three
    assert (result.generation, result.created, result.replaced, result.deleted) == (2, 0, 2, 0)
    assert {s["metadata"]["name"] for s in standin.slices_of(NODE)} == names
    assert pools(standin) == [{"name": NODE, "generation": 2, "resourceSliceCount": 2}] * 2
    assert len(published_names(standin)) == 147
    assert "fpga-0000-0c-00-0" not in published_names(standin)


def test_growing_and_shrinking_the_pool(standin):
    standin.add_node(NODE)
    publisher = SlicePublisher(kube_client(standin), NODE)
    publisher.sync(fpga_inventory(100))
    grown = publisher.sync(fpga_inventory(300))
    assert (grown.generation, grown.created, grown.replaced) == (2, 2, 1)
    assert pools(standin) == [{"name": NODE, "generation": 2, "resourceSliceCount": 3}] * 3
    shrunk = publisher.sync(fpga_inventory(5))
    assert (shrunk.generation, shrunk.replaced, shrunk.deleted) == (3, 1, 2)
    assert pools(standin) == [{"name": NODE, "generation": 3, "resourceSliceCount": 1}]
    gone = publisher.sync(Inventory(NODE))
    assert gone.deleted == 1 and standin.slices_of(NODE) == []
    assert standin.refused == []


def test_slices_deleted_behind_its_back_come_back(standin):
    """The kubelet deletes a node's slices when it starts: the next sync restores them,
    at a generation above any the scheduler saw."""
    standin.add_node(NODE)
    publisher = SlicePublisher(kube_client(standin), NODE)
    publisher.sync(fpga_inventory(10))
    publisher.sync(fpga_inventory(11))
    standin.slices.clear()
    result = publisher.sync(fpga_inventory(11))
    assert result.created == 1 and len(published_names(standin)) == 11
    # Nothing was left to read the generation from: it starts again, and that is what
    # the scheduler then sees (no slice of an older generation remains).
    assert pools(standin) == [{"name": NODE, "generation": 1, "resourceSliceCount": 1}]


def test_other_nodes_and_drivers_are_left_alone(standin):
    standin.add_node(NODE)
    standin.add_node("node-b")
    SlicePublisher(kube_client(standin), "node-b").sync(Inventory("node-b", *_one_fpga("node-b")))
    other_driver = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "gpu-slice", "resourceVersion": "1", "uid": "u"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 9, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }
    standin.slices["gpu-slice"] = other_driver
    publisher = SlicePublisher(kube_client(standin), NODE)
    publisher.sync(fpga_inventory(3))
    publisher.sync(Inventory(NODE))
    assert standin.slices["gpu-slice"] == other_driver
    assert len(published_names(standin, "node-b")) == 1


def test_without_a_readable_node_the_slices_have_no_owner(standin):
    publisher = SlicePublisher(kube_client(standin), NODE)  # no Node object
    publisher.sync(fpga_inventory(2))
    [body] = standin.slices_of(NODE)
    assert "ownerReferences" not in body["metadata"]


def _one_fpga(node: str) -> tuple[list[dict], list[dict]]:
    dev = device(hostname=node)
    return [dev], [handle(dev, info=pci(0), hostname=node)]


# -- a real inventory ------------------------------------------------------------------------


@pytest.fixture
def exosuit_url(conf, sqlite_database):
    """The Exosuit API in-process, over HTTP on loopback (noauth: admin)."""
    with serve_wsgi(loadapp(conf, sqlite_database)) as url:
        yield url


def test_the_slices_of_a_real_inventory(standin, exosuit_url, sqlite_api):
    agent = sqlite_api.as_(PERSONAS["service"])
    # Below its root port 0000:0b:00.0 (doc/devices.md, "Topology"): asked at 2.10.
    placed = dataclasses.replace(fpga("0000:0c:00.0"), pcie_root="0000:0b:00.0")
    r = agent.put(f"/agent/v1/hosts/{NODE}/inventory", snapshot(NODE, [placed]))
    assert r.status_code == 200, r.text
    r = agent.put("/agent/v1/hosts/node-b/inventory", snapshot("node-b", [fpga("0000:0d:00.0")]))
    assert r.status_code == 200, r.text
    exosuit = ExosuitApi(ksa_session.Session(), exosuit_url + "/v2")
    inventory = exosuit.inventory(NODE, NODE)
    assert len(inventory.attach_handles) == 16 and inventory.kubernetes_held == frozenset()
    standin.add_node(NODE)
    SlicePublisher(kube_client(standin), NODE).sync(inventory)
    assert standin.refused == []
    [body] = standin.slices_of(NODE)
    devices = {d["name"]: d for d in body["spec"]["devices"]}
    assert sorted(devices) == sorted(f"fpga-0000-0c-{i // 8:02x}-{i % 8}" for i in range(16))
    handles = {h["uuid"]: h for h in inventory.attach_handles}
    for name, found in devices.items():
        attrs = found["attributes"]
        info = handles[attrs["attachHandleUuid"]["string"]]["attach_info"]
        assert name == "fpga-{domain}-{bus}-{device}-{function}".format(**info)
        assert attrs["type"] == {"string": "FPGA"} and attrs["driver"] == {"string": "fake"}
        assert attrs["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:0b"}
        assert attrs["pciAddress"] == {
            "string": "{domain}:{bus}:{device}.{function}".format(**info)
        }
    # Marked inactive, the FPGA leaves the pool.
    [dev] = inventory.devices
    r = sqlite_api.post(
        "/v2/device_activations", {"uuids": [dev["uuid"]], "state": "inactive"}, version="2.7"
    )
    assert r.status_code == 202, r.text
    result = SlicePublisher(kube_client(standin), NODE).sync(exosuit.inventory(NODE, NODE))
    assert result.deleted == 1 and standin.slices_of(NODE) == []
