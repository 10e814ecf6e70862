"""Prepare and unprepare in-process (exosuit/kubelet/driver.py, server.py, main.py and
the console script's start-up), against Exosuit's real API (in-process app over HTTP
on SQLite, claims API 2.8) and the stand-in Kubernetes API server.

No agent runs here: where a claim's CDI specs must be written, the test reports them
through the real agent API (``PUT /agent/v1/hosts/{host}/claims/{uuid}``), as the
host's agent does once it wrote them; the driver's ``sleep`` (its wait between two
looks at the claim) is where that report happens, so that the order is certain.
tests/kubelet/test_kubelet_e2e.py runs the whole with a real agent writing real files.
"""

from __future__ import annotations

import functools
import shutil
import signal
import threading
import time
from pathlib import Path

import grpc
import pytest
from keystoneauth1 import session as ksa_session
from kubernetes import client

from exosuit.api.deploy import loadapp
from exosuit.cmd import kubelet_plugin
from exosuit.kubelet import checkpoint
from exosuit.kubelet.checkpoint import Checkpoint
from exosuit.kubelet.driver import ClaimRef, Driver
from exosuit.kubelet.exosuit_api import ExosuitApi, ExosuitError
from exosuit.kubelet.main import Settings, publish_once, run
from exosuit.kubelet.server import PluginServers
from exosuit.kubernetes.publisher import SlicePublisher
from exosuit.kubernetes.resource_claims import allocated_devices
from exosuit.kubernetes.slices import device_names
from tests.conftest import PERSONAS
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.live import serve_wsgi
from tests.kubelet.kube_standin import KubeStandIn
from tests.kubelet.plugin_process import DEADLINE, VERSIONS, short_dir, version_of

NODE = "node-a"
V2_8 = "2.8"


