"""The activation reconciler (agent/activations.py): install and uninstall steps of the
desired state, run once each, their outcomes kept until the API has them.

The API's end of ``PUT /agent/v1/hosts/{hostname}/activations/{device_uuid}`` is not
built yet: ``ActivationApi`` is a small in-process WSGI app of that one endpoint as
doc/agent-api.md describes it (200 with the activation, 409 once the operator changed
it, 404 for a device it does not know), and of the desired state that lists the steps.
These tests need it replaced by the real API once that exists.
"""

from __future__ import annotations

import json
import logging
import re

import pytest
import webob

from exosuit.agent.activations import ActivationReconciler
from exosuit.agent.cache import AgentCache
from exosuit.agent.clock import FakeClock
from exosuit.agent.programs import ProgramReconciler
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import Agent
from exosuit.agent.transport import WsgiSession
from exosuit.drivers import pci_cpid
from exosuit.images.store import ContentStore
from tests.agent.small_drivers import Bench, driver_set

HOST = "act-host"
ENDPOINT = "http://api.test"
FIRST, SECOND = "0000:0a:00.0", "0000:0a:01.0"
PLAIN = "0000:0b:00.0"
UUIDS = {
    FIRST: "11111111-1111-4111-8111-111111111111",
    SECOND: "22222222-2222-4222-8222-222222222222",
    PLAIN: "33333333-3333-4333-8333-333333333333",
}


class ActivationApi:
    """The desired state's activations and their outcome endpoint, in memory."""

    def __init__(self, uuids: dict[str, str] | None = None) -> None:
        self.uuids = dict(uuids if uuids is not None else UUIDS)  # PCI address → device uuid
        self.generation = 1
        self.activations: dict[str, dict] = {}  # device uuid → the step asked
        self.outcomes: list[tuple[str, dict]] = []
        self.activation: dict[str, str] = {}  # device uuid → its activation now
        self.fail_puts = 0
        self.inventories: list[dict] = []
        self.inventory_times: list[float] = []
        self.clock: FakeClock | None = None

    def ask(self, address: str, action: str, driver: str = "inst") -> None:
        """The operator marks the device ready (install) or inactive (uninstall)."""
        self.generation += 1
        uuid = self.uuids[address]
        self.activations[uuid] = {
            "device": uuid,
            "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci_cpid(address)},
            "driver": driver,
            "action": action,
            "generation": self.generation,
        }
        self.activation[uuid] = "activating" if action == "install" else "deactivating"

    def desired_state(self) -> dict:
        return {
            "generation": self.generation,
            "programs": [],
            "discovery": None,
            "drivers": {},
            "activations": list(self.activations.values()),
        }

    def states(self) -> list[tuple[str, str, str | None]]:
        return [(uuid, body["state"], body["reason"]) for uuid, body in self.outcomes]

    @webob.dec.wsgify
    def __call__(self, req: webob.Request) -> webob.Response:
        if req.path == f"/agent/v1/hosts/{HOST}/desired_state":
            if req.headers.get("If-None-Match") == f'"{self.generation}"':
                return webob.Response(status=304)
            return _json(200, self.desired_state(), ETag=f'"{self.generation}"')
        if req.path == f"/agent/v1/hosts/{HOST}/inventory":
            body = json.loads(req.body)
            self.inventories.append(body)
            if self.clock is not None:
                self.inventory_times.append(self.clock.now())
            answer = {"hostname": HOST, "hash": body["hash"], "changed": True}
            return _json(200, {**answer, "desired_state": self.desired_state()})
        match = re.fullmatch(rf"/agent/v1/hosts/{HOST}/activations/([^/]+)", req.path)
        if match and req.method == "PUT":
            return self._outcome(match[1], json.loads(req.body))
        return _json(404, {"error": f"no route {req.path}"})

    def _outcome(self, uuid: str, body: dict) -> webob.Response:
        if uuid not in self.uuids.values():
            return _json(404, {"error": "no such device on that host"})
        if self.fail_puts > 0:
            self.fail_puts -= 1
            return _json(503, {"error": "busy"})
        asked = self.activations.get(uuid)
        if asked is None or (asked["action"], asked["generation"]) != (
            body["action"],
            body["generation"],
        ):
            return _json(409, {"error": "exosuit.activation.superseded"})
        self.outcomes.append((uuid, body))
        done = body["state"] == "done"
        self.activation[uuid] = "ready" if done and body["action"] == "install" else "inactive"
        del self.activations[uuid]  # no longer activating: out of the desired state
        self.generation += 1
        return _json(200, {"activation": self.activation[uuid]})


