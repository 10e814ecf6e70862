"""The partition reconciler (agent/partitions.py) against the real API in-process: an
operator's layout reaches the agent in its desired state, the driver applies it, the
outcome is recorded, and the slices made appear with the next report (and leave it the
same way). The simulated driver keeps its layouts in its state folder, as on
``exosuit serve``."""

from __future__ import annotations

import pytest

from exosuit.agent.cache import AgentCache
from exosuit.agent.partitions import PartitionReconciler
from exosuit.agent.plugins import DriverSet
from exosuit.agent.snapshot import build_snapshot
from exosuit.agent.transport import WsgiSession
from exosuit.drivers import DriverContext
from exosuit.drivers.simulated import SimulatedDriver

HOST = "sim-part-host"
ENDPOINT = "http://api.test"
V2_9 = "2.9"


class SimHost:
    """One simulated host: its driver (four GPUs, one FPGA), its agent's reconciler and
    cache, reporting to ``api``."""

    def __init__(self, tmp_path, api) -> None:
        self.api = api
        context = DriverContext(
            hostname=HOST,
            settings={"devices": {"nvidia_gpu": "4", "fake_fpga": "1"}},
            state_dir=str(tmp_path / "state" / "drivers" / "simulated"),
        )
        self.driver = SimulatedDriver(context)
        self.plugins = DriverSet.fixed([self.driver])
        self.cache = AgentCache(str(tmp_path / "state"))
        self.state = self.cache.load()
        self.reconciler = PartitionReconciler(
            HOST, self.plugins, WsgiSession(api.app), ENDPOINT, self.cache
        )

    def report(self) -> None:
        r = self.api.put(f"/agent/v1/hosts/{HOST}/inventory", build_snapshot(HOST, [self.driver]))
        assert r.status_code == 200, r.text
        self.state.desired_state = r.json["desired_state"]

    def step(self) -> bool:
        r = self.api.get(f"/agent/v1/hosts/{HOST}/desired_state")
        assert r.status_code == 200, r.text
        self.state.desired_state = r.json
        return self.reconciler.step(self.state)

    def device(self, pick) -> tuple[str, object]:
        """(uuid in the API, the driver's Device) of the first device ``pick`` accepts."""
        found = next(d for d in self.driver.discover() if pick(d))
        r = self.api.get(f"/v2/devices?hostname={HOST}", version=V2_9)
        (row,) = [d for d in r.json["devices"] if d["pci_address"] == found.pci_address]
        return row["uuid"], found


def _vgpu(device) -> str | None:
    return next((s.name for s in device.services if s.kind == "vgpu"), None)


def _mig(device) -> str | None:
    return next((s.name for s in device.services if s.kind == "mig"), None)


def _partitions(api, uuid: str) -> dict:
    r = api.get(f"/v2/devices/{uuid}/partitions", version=V2_9)
    assert r.status_code == 200, r.text
    return r.json


def _set(api, uuid: str, layout: dict, expect: int = 202) -> dict:
    r = api.put(f"/v2/devices/{uuid}/partitions", layout, version=V2_9)
    assert r.status_code == expect, r.text
    return r.json


@pytest.fixture
def host(tmp_path, sqlite_api):
    found = SimHost(tmp_path, sqlite_api)
    found.report()
    return found


def test_mdevs_are_made_offered_and_removed_as_the_layout_says(host):
    uuid, gpu = host.device(lambda d: d.type == "GPU" and _vgpu(d))
    vgpu_type = _vgpu(gpu)
    assert [s["type"] for s in _partitions(host.api, uuid)["slices"]] == ["whole"]

    _set(host.api, uuid, {"mdev": {vgpu_type: 3}, "on_demand": False})
    assert host.step() is True
    shown = _partitions(host.api, uuid)
    assert (shown["state"], shown["reason"]) == ("applied", None)
    # Applied once: the same desired state again does nothing.
    assert host.step() is False

    host.report()  # the agent reports at once after a layout; here by hand
    shown = _partitions(host.api, uuid)
    assert [s["type"] for s in shown["slices"]] == [vgpu_type] * 3
    # What Placement is offered: one per mdev.
    r = host.api.get("/v2/deployables", version=V2_9)
    (deployable,) = [d for d in r.json["deployables"] if d["name"] == gpu.deployables[0].name]
    assert deployable["num_accelerators"] == 3

    _set(host.api, uuid, {"mdev": {vgpu_type: 1}})
    assert host.step() is True
    host.report()
    assert [s["type"] for s in _partitions(host.api, uuid)["slices"]] == [vgpu_type]