class World:
    """Exosuit (in-process, over HTTP) with one FPGA of 4 handles on ``node-a``, the
    stand-in Kubernetes API, a checkpoint file."""

    def __init__(self, api, url: str, standin: KubeStandIn, tmp_path: Path) -> None:
        self.api = api  # in-process, admin
        self.agent = api.as_(PERSONAS["service"])
        self.url = url
        self.standin = standin
        self.exosuit = ExosuitApi(ksa_session.Session(), url + "/v2")
        self.checkpoint_path = tmp_path / "plugin" / "checkpoint.json"
        self.reports: list[tuple[str, str]] = []

    def kube(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.standin.url
        return client.ApiClient(configuration)

    def driver(self, report: str | None = "written", **kwargs) -> Driver:
        """A driver whose every wait reports the CDI specs of the pending claims as
        ``report`` (None: nothing is reported)."""

        def sleep(_seconds: float) -> None:
            if report is not None:
                self.report_pending(report)

        kwargs.setdefault("poll_interval", 0)
        kwargs.setdefault("sleep", sleep)
        kwargs.setdefault(
            "read_allocation",
            functools.partial(allocated_devices, client.ResourceV1Api(self.kube())),
        )
        return Driver(
            node=NODE,
            hostname=NODE,
            exosuit=self.exosuit,
            checkpoint=Checkpoint(self.checkpoint_path),
            **kwargs,
        )

    def names(self) -> list[str]:
        return sorted(device_names(self.exosuit.inventory(NODE, NODE)).values())

    def claim_for(self, name: str, devices: list[str], namespace: str = "default") -> ClaimRef:
        uid = self.standin.add_claim(
            namespace,
            name,
            [
                {"request": "fpga", "driver": "exosuit.dev", "pool": NODE, "device": d}
                for d in devices
            ],
        )
        return ClaimRef(namespace, uid, name)

    def claims(self, ref: ClaimRef) -> list[dict]:
        consumer = f"k8s:{ref.namespace}/{ref.name}/{ref.uid}"
        return self.exosuit.claims(consumer=consumer)

    def claim_state(self, uuid: str) -> str:
        r = self.api.get(f"/v2/claims/{uuid}", version=V2_8)
        assert r.status_code == 200, r.text
        return r.json["state"]

    def report_pending(self, state: str, reason: str | None = None) -> None:
        """What the host's agent does: report every container claim of the host whose
        CDI specs are pending."""
        for claim in self.exosuit.claims(hostname=NODE):
            if claim["cdi"]["state"] != "pending":
                continue
            devices = [d["cdi_device"] for d in claim["devices"]]
            body = {"cdi": state, "reason": reason or (None if state == "written" else "boom")}
            if state == "written":
                body["devices"] = devices
            r = self.agent.put(f"/agent/v1/hosts/{NODE}/claims/{claim['uuid']}", body)
            assert r.status_code == 200, r.text
            self.reports.append((claim["uuid"], state))


@pytest.fixture
def world(tmp_path, conf, sqlite_database, sqlite_api):
    r = sqlite_api.as_(PERSONAS["service"]).put(
        f"/agent/v1/hosts/{NODE}/inventory", snapshot(NODE, [fpga("0000:0c:00.0", handles=4)])
    )
    assert r.status_code == 200, r.text
    standin = KubeStandIn().start()
    standin.add_node(NODE)
    try:
        with serve_wsgi(loadapp(conf, sqlite_database)) as url:
            if version_of(sqlite_api.get("/v2").json["max_version"]) < (2, 8):
                pytest.fail("the API has no claims (2.8)")
            yield World(sqlite_api, url, standin, tmp_path)
    finally:
        standin.stop()


# -- prepare ---------------------------------------------------------------------------------


def test_prepare_answers_the_cdi_ids_once_the_agent_wrote_them(world):
    names = world.names()
    ref = world.claim_for("two", names[:2])
    outcome = world.driver().prepare([ref])[ref.uid]
    assert outcome.error == ""
    [held] = world.claims(ref)
    assert held["state"] == "bound" and held["cdi"]["state"] == "written"
    assert world.reports == [(held["uuid"], "written")]  # waited for it, once
    by_handle = {d["attach_handle_uuid"]: d["cdi_device"] for d in held["devices"]}
    handles = {v: k for k, v in device_names(world.exosuit.inventory(NODE, NODE)).items()}
    assert [(d.device_name, d.cdi_device_ids) for d in outcome.devices] == [
        (name, (by_handle[handles[name]],)) for name in names[:2]
    ]
    assert all(d.request_names == ("fpga",) and d.pool_name == NODE for d in outcome.devices)
    entry = checkpoint.read(world.checkpoint_path)[ref.uid]
    assert entry.prepared and entry.claim_uuid == held["uuid"]
    assert entry.devices == outcome.devices

    # Again, by a new driver on the same checkpoint (a restart): the same, no new claim.
    again = world.driver(report=None).prepare([ref])[ref.uid]
    assert again == outcome and [c["uuid"] for c in world.claims(ref)] == [held["uuid"]]


def test_a_claim_not_written_in_time_is_waited_for_again_next_call(world):
    ref = world.claim_for("slow", world.names()[:1])
    late = world.driver(report=None, prepare_timeout=0).prepare([ref])[ref.uid]
    assert "is not ready yet (state bound, CDI pending)" in late.error
    [held] = world.claims(ref)
    entry = checkpoint.read(world.checkpoint_path)[ref.uid]
    assert not entry.prepared and entry.claim_uuid == held["uuid"]
    outcome = world.driver().prepare([ref])[ref.uid]
    assert outcome.error == ""
    assert outcome.devices[0].cdi_device_ids == (f"exosuit.dev/fpga={held['uuid']}-0",)
    assert [c["uuid"] for c in world.claims(ref)] == [held["uuid"]]


def test_cdi_that_failed_releases_the_claim_and_the_next_call_starts_afresh(world):
    ref = world.claim_for("broken", world.names()[:1])
    failed = world.driver(report="failed").prepare([ref])[ref.uid]
    assert "CDI failed: boom" in failed.error
    [(first, _)] = world.reports
    assert world.claim_state(first) == "released"
    assert world.claims(ref) == []
    assert ref.uid not in checkpoint.read(world.checkpoint_path)
    outcome = world.driver().prepare([ref])[ref.uid]
    assert outcome.error == "" and world.claims(ref)[0]["uuid"] != first


def test_claims_of_one_call_are_answered_each(world):
    names = world.names()
    refs = [world.claim_for(f"c{i}", [names[i]]) for i in range(3)]
    missing = ClaimRef("default", "00000000-0000-4000-8000-000000000000", "missing")
    outcomes = world.driver().prepare([*refs, missing, refs[0]])
    assert set(outcomes) == {r.uid for r in refs} | {missing.uid}
    assert all(outcomes[r.uid].error == "" for r in refs)
    assert "not found" in outcomes[missing.uid].error
    cdi = {outcomes[r.uid].devices[0].cdi_device_ids[0] for r in refs}
    assert len(cdi) == 3


def test_an_unexpected_failure_is_its_claims_error_only(world):
    names = world.names()
    good, bad = world.claim_for("good", [names[0]]), world.claim_for("bad", [names[1]])
    reader = functools.partial(allocated_devices, client.ResourceV1Api(world.kube()))

    def read_allocation(namespace: str, name: str, uid: str):
        if name == "bad":
            raise RuntimeError("the reader broke")
        return reader(namespace, name, uid)

    outcomes = world.driver(read_allocation=read_allocation).prepare([good, bad])
    assert outcomes[good.uid].error == ""
    assert outcomes[bad.uid].error == "internal error: RuntimeError('the reader broke')"


def test_admin_access_is_refused(world):
    uid = world.standin.add_claim(
        "default",
        "admin",
        [
            {
                "request": "fpga",
                "driver": "exosuit.dev",
                "pool": NODE,
                "device": world.names()[0],
                "adminAccess": True,
            }
        ],
    )
    outcome = world.driver().prepare([ClaimRef("default", uid, "admin")])[uid]
    assert "adminAccess is not supported" in outcome.error


# -- unprepare ---------------------------------------------------------------------------------


def test_unprepare_releases_the_claim_and_forgets_it(world):
    ref = world.claim_for("done", world.names()[:2])
    driver = world.driver()
    assert driver.prepare([ref])[ref.uid].error == ""
    [held] = world.claims(ref)
    for _ in range(2):
        outcomes = driver.unprepare([ref])
        assert set(outcomes) == {ref.uid} and outcomes[ref.uid].error == ""
        assert world.claim_state(held["uuid"]) == "released"
        assert checkpoint.read(world.checkpoint_path) == {}


def test_unprepare_when_exosuit_is_unreachable_is_that_claims_error(world, tmp_path):
    ref = world.claim_for("cut", world.names()[:1])
    assert world.driver().prepare([ref])[ref.uid].error == ""
    cut = world.driver()
    cut.exosuit = ExosuitApi(ksa_session.Session(), "http://127.0.0.1:9", timeout=5)
    outcome = cut.unprepare([ref])[ref.uid]
    assert "DELETE http://127.0.0.1:9/v2/claims/" in outcome.error
    assert ref.uid in checkpoint.read(world.checkpoint_path)  # kept for the retry
    assert world.driver().unprepare([ref])[ref.uid].error == ""


# -- the gRPC servers and the plugin's run, in-process ----------------------------------------


@pytest.fixture
def base():
    """A short directory for sockets, removed afterwards."""
    made = short_dir()
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_the_servers_answer_both_versions_and_take_their_sockets_away(world, base):
    servers = PluginServers(world.driver(), base / "registry", base / "plugins")
    servers.start()
    try:
        from exosuit.kubelet.protos import pluginregistration_pb2, pluginregistration_pb2_grpc

        with grpc.insecure_channel(f"unix://{servers.registration_path}") as channel:
            stub = pluginregistration_pb2_grpc.RegistrationStub(channel)
            info = stub.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=DEADLINE)
            assert (info.type, info.name, info.endpoint) == (
                "DRAPlugin",
                "exosuit.dev",
                str(servers.dra_path),
            )
            stub.NotifyRegistrationStatus(
                pluginregistration_pb2.RegistrationStatus(plugin_registered=True),
                timeout=DEADLINE,
            )
        assert servers.status.registered is True and servers.status_changed.is_set()
        names = world.names()
        for index, (version, (pb2, stubs)) in enumerate(VERSIONS.items()):
            ref = world.claim_for(f"grpc-{version}", [names[index]])
            with grpc.insecure_channel(f"unix://{servers.dra_path}") as channel:
                stub = stubs.DRAPluginStub(channel)
                claim = pb2.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)
                prepared = stub.NodePrepareResources(
                    pb2.NodePrepareResourcesRequest(claims=[claim]), timeout=DEADLINE
                )
                [device] = prepared.claims[ref.uid].devices
                assert device.device_name == names[index]
                assert device.cdi_device_ids[0].startswith("exosuit.dev/fpga=")
                gone = stub.NodeUnprepareResources(
                    pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=DEADLINE
                )
                assert gone.claims[ref.uid].error == ""
    finally:
        servers.stop()
    assert not servers.registration_path.exists() and not servers.dra_path.exists()