def _json(status: int, body: dict, **headers: str) -> webob.Response:
    response = webob.Response(status=status, json_body=body)
    response.headers.update(headers)
    return response


class Host:
    """One agent's pieces: the drivers on a Bench, the cache, the reconciler."""

    def __init__(self, tmp_path, api: ActivationApi, bench: Bench | None = None) -> None:
        self.tmp_path = tmp_path
        self.api = api
        self.bench = bench if bench is not None else Bench()
        self.plugins = driver_set(
            self.bench,
            {"inst": ("installing", "0a"), "plain": ("counted", "0b")},
            enabled=["inst", "plain"],
            settings={"inst": {"count": 2}},
        )
        self.session = WsgiSession(api)
        self.restart()

    def restart(self) -> None:
        """A new agent process: its cache read from disk."""
        self.cache = AgentCache(str(self.tmp_path / "state"))
        self.state = self.cache.load()
        self.reconciler = ActivationReconciler(
            HOST, self.plugins, self.session, ENDPOINT, self.cache
        )

    def step(self) -> bool:
        """Read the desired state (as the poll would), then one reconciler step."""
        self.state.desired_state = self.api.desired_state()
        return self.reconciler.step(self.state)


@pytest.fixture
def api():
    return ActivationApi()


def test_an_install_runs_once_binds_the_device_and_reports_done(tmp_path, api):
    host = Host(tmp_path, api)
    api.ask(FIRST, "install")
    assert host.step() is True  # a step ran: report the inventory now
    assert host.bench.calls == [("install", FIRST, "vfio-pci")]
    assert host.bench.bound == {FIRST: "vfio-pci"}
    assert api.states() == [(UUIDS[FIRST], "done", None)]
    assert api.outcomes[0][1]["action"] == "install"
    assert api.activation[UUIDS[FIRST]] == "ready"
    # Acknowledged and no longer asked for: forgotten; nothing runs again.
    assert host.step() is False
    assert host.state.activations == {}
    assert host.cache.load().activations == {}
    assert host.bench.calls == [("install", FIRST, "vfio-pci")]


def test_the_step_gets_the_drivers_effective_options(tmp_path, api):
    host = Host(tmp_path, api)
    assert host.plugins.apply({"inst": {"config": {"count": "2", "bind_driver": "uio"}}})
    api.ask(SECOND, "install")
    host.step()
    assert host.bench.calls == [("install", SECOND, "uio")]
    assert host.bench.bound == {SECOND: "uio"}
    assert api.states() == [(UUIDS[SECOND], "done", None)]


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        pytest.param(
            lambda bench: bench.broken.add("vfio-pci"),
            "vfio-pci: no such kernel driver",
            id="install-error",
        ),
        pytest.param(
            lambda bench: bench.vanish_on_install.add(FIRST),
            f"after the install step the device {FIRST} is no longer found",
            id="gone-after-install",
        ),
    ],
)
def test_a_failed_install_is_reported_with_its_reason(tmp_path, api, setup, reason):
    bench = Bench()
    setup(bench)
    host = Host(tmp_path, api, bench)
    api.ask(FIRST, "install")
    assert host.step() is True
    assert api.states() == [(UUIDS[FIRST], "failed", reason)]
    assert api.activation[UUIDS[FIRST]] == "inactive"


def test_an_install_the_driver_does_not_confirm_fails(tmp_path, api):
    bench = Bench(stolen={FIRST: "nouveau"})  # not bound as the options say, after all
    host = Host(tmp_path, api, bench)
    api.ask(FIRST, "install")
    assert host.step() is True
    assert api.states() == [
        (
            UUIDS[FIRST],
            "failed",
            f"after the install step the driver inst does not find the device {FIRST} installed",
        )
    ]