def test_mig_instances_are_made_as_the_layout_says(host):
    uuid, gpu = host.device(lambda d: d.type == "GPU" and _mig(d))
    profile = _mig(gpu)
    _set(host.api, uuid, {"mig": {profile: 2}})
    assert host.step() is True
    host.report()
    shown = _partitions(host.api, uuid)
    assert shown["state"] == "applied"
    assert [(s["attach_type"], s["type"]) for s in shown["slices"]] == [("MIG", profile)] * 2


def test_an_fpga_takes_fewer_functions(host):
    uuid, _ = host.device(lambda d: d.type == "FPGA")
    assert len(_partitions(host.api, uuid)["slices"]) == 16
    _set(host.api, uuid, {"vfs": 4})
    assert host.step() is True
    host.report()
    shown = _partitions(host.api, uuid)
    assert shown["state"] == "applied" and len(shown["slices"]) == 4


def test_a_layout_the_device_cannot_make_fails_with_the_reason(host):
    uuid, gpu = host.device(lambda d: d.type == "GPU" and _vgpu(d))
    _set(host.api, uuid, {"mdev": {_vgpu(gpu): 1000}})
    assert host.step() is True
    shown = _partitions(host.api, uuid)
    assert shown["state"] == "failed"
    assert "makes at most" in shown["reason"] and "not 1000" in shown["reason"]

    _set(host.api, uuid, {"vfs": 2})
    assert host.step() is True
    assert "has no SR-IOV VFs" in _partitions(host.api, uuid)["reason"]

    # A type the GPU does not list is refused by the API at once (its services name the
    # types it has): the agent is never asked.
    r = host.api.put(f"/v2/devices/{uuid}/partitions", {"mdev": {"nvidia-9999": 1}}, version="2.9")
    assert r.status_code == 400, r.text
    assert "'nvidia-9999' is not one of its vGPU (mdev) types" in r.text
    assert _vgpu(gpu) in r.text


def test_an_outcome_the_api_did_not_take_is_sent_again_and_not_applied_twice(host, tmp_path):
    uuid, gpu = host.device(lambda d: d.type == "GPU" and _vgpu(d))
    layout = _set(host.api, uuid, {"mdev": {_vgpu(gpu): 2}})
    # The agent applies it but its report is lost: the API is replaced by one that fails.
    lost = PartitionReconciler(HOST, host.plugins, _Unreachable(), ENDPOINT, host.cache)
    host.state.desired_state = host.api.get(f"/agent/v1/hosts/{HOST}/desired_state").json
    assert lost.step(host.state) is True
    assert _partitions(host.api, uuid)["state"] == "applying"
    # A restarted agent reads its cache: it sends the outcome, and does not apply again.
    again = SimHost(tmp_path, host.api)
    assert again.state.partitions[uuid]["acknowledged"] is False
    assert again.step() is False
    assert _partitions(host.api, uuid)["state"] == "applied"
    assert _partitions(host.api, uuid)["generation"] == layout["generation"]


class _Unreachable:
    auth = None

    def put(self, url, **kwargs):
        raise ConnectionError("the API is down")