def test_run_serves_and_publishes_until_told_to_stop(world, base):
    settings = Settings(
        node=NODE,
        hostname=NODE,
        registry_dir=base / "registry",
        plugins_dir=base / "plugins",
        checkpoint_dir=base / "plugins" / "exosuit.dev",
        publish_interval=0.1,
    )
    stop = threading.Event()
    returned: list[int] = []
    thread = threading.Thread(
        target=lambda: returned.append(run(settings, world.exosuit, world.kube(), stop))
    )
    thread.start()
    socket = base / "registry" / "exosuit.dev-reg.sock"
    try:
        deadline = time.monotonic() + DEADLINE
        while not (world.standin.slices_of(NODE) and socket.is_socket()):
            assert time.monotonic() < deadline, "not serving and publishing"
            time.sleep(0.05)
        [body] = world.standin.slices_of(NODE)
        assert len(body["spec"]["devices"]) == 4
    finally:
        stop.set()
        thread.join(DEADLINE)
    assert returned == [0]
    assert not socket.exists()


def test_a_failed_sync_is_logged_not_raised(world, caplog):
    settings = Settings(NODE, NODE, Path("/nowhere"), Path("/nowhere"), Path("/nowhere"))
    unreachable = ExosuitApi(ksa_session.Session(), "http://127.0.0.1:9", timeout=5)
    assert not publish_once(SlicePublisher(world.kube(), NODE), unreachable, settings)
    assert "ResourceSlices not synced: Exosuit" in caplog.text
    # A node name the API server refuses in a slice (not a DNS subdomain): 422.
    odd = Settings("Node_A", NODE, Path("/nowhere"), Path("/nowhere"), Path("/nowhere"))
    assert not publish_once(SlicePublisher(world.kube(), "Node_A"), world.exosuit, odd)
    assert "ResourceSlices not synced: Kubernetes: 422" in caplog.text
    assert publish_once(SlicePublisher(world.kube(), NODE), world.exosuit, settings)