def test_a_device_not_found_fails_and_a_driver_without_install_step_is_done(tmp_path, api):
    host = Host(tmp_path, api)
    host.bench.vanishing.add(FIRST)
    api.ask(FIRST, "install")
    api.ask(PLAIN, "install", driver="plain")
    host.step()
    assert sorted(api.states()) == sorted(
        [
            (UUIDS[FIRST], "failed", f"the device {FIRST} is not found on host {HOST}"),
            (UUIDS[PLAIN], "done", None),  # found: no host work to do
        ]
    )
    assert host.bench.calls == []


def test_an_uninstall_undoes_the_install_or_says_why_it_could_not(tmp_path, api):
    host = Host(tmp_path, api)
    api.ask(FIRST, "install")
    api.ask(SECOND, "install")
    host.step()
    assert host.bench.bound == {FIRST: "vfio-pci", SECOND: "vfio-pci"}
    api.ask(FIRST, "uninstall")
    host.step()
    assert host.bench.bound == {SECOND: "vfio-pci"}
    assert api.states()[-1] == (UUIDS[FIRST], "done", None)
    assert api.activation[UUIDS[FIRST]] == "inactive"
    host.bench.broken.add("uninstall")
    api.ask(SECOND, "uninstall")
    host.step()
    assert api.states()[-1] == (UUIDS[SECOND], "failed", "the device is busy")
    assert host.bench.bound == {SECOND: "vfio-pci"}
    # A driver whose uninstall has nothing to undo (nothing configured, or the device was
    # already so before the install) leaves it "installed": the step is still done.
    host.bench.broken.discard("uninstall")
    host.bench.bound[FIRST] = "vfio-pci"  # as found before any install of ours
    host.bench.foreign.add(FIRST)
    api.ask(FIRST, "uninstall")
    host.step()
    assert api.states()[-1] == (UUIDS[FIRST], "done", None)
    assert host.bench.bound[FIRST] == "vfio-pci"  # left as it was found
    host.bench.foreign.discard(FIRST)
    # A device that is gone has nothing to undo.
    host.bench.vanishing.add(FIRST)
    api.ask(FIRST, "uninstall")
    host.step()
    assert api.states()[-1] == (
        UUIDS[FIRST],
        "done",
        f"the device {FIRST} is not on host {HOST}: nothing to undo",
    )


def test_an_outcome_the_api_has_not_acknowledged_survives_a_restart_and_is_not_run_again(
    tmp_path, api, caplog
):
    host = Host(tmp_path, api)
    api.fail_puts = 2
    api.ask(FIRST, "install")
    assert host.step() is True
    assert api.outcomes == []
    (entry,) = host.cache.load().activations.values()
    assert (entry["acknowledged"], entry["report"]["state"]) == (False, "done")

    host.restart()  # the agent restarts before the API took the outcome
    assert host.step() is False  # still unreachable (503): kept, not run again
    assert host.bench.calls == [("install", FIRST, "vfio-pci")]
    assert host.cache.load().activations[UUIDS[FIRST]]["acknowledged"] is False
    assert host.step() is False  # delivered now, still not run again
    assert api.states() == [(UUIDS[FIRST], "done", None)]
    assert host.bench.calls == [("install", FIRST, "vfio-pci")]
    assert host.step() is False
    assert host.cache.load().activations == {}
    assert "will retry" in caplog.text


def test_an_outcome_the_operator_superseded_is_dropped(tmp_path, api, caplog):
    host = Host(tmp_path, api)
    api.fail_puts = 1
    api.ask(FIRST, "install")
    host.step()  # done, not delivered
    stale = api.desired_state()
    # The operator marks it inactive meanwhile: the install outcome is superseded (409).
    api.ask(FIRST, "uninstall")
    host.state.desired_state = stale  # the agent has not polled since
    caplog.set_level(logging.INFO, logger="exosuit.agent.activations")
    assert host.reconciler.step(host.state) is False
    assert "changed its activation since" in caplog.text
    assert host.state.activations[UUIDS[FIRST]]["acknowledged"] is True
    assert host.bench.calls == [("install", FIRST, "vfio-pci")]  # not run again
    # At the next poll the uninstall runs.
    assert host.step() is True
    assert api.states() == [(UUIDS[FIRST], "done", None)]
    assert api.outcomes[0][1]["action"] == "uninstall"
    assert host.bench.bound == {}


