"""Partitions on demand (doc/devices.md, "Partitions"): a layout with ``"on_demand":
true`` offers every slice it allows, a bind of one waits (BindStarted) until the host's
agent has made it (agent/slices.py, through the driver's ``OnDemandSlices``), and once it
is released the agent removes it. Against the real API in-process, with the simulated
driver keeping what it made in its state folder (as on ``exosuit serve``) and, at the end,
the nvidia_gpu driver on a writable copy of the recorded sysfs tree."""

from __future__ import annotations

import os
import uuid as uuidlib

import pytest

from exosuit.agent.partitions import PartitionReconciler
from exosuit.agent.slices import SliceReconciler
from exosuit.agent.transport import WsgiSession
from exosuit.drivers.base import PartitionError
from exosuit.drivers.gpu_naming import mig_resource_class
from exosuit.drivers.simulated import SimulatedDriver
from tests.agent.test_agent_partitions import ENDPOINT, HOST, V2_9, SimHost, _mig, _set, _vgpu
from tests.helpers.partitions import nvidia_on_kernel


class OnDemandHost(SimHost):
    """A simulated host whose agent also runs the slice reconciler."""

    def __init__(self, tmp_path, api, db, session=None) -> None:
        super().__init__(tmp_path, api)
        self.db = db
        self.slicer = SliceReconciler(HOST, self.plugins, session or WsgiSession(api.app), ENDPOINT)

    def desired(self) -> dict:
        r = self.api.get(f"/agent/v1/hosts/{HOST}/desired_state")
        assert r.status_code == 200, r.text
        self.state.desired_state = r.json
        return r.json

    def slice_step(self) -> bool:
        self.desired()
        return self.slicer.step(self.state)

    def on_demand(self, pick, kind: str, count: int) -> tuple[str, object, str]:
        """Give the first device ``pick`` accepts an on-demand layout of ``count`` of its
        first type of ``kind`` and apply it; (its uuid, its Device, the type)."""
        uuid, device = self.device(pick)
        name = (_vgpu if kind == "mdev" else _mig)(device)
        _set(self.api, uuid, {kind: {name: count}, "on_demand": True})
        assert self.step() is True
        r = self.api.get(f"/v2/devices/{uuid}/partitions", version=V2_9)
        assert r.json["state"] == "applied", r.json
        self.report()
        return uuid, device, name

    def made(self, device) -> list[str]:
        return self.driver.made().get(device.pci_address, [])

    def bind(self, rp_uuid: str, resource_class: str = "VGPU", expect: int = 202) -> str:
        """An ARQ bound on ``rp_uuid`` (its bind may wait for the host); its uuid."""
        name = f"od{uuidlib.uuid4().hex[:8]}"
        profile = [{"name": name, "groups": [{f"resources:{resource_class}": "1"}]}]
        r = self.api.post("/v2/device_profiles", profile)
        assert r.status_code == 201, r.text
        r = self.api.post("/v2/accelerator_requests", {"device_profile_name": name})
        assert r.status_code == 201, r.text
        arq = r.json["arqs"][0]["uuid"]
        ops = [
            {"op": "add", "path": "/hostname", "value": HOST},
            {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
            {"op": "add", "path": "/instance_uuid", "value": str(uuidlib.uuid4())},
        ]
        r = self.api.patch("/v2/accelerator_requests", {arq: ops})
        assert r.status_code == expect, r.text
        return arq

    def arq(self, uuid: str) -> dict:
        r = self.api.get(f"/v2/accelerator_requests/{uuid}")
        assert r.status_code == 200, r.text
        return r.json

    def reason(self, uuid: str) -> str:
        """Why the ARQ's bind failed (kept in the database; Cyborg's API shows none)."""
        import sqlalchemy as sa

        from exosuit.db import models

        arqs = models.accelerator_requests
        with self.db.reader() as conn:
            return conn.execute(sa.select(arqs.c.reason).where(arqs.c.uuid == uuid)).scalar()

    def release(self, uuid: str) -> None:
        r = self.api.delete(f"/v2/accelerator_requests?arqs={uuid}")
        assert r.status_code == 204, r.text


@pytest.fixture
def host(tmp_path, sqlite_api, sqlite_database):
    found = OnDemandHost(tmp_path, sqlite_api, sqlite_database)
    found.report()
    return found


def _rp_of(host: OnDemandHost, device) -> str:
    """The resource provider of the device's (first) deployable, from the API."""
    name = device.deployables[0].name
    r = host.api.get("/v2/deployables", version=V2_9)
    (found,) = [d for d in r.json["deployables"] if d["name"] == name]
    return found["rp_uuid"]


def test_a_bind_waits_for_its_slice_and_the_release_removes_it(host):
    uuid, gpu, vgpu_type = host.on_demand(lambda d: d.type == "GPU" and _vgpu(d), "mdev", 2)
    # Both slices offered (Placement sees 2), neither made yet.
    r = host.api.get("/v2/deployables", version=V2_9)
    (deployable,) = [d for d in r.json["deployables"] if d["name"] == gpu.deployables[0].name]
    assert deployable["num_accelerators"] == 2
    assert host.made(gpu) == []
    assert host.slice_step() is False  # nothing held: nothing to make

    first = host.bind(deployable["rp_uuid"])
    assert host.arq(first)["state"] == "BindStarted"  # waits for its slice
    (item,) = host.desired()["slices"]
    assert item["device"] == uuid and item["layout"]["on_demand"] is True
    assert [(h["arq"], h["state"]) for h in item["held"]] == [(first, "BindStarted")]
    handle = item["held"][0]["attach_handle"]
    assert handle["type"] == "MDEV" and handle["info"]["asked_type"] == vgpu_type

    assert host.slice_step() is True  # made, and the bind reported done
    assert host.made(gpu) == [handle["info"]["mdev_uuid"]]
    bound = host.arq(first)
    assert bound["state"] == "Bound"
    assert bound["attach_handle_info"]["mdev_uuid"] == handle["info"]["mdev_uuid"]
    assert host.slice_step() is False  # done: the same desired state does nothing

    second = host.bind(deployable["rp_uuid"])
    assert host.slice_step() is True
    assert host.arq(second)["state"] == "Bound"
    assert len(host.made(gpu)) == 2
    # The layout allows two: a third bind finds no slice to make.
    third = host.bind(deployable["rp_uuid"], expect=409)
    assert host.arq(third)["state"] == "BindFailed"
    assert "no free attach handle" in host.reason(third)

    # Released: its slice goes, the other stays (and stays Bound).
    host.release(first)
    assert host.slice_step() is True
    assert host.made(gpu) == [host.arq(second)["attach_handle_info"]["mdev_uuid"]]
    assert host.slice_step() is False

    # The layout cannot drop below what is held: one slice is in use.
    r = host.api.put(
        f"/v2/devices/{uuid}/partitions", {"mdev": {vgpu_type: 0}, "on_demand": True}, version=V2_9
    )
    assert r.status_code == 409, r.text
    assert "exosuit.partition.in_use" in r.text
    host.release(second)
    assert host.slice_step() is True
    assert host.made(gpu) == []


def test_mig_instances_on_demand(host):
    uuid, gpu, profile = host.on_demand(lambda d: d.type == "GPU" and _mig(d), "mig", 2)
    rp = _rp_of(host, next(d for d in host.driver.discover() if d.pci_address == gpu.pci_address))
    # A MIG slice is its profile's resource class (exosuit/drivers/gpu_naming.py).
    arq = host.bind(rp, mig_resource_class(profile))
    assert host.arq(arq)["state"] == "BindStarted"
    assert host.slice_step() is True
    assert host.arq(arq)["state"] == "Bound"
    (made,) = host.made(gpu)
    assert made.startswith("MIG-")
    host.release(arq)
    assert host.slice_step() is True
    assert host.made(gpu) == []


class _Refusing(SimulatedDriver):
    """The simulated driver on a host whose kernel refuses to make any slice."""

    def make_slice(self, device, handle):
        raise PartitionError(f"{device.pci_address}: the kernel refused (no room left)")


def test_a_slice_the_host_cannot_make_fails_the_bind_with_the_reason(
    tmp_path, sqlite_api, sqlite_database
):
    host = OnDemandHost(tmp_path, sqlite_api, sqlite_database)
    host.driver.__class__ = _Refusing
    host.report()
    _, gpu, _ = host.on_demand(lambda d: d.type == "GPU" and _vgpu(d), "mdev", 1)
    arq = host.bind(_rp_of(host, gpu))
    assert host.slice_step() is False  # nothing made
    assert host.arq(arq)["state"] == "BindFailed"
    assert "the kernel refused (no room left)" in host.reason(arq)
    assert host.made(gpu) == []
    # The handle is free again: once the host can make slices, a bind gets one.
    host.driver.__class__ = SimulatedDriver
    again = host.bind(_rp_of(host, gpu))
    assert host.slice_step() is True
    assert host.arq(again)["state"] == "Bound"


class _Unreachable:
    auth = None

    def __init__(self) -> None:
        self.calls = 0

    def put(self, url, **kwargs):
        self.calls += 1
        raise ConnectionError("the API is down")


def test_a_report_the_api_did_not_take_is_sent_again(tmp_path, sqlite_api, sqlite_database):
    down = _Unreachable()
    host = OnDemandHost(tmp_path, sqlite_api, sqlite_database, session=down)
    host.report()
    _, gpu, _ = host.on_demand(lambda d: d.type == "GPU" and _vgpu(d), "mdev", 1)
    arq = host.bind(_rp_of(host, gpu))
    assert host.slice_step() is True  # made; its report lost
    assert host.arq(arq)["state"] == "BindStarted"
    assert down.calls == 1
    # The same generation again: the slice is made already, the report is sent again.
    assert host.slicer.step(host.state) is False
    assert down.calls == 2
    # A restarted agent (nothing cached) does the same from the desired state alone.
    restarted = SliceReconciler(HOST, host.plugins, WsgiSession(sqlite_api.app), ENDPOINT)
    assert restarted.step(host.state) is False
    assert host.arq(arq)["state"] == "Bound"
    assert len(host.made(gpu)) == 1


def test_a_timed_out_bind_frees_its_slice(host):
    """A bind whose host never answers fails at its deadline (the conductor's job, here
    called as it does): the handle is free and the agent removes what it made late."""
    from exosuit.db import arqs as arqs_db

    _, gpu, _ = host.on_demand(lambda d: d.type == "GPU" and _vgpu(d), "mdev", 1)
    arq = host.bind(_rp_of(host, gpu))
    instance = host.arq(arq)["instance_uuid"]
    host.desired()
    held = host.state.desired_state  # what the agent fetched before the deadline
    states = host.db.write(
        arqs_db.time_out_binds, instance, [arq], reason="the host did not answer in time"
    )
    assert states == {arq: "BindFailed"}
    # The late agent makes the slice and reports: the API says the bind waits no more.
    host.state.desired_state = held
    assert host.slicer.step(host.state) is True
    assert len(host.made(gpu)) == 1
    assert host.arq(arq)["state"] == "BindFailed"
    # The next desired state holds nothing: the slice goes.
    assert host.slice_step() is True
    assert host.made(gpu) == []


def test_a_vf_layout_cannot_be_on_demand(host):
    uuid, _ = host.device(lambda d: d.type == "FPGA")
    r = host.api.put(f"/v2/devices/{uuid}/partitions", {"vfs": 4, "on_demand": True}, version=V2_9)
    assert r.status_code == 400, r.text
    assert "VF layout cannot be on demand" in r.text


def test_the_nvidia_driver_makes_and_removes_slot_mdevs(tmp_path, sqlite_api):
    """nvidia_gpu on a writable copy of tests/fixtures/nvidia-gpu-host (the test kernel
    acts on create and remove): an on-demand layout offers its slots with no mdev made;
    a bind makes its slot's mdev through ``create``, the release removes it through
    ``remove``, and one the vGPU manager shows in use by a VM is never removed."""
    from exosuit.agent.cache import AgentCache
    from exosuit.agent.plugins import DriverSet
    from exosuit.agent.snapshot import build_snapshot

    t4 = "0000:3b:00.0"
    kernel, driver = nvidia_on_kernel(tmp_path, HOST)
    plugins = DriverSet.fixed([driver])
    cache = AgentCache(str(tmp_path / "state"))
    state = cache.load()
    session = WsgiSession(sqlite_api.app)
    partitioner = PartitionReconciler(HOST, plugins, session, ENDPOINT, cache)
    slicer = SliceReconciler(HOST, plugins, session, ENDPOINT)

    def report() -> None:
        r = sqlite_api.put(f"/agent/v1/hosts/{HOST}/inventory", build_snapshot(HOST, [driver]))
        assert r.status_code == 200, r.text

    def desired() -> None:
        state.desired_state = sqlite_api.get(f"/agent/v1/hosts/{HOST}/desired_state").json

    def t4_mdevs() -> set[str]:
        return {
            m
            for m in kernel.listdir("bus", "mdev", "devices")
            if t4 in os.path.realpath(kernel.path("bus", "mdev", "devices", m))
        }

    report()
    devices = sqlite_api.get(f"/v2/devices?hostname={HOST}", version=V2_9).json["devices"]
    (uuid,) = [d["uuid"] for d in devices if d["pci_address"] == t4]
    _set(sqlite_api, uuid, {"mdev": {"nvidia-223": 2}, "on_demand": True})
    desired()
    assert partitioner.step(state) is True
    assert sqlite_api.get(f"/v2/devices/{uuid}/partitions", version=V2_9).json["state"] == (
        "applied"
    )
    assert t4_mdevs() == set()  # nothing made up front (and none of another type kept)
    report()
    slices = sqlite_api.get(f"/v2/devices/{uuid}/partitions", version=V2_9).json["slices"]
    assert [(s["attach_type"], s["type"]) for s in slices] == [("MDEV", "nvidia-223")] * 2

    found = next(d for d in driver.discover() if d.pci_address == t4)
    r = sqlite_api.get("/v2/deployables", version=V2_9)
    (rp,) = [d["rp_uuid"] for d in r.json["deployables"] if d["name"] == found.deployables[0].name]
    host = OnDemandHost.__new__(OnDemandHost)
    host.api = sqlite_api
    arq = host.bind(rp)
    assert host.arq(arq)["state"] == "BindStarted"
    desired()
    assert slicer.step(state) is True
    bound = host.arq(arq)
    assert bound["state"] == "Bound"
    mdev = bound["attach_handle_info"]["mdev_uuid"]
    assert t4_mdevs() == {mdev}
    report()  # the made mdev keeps its handle: the ARQ still holds it
    assert host.arq(arq)["state"] == "Bound"

    # In use by a VM (which only the host can see): the release does not remove it.
    vm_name = os.path.join(kernel.path("bus", "mdev", "devices", mdev), "nvidia", "vm_name")
    os.makedirs(os.path.dirname(vm_name), exist_ok=True)
    with open(vm_name, "w") as f:
        f.write("db-7")
    host.release(arq)
    desired()
    assert slicer.step(state) is False
    assert t4_mdevs() == {mdev}
    os.remove(vm_name)  # the VM is gone: the next step removes it
    assert slicer.step(state) is True
    assert t4_mdevs() == set()


def test_the_nvidia_driver_refuses_mig_on_demand(tmp_path):
    """A MIG instance's UUID is NVML's choice when it is made: there is no slice to
    offer before, so an on-demand MIG layout fails with that reason, nothing touched."""

    kernel, driver = nvidia_on_kernel(tmp_path, HOST, "state")
    gpu = driver.discover()[0]
    kernel.written.clear()
    with pytest.raises(PartitionError, match="not made on demand"):
        driver.partition(gpu, {"mig": {"1g.5gb": 1}, "on_demand": True})
    assert kernel.written == []


def test_a_claim_waits_for_its_slice_and_its_release_removes_it(host):
    """A standalone claim (2.8) of a slice is pending until the agent made it, then bound;
    releasing the claim releases its ARQ, and the agent removes the slice."""
    _, gpu, _ = host.on_demand(lambda d: d.type == "GPU" and _vgpu(d), "mdev", 1)
    name = f"odc{uuidlib.uuid4().hex[:8]}"
    r = host.api.post("/v2/device_profiles", [{"name": name, "groups": [{"resources:VGPU": "1"}]}])
    assert r.status_code == 201, r.text
    r = host.api.post("/v2/claims", {"device_profile_name": name}, version=V2_9)
    assert r.status_code == 202, r.text  # accepted: its slice is still to be made
    claim = r.json
    assert claim["state"] == "pending", claim
    assert host.slice_step() is True
    r = host.api.get(f"/v2/claims/{claim['uuid']}", version=V2_9)
    assert r.json["state"] == "bound", r.json
    assert len(host.made(gpu)) == 1
    r = host.api.delete(f"/v2/claims/{claim['uuid']}", version=V2_9)
    assert r.status_code in (200, 202, 204), r.text
    assert host.slice_step() is True
    assert host.made(gpu) == []