def test_exosuit_errors_carry_the_apis_status_and_message(world):
    with pytest.raises(ExosuitError) as raised:
        world.exosuit.get_claim("00000000-0000-4000-8000-000000000000")
    assert raised.value.status == 404 and raised.value.code == "exosuit.claim.not_found"
    world.exosuit.release_claim("00000000-0000-4000-8000-000000000000")  # 404: released


# -- the console script's start-up ------------------------------------------------------------


@pytest.fixture
def signals_restored():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_the_console_script_refuses_what_it_cannot_start_with(
    world, tmp_path, capsys, monkeypatch, signals_restored
):
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SystemExit) as exited:
        kubelet_plugin.main(["--os-endpoint", world.url])
    assert exited.value.code == 2
    base = ["--node-name", NODE, "--os-endpoint", world.url]
    assert kubelet_plugin.main([*base, "--kubeconfig", str(tmp_path / "none")]) == 1
    assert "Kubernetes configuration" in capsys.readouterr().err
    newer = tmp_path / "cp"
    newer.mkdir()
    (newer / "checkpoint.json").write_text(
        '{"kind": "exosuit-kubelet-plugin-checkpoint", "version": 99, "claims": {}}'
    )
    kubeconfig = str(world.standin.kubeconfig(tmp_path / "kubeconfig"))
    args = [*base, "--kubeconfig", kubeconfig, "--checkpoint-dir", str(newer)]
    assert kubelet_plugin.main(args) == 1
    assert "version 99 is newer than this plugin's" in capsys.readouterr().err