def test_a_malformed_step_is_logged_once_and_skipped(tmp_path, api, caplog):
    host = Host(tmp_path, api)
    host.state.desired_state = {"generation": 3, "activations": [{"device": 7}, "junk"]}
    assert host.reconciler.step(host.state) is False
    assert host.reconciler.step(host.state) is False
    said = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert len(said) == 2  # one per malformed step, not one per step() call
    assert host.bench.calls == []


def test_the_agent_loop_reports_the_inventory_at_once_after_a_step(tmp_path, api):
    """From the desired-state poll to the install to the inventory, on a FakeClock."""
    host = Host(tmp_path, api)
    clock = FakeClock()
    api.clock = clock
    start = clock.now()
    programs = ProgramReconciler(
        HOST,
        host.plugins.drivers,
        host.session,
        ENDPOINT,
        ContentStore(str(tmp_path / "images"), 10**6),
        host.cache,
        clock=clock,
        interval=5.0,
    )
    agent = Agent(
        HOST,
        host.plugins,
        Reporter(host.session, ENDPOINT, HOST),
        host.cache,
        interval=60,
        jitter=0,
        clock=clock,
        reconcilers=[programs, host.reconciler],
    )
    clock.call_at(start + 12, lambda: api.ask(FIRST, "install"))
    clock.call_at(start + 100, agent.stop)
    agent.run()
    assert api.states() == [(UUIDS[FIRST], "done", None)]
    # Seen at the poll after it was asked (every 5 s), reported at once, then a minute on.
    assert api.inventory_times == [start, start + 15, start + 75]
    assert host.bench.bound == {FIRST: "vfio-pci"}
    # The report right after the step is the agent's, after a discovery.
    assert api.inventories[1]["observed_generation"] == api.generation - 1


# -- a real driver on a writable copy of a recorded tree ----------------------------------


def test_the_pci_drivers_install_step_binds_vfio_pci_on_a_recorded_tree(tmp_path):
    """The reconciler with the real pci driver, given a kernel acting on a writable copy
    of tests/fixtures/nvme-host: the operator's override names vfio-pci; marking the T4
    ready binds it (the writes the kernel sees), inactive gives it back to nvidia."""
    from exosuit.agent.plugins import DriverSet
    from exosuit.drivers import DriverContext
    from exosuit.drivers.pci import PciDriver
    from tests.drivers.fpga_tools import writable_copy
    from tests.drivers.kernel import Kernel

    t4 = "0000:3b:00.0"
    kernel = Kernel(writable_copy("nvme-host", tmp_path), modules=["vfio-pci"])

    def load(name, settings):
        context = DriverContext(
            hostname=HOST, sysfs_root=kernel.root, sysfs=kernel, settings=settings
        )
        return PciDriver(context)

    plugins = DriverSet(
        ["pci"],
        load,
        settings=lambda name: {"device_spec": ['{"address": "0000:3b:00.0"}'], "bind_driver": ""},
        options=lambda name: PciDriver.OPTIONS,
        installed={"pci": "0.1.0"},
    )
    assert plugins.apply({"pci": {"config": {"bind_driver": "vfio-pci"}}}) is True
    cache = AgentCache(str(tmp_path / "state"))
    state = cache.load()
    api = ActivationApi({t4: UUIDS[FIRST]})
    reconciler = ActivationReconciler(HOST, plugins, WsgiSession(api), ENDPOINT, cache)
    api.ask(t4, "install", driver="pci")
    state.desired_state = api.desired_state()
    assert reconciler.step(state) is True
    assert api.states() == [(UUIDS[FIRST], "done", None)]
    assert kernel.written == [
        (f"bus/pci/devices/{t4}/driver_override", "vfio-pci"),
        ("bus/pci/drivers/nvidia/unbind", t4),
        ("bus/pci/drivers_probe", t4),
    ]
    assert kernel.link_name("bus", "pci", "devices", t4, "driver") == "vfio-pci"

    kernel.written.clear()
    api.ask(t4, "uninstall", driver="pci")
    state.desired_state = api.desired_state()
    assert reconciler.step(state) is True
    assert api.states()[-1] == (UUIDS[FIRST], "done", None)
    assert kernel.written == [
        (f"bus/pci/devices/{t4}/driver_override", "\n"),
        ("bus/pci/drivers/vfio-pci/unbind", t4),
        ("bus/pci/drivers_probe", t4),
    ]
    assert kernel.link_name("bus", "pci", "devices", t4, "driver") == "nvidia"