def test_the_agent_loop_applies_a_layout_and_reports_the_slices_at_once(tmp_path, sqlite_api):
    """The whole loop on a FakeClock: the layout set between two reports arrives with the
    next answer's desired state; the agent applies it and reports at once, so the API
    has the new slices without waiting for the interval."""
    from exosuit.agent.clock import FakeClock
    from exosuit.agent.reporter import Reporter
    from exosuit.agent.service import Agent

    host = SimHost(tmp_path, sqlite_api)
    clock = FakeClock()
    agent = Agent(
        HOST,
        host.plugins,
        Reporter(WsgiSession(sqlite_api.app), ENDPOINT, HOST),
        host.cache,
        interval=60,
        jitter=0,
        clock=clock,
        reconcilers=[host.reconciler],
    )
    start = clock.now()
    seen: dict[str, object] = {}

    def operator() -> None:
        uuid, gpu = host.device(lambda d: d.type == "GPU" and _vgpu(d))
        seen.update(uuid=uuid, layout=_set(sqlite_api, uuid, {"mdev": {_vgpu(gpu): 2}}))

    def look() -> None:
        seen["at_61"] = _partitions(sqlite_api, str(seen["uuid"]))

    clock.call_at(start + 5, operator)
    clock.call_at(start + 61, look)
    clock.call_at(start + 100, agent.stop)
    agent.run()
    # Applied with the answer of the report at +60 and reported at once (not at +120).
    shown = seen["at_61"]
    assert isinstance(shown, dict)
    assert shown["state"] == "applied"
    assert [s["attach_type"] for s in shown["slices"]] == ["MDEV", "MDEV"]


def test_the_nvidia_driver_makes_mdevs_and_the_agent_never_removes_one_in_use(tmp_path, sqlite_api):
    """The reconciler with the real nvidia_gpu driver on a writable copy of
    tests/fixtures/nvidia-gpu-host (the test kernel acts on create and remove): the T4's
    layout makes its mdevs, the next report offers them; a layout that would remove one
    the vGPU manager shows in use by a VM (which the API cannot know) fails on the host
    with the VM named, and nothing is removed."""
    import os

    t4 = "0000:3b:00.0"
    from tests.helpers.partitions import nvidia_on_kernel

    kernel, driver = nvidia_on_kernel(tmp_path, HOST)
    cache = AgentCache(str(tmp_path / "state"))
    state = cache.load()
    reconciler = PartitionReconciler(
        HOST, DriverSet.fixed([driver]), WsgiSession(sqlite_api.app), ENDPOINT, cache
    )

    def report() -> None:
        r = sqlite_api.put(f"/agent/v1/hosts/{HOST}/inventory", build_snapshot(HOST, [driver]))
        assert r.status_code == 200, r.text
        state.desired_state = r.json["desired_state"]

    def step() -> bool:
        state.desired_state = sqlite_api.get(f"/agent/v1/hosts/{HOST}/desired_state").json
        return reconciler.step(state)

    report()
    r = sqlite_api.get(f"/v2/devices?hostname={HOST}", version=V2_9)
    (uuid,) = [d["uuid"] for d in r.json["devices"] if d["pci_address"] == t4]
    assert [s["type"] for s in _partitions(sqlite_api, uuid)["slices"]] == ["whole"]

    _set(sqlite_api, uuid, {"mdev": {"nvidia-223": 2}})
    assert step() is True
    assert _partitions(sqlite_api, uuid)["state"] == "applied"
    report()
    slices = _partitions(sqlite_api, uuid)["slices"]
    assert [(s["attach_type"], s["type"]) for s in slices] == [("MDEV", "nvidia-223")] * 2

    mdevs = kernel.listdir("bus", "mdev", "devices")
    busy = next(
        m for m in mdevs if os.path.realpath(kernel.path("bus", "mdev", "devices", m)).find(t4) >= 0
    )
    vm_name = os.path.join(kernel.path("bus", "mdev", "devices", busy), "nvidia", "vm_name")
    os.makedirs(os.path.dirname(vm_name), exist_ok=True)
    with open(vm_name, "w") as f:
        f.write("db-7")
    kernel.written.clear()
    _set(sqlite_api, uuid, {"mdev": {"nvidia-223": 0}})
    assert step() is True
    shown = _partitions(sqlite_api, uuid)
    assert shown["state"] == "failed"
    assert f"{busy} (VM db-7)" in shown["reason"] and "none is removed" in shown["reason"]
    assert kernel.written == []