def test_a_gpu_marked_ready_gets_its_mdevs_and_offers_them(tmp_path):
    """The reconciler with the real nvidia_gpu driver on a writable copy of
    tests/fixtures/nvidia-gpu-host: the T4 at 3b:00.0 is offered as vGPUs of nvidia-223
    and has no mdev; the operator's override asks two (``mdevs``). Marking it ready
    creates them (the writes the kernel sees) and the GPU then offers them; inactive
    removes them."""
    import uuid

    from exosuit.agent.plugins import DriverSet
    from exosuit.drivers import DriverContext
    from exosuit.drivers.nvidia_gpu import NvidiaGpuDriver
    from exosuit.drivers.runner import RecordedRunner
    from tests.drivers.fpga_tools import writable_copy
    from tests.drivers.kernel import Kernel

    t4 = "0000:3b:00.0"
    kernel = Kernel(writable_copy("nvidia-gpu-host", tmp_path))

    def load(name, settings):
        context = DriverContext(
            hostname=HOST,
            sysfs_root=kernel.root,
            sysfs=kernel,
            runner=RecordedRunner.from_file(f"{kernel.root}/commands.json"),
            settings=settings,
            state_dir=str(tmp_path / "state" / "drivers" / name),
        )
        return NvidiaGpuDriver(context)

    def offered() -> list[str]:
        (gpu,) = [d for d in plugins.drivers[0].discover() if d.pci_address == t4]
        (deployable,) = gpu.deployables
        assert deployable.num_accelerators == len(deployable.attach_handles)
        return [h.attach_info["mdev_uuid"] for h in deployable.attach_handles]

    plugins = DriverSet(
        ["nvidia_gpu"],
        load,
        settings=lambda name: {"vgpu_types": {t4: "nvidia-223"}, "mdevs": [], "bind_driver": ""},
        options=lambda name: NvidiaGpuDriver.OPTIONS,
        installed={"nvidia_gpu": "0.1.0"},
    )
    assert offered() == []
    assert plugins.apply({"nvidia_gpu": {"config": {"mdevs": "nvidia-223:2"}}}) is True
    cache = AgentCache(str(tmp_path / "state"))
    state = cache.load()
    api = ActivationApi({t4: UUIDS[FIRST]})
    reconciler = ActivationReconciler(HOST, plugins, WsgiSession(api), ENDPOINT, cache)
    api.ask(t4, "install", driver="nvidia_gpu")
    state.desired_state = api.desired_state()
    assert reconciler.step(state) is True
    assert api.states() == [(UUIDS[FIRST], "done", None)]
    namespace = uuid.uuid5(uuid.NAMESPACE_DNS, "mdev.exosuit.dev")
    made = [str(uuid.uuid5(namespace, f"{HOST}/{t4}/nvidia-223/{i}")) for i in range(2)]
    types = f"bus/pci/devices/{t4}/mdev_supported_types/nvidia-223"
    assert kernel.written == [(f"{types}/create", m) for m in made]
    assert offered() == made

    kernel.written.clear()
    api.ask(t4, "uninstall", driver="nvidia_gpu")
    state.desired_state = api.desired_state()
    assert reconciler.step(state) is True
    assert api.states()[-1] == (UUIDS[FIRST], "done", None)
    assert kernel.written == [(f"bus/mdev/devices/{m}/remove", "1") for m in sorted(made)]
    assert offered() == []
