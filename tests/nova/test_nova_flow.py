"""Nova's flows replayed against a running Exosuit: create, delete, evacuate,
shelve-offload and unshelve, failed binds, a bind that waits for its host.

Exosuit is served over HTTP (cheroot, as ``exosuit-api`` runs it) with its real
conductor worker in the same process, on SQLite and PostgreSQL. Every token is
a real Keystone's (tests/helpers/keystone_fixture.py): Nova's calls, replayed
call for call by tests/nova/replay.py, carry the ``p1-member`` user's token and
the ``nova`` service user's token (no microversion), and Exosuit's
keystonemiddleware validates them; Exosuit's conductor calls Nova's events API
with the ``exosuit`` service user's token plus its ``[service_user]`` token.
That API is the fake Nova of tests/nova/fake_nova.py, which validates both
tokens with Keystone and records every event. Each flow checks the exact JSON
of the events and that each resolution reached Nova once.

Placement is not replayed: the providers of each request group come from
Exosuit's ``GET /v2/deployables`` (``rp_uuid``), where Nova would take them from
Placement's allocation candidates (tests/placement covers that side).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from cheroot import wsgi as cheroot_wsgi
from keystoneauth1 import adapter as ksa_adapter
from keystoneauth1 import service_token, token_endpoint
from keystoneauth1 import session as ksa_session

from exosuit.api.deploy import loadapp
from exosuit.conductor.worker import Conductor, Settings
from exosuit.conf import make_conf
from exosuit.db import models
from exosuit.db.api import Database
from exosuit.drivers import simulated
from tests.conftest import empty_database
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.keystone_fixture import (
    REGION,
    Keystone,
)
from tests.helpers.programs import FUNCTION, programmable_fpga
from tests.nova.fake_nova import FakeNova, keystone_tokens
from tests.nova.replay import NovaError, NovaReplay, Server
from tests.nova.test_notify import event

HOSTS = ("compute-1", "compute-2")
TWO_FPGAS = [
    {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"},
    {"resources:FPGA": "1"},
]
CONDUCTOR = Settings(
    poll_interval=0.05, lease_seconds=30, max_attempts=5, backoff_base=0.1, backoff_max=0.5
)


class Stack:
    """A running Exosuit (HTTP API + conductor) on one database, and its fake Nova."""

    def __init__(self, conf, db, nova: FakeNova, sessions: dict) -> None:
        self.conf, self.db, self.nova = conf, db, nova
        app = loadapp(conf, db)
        self.server = cheroot_wsgi.Server(
            ("127.0.0.1", 0), app, numthreads=8, server_name="exosuit-test"
        )
        self.server.prepare()
        self.url = f"http://127.0.0.1:{self.server.bind_addr[1]}"
        self._thread = threading.Thread(target=self.server.serve, name="exosuit-api", daemon=True)
        self._thread.start()
        self.conductor = Conductor(conf, db, workers=1, settings=CONDUCTOR)
        self.conductor.start()
        self.sessions = sessions

    def adapter(self, who: str) -> ksa_adapter.Adapter:
        """An Adapter on Exosuit's /v2 with ``who``'s session (nova, admin, agent)."""
        return ksa_adapter.Adapter(
            self.sessions[who], service_type="accelerator", endpoint_override=f"{self.url}/v2"
        )

    def stop(self) -> None:
        self.conductor.stop(timeout=10)
        self.server.stop()
        self._thread.join(10)

    def report(self, host: str, addresses=("0000:0c:00.0", "0000:0d:00.0"), devices=None) -> None:
        if devices is None:
            devices = [fpga(a, handles=2, name=f"{host}_{a}") for a in addresses]
        r = self.adapter("agent").put(
            f"{self.url}/agent/v1/hosts/{host}/inventory",
            json=snapshot(host, devices),
            raise_exc=False,
        )
        assert r.status_code == 200, r.text

    def profile(self, name: str, groups: list[dict]) -> None:
        r = self.adapter("admin").post(
            "/device_profiles", json=[{"name": name, "groups": groups}], raise_exc=False
        )
        assert r.status_code == 201, r.text

    def settle(self, timeout: float = 20.0) -> None:
        """Wait until no notification is due or running (delayed ones may wait)."""
        jobs = models.jobs
        deadline = time.monotonic() + timeout
        while True:
            with self.db.engine.connect() as conn:
                busy = conn.execute(
                    sa.select(sa.func.count())
                    .select_from(jobs)
                    .where(
                        jobs.c.kind == "nova_notify",
                        sa.or_(
                            jobs.c.state == "running",
                            sa.and_(jobs.c.state == "pending", jobs.c.run_after <= models.utcnow()),
                        ),
                    )
                ).scalar()
            if not busy:
                return
            if time.monotonic() > deadline:
                raise AssertionError("nova_notify jobs still due or running")
            time.sleep(0.05)


def bodies(nova: FakeNova, server_uuid: str) -> list[dict]:
    """The bodies of the event requests Nova answered (200/207/404) for a server."""
    return [
        r.body
        for r in nova.requests
        if r.status in (200, 207, 404) and r.body["events"][0]["server_uuid"] == server_uuid
    ]


def all_completed(server_uuid: str, arqs: list[dict]) -> dict:
    return {"events": [event(server_uuid, a["uuid"], "completed") for a in arqs]}


# -- the cloud: Keystone, Exosuit, Nova ------------------------------------------------


def exosuit_conf(workdir: Path, keystone: Keystone, db, nova_url: str, bind_timeout: int = 30):
    """Exosuit as deployed next to Nova: keystonemiddleware validates the tokens (as the
    ``exosuit`` service user); ``[nova]`` and ``[service_user]`` are that user too."""
    user = keystone.users["exosuit"]
    credentials = f"""\
auth_type = password
auth_url = {keystone.auth_url}
username = {user.name}
password = {user.password}
user_domain_name = Default
project_name = service
project_domain_name = Default
"""
    path = workdir / "exosuit.conf"
    path.write_text(f"""\
[DEFAULT]
bind_timeout = {bind_timeout}
state_path = {workdir / "state"}
[api]
auth_strategy = keystone
[database]
connection = {db.engine.url.render_as_string(hide_password=False)}
[keystone_authtoken]
www_authenticate_uri = {keystone.url}
region_name = {REGION}
service_token_roles = service
service_token_roles_required = true
token_cache_time = 600
{credentials}
[nova]
region_name = {REGION}
endpoint_override = {nova_url}
{credentials}
[service_user]
send_service_user_token = true
{credentials}
# Nova binds what the snapshots report, as before devices started inactive.
[inventory]
new_device_activation = ready
""")
    return make_conf([str(path)])


class TokenOnly(token_endpoint.Token):
    """Nova's ``_ContextAuthPlugin``: the user's token as it came, never renewed."""


@pytest.fixture(params=("sqlite", "postgresql"))
def database(request, _shared_urls):
    """SQLite and PostgreSQL here (tests/nova/test_notify.py runs MariaDB too)."""
    db = Database(_shared_urls(request.param))
    empty_database(db)
    yield db
    db.dispose()


@pytest.fixture
def bind_timeout() -> int:
    """[DEFAULT] bind_timeout of the stack (a test parametrizes it to change it)."""
    return 30


@pytest.fixture
def stack(tmp_path, keystone, database, bind_timeout):
    """Exosuit (HTTP + conductor) on ``database`` with Keystone, and a fake Nova that
    validates every token with Keystone as the ``nova`` service user."""
    nova_session = keystone.session(keystone.password("nova"))
    nova = FakeNova(
        keystone_tokens(nova_session, keystone.auth_url), require_service_token=True
    ).start()
    made = None
    try:
        conf = exosuit_conf(tmp_path, keystone, database, nova.url, bind_timeout)
        user_token = keystone.token("p1-member")
        sessions = {
            # Nova: the user's token, plus a service token of the nova user.
            "nova": ksa_session.Session(
                auth=service_token.ServiceTokenAuthWrapper(
                    user_auth=TokenOnly(None, user_token), service_auth=keystone.password("nova")
                )
            ),
            "admin": keystone.session(keystone.password("p1-admin")),
            "agent": keystone.session(keystone.password("exosuit")),
        }
        made = Stack(conf, database, nova, sessions)
        for host in HOSTS:
            made.report(host)
        yield made
    finally:
        if made is not None:
            made.stop()
        nova.stop()


@pytest.fixture
def replay(stack) -> NovaReplay:
    return NovaReplay(stack.adapter("nova"), stack.nova, stack.adapter("admin"))


def test_tokens_are_real(stack, replay, keystone):
    """What crosses the wire: Keystone tokens, validated on both sides."""
    stack.profile("one-fpga", [{"resources:FPGA": "1"}])
    server = replay.boot("one-fpga", "compute-1")
    [arq] = replay.arqs_for_instance(server)
    assert arq["project_id"] == keystone.projects["p1"]  # the user's project
    stack.settle()
    [request] = stack.nova.requests
    exosuit = keystone.users["exosuit"].id
    for header in ("X-Auth-Token", "X-Service-Token"):
        data = keystone.token_data(request.headers[header])
        assert data["user"]["id"] == exosuit
        assert {r["name"] for r in data["roles"]} == {"service"}
    # A caller without the service token may not bind (Exosuit refuses the user alone).
    user_alone = ksa_adapter.Adapter(
        ksa_session.Session(auth=TokenOnly(None, keystone.token("p1-member"))),
        endpoint_override=f"{stack.url}/v2",
    )
    r = user_alone.patch(
        "/accelerator_requests",
        json={arq["uuid"]: [{"op": "remove", "path": "/hostname"}]},
        raise_exc=False,
    )
    assert r.status_code == 403 and "requires a service token" in r.text


# -- the flows -------------------------------------------------------------------------


def test_create_then_delete(stack, replay):
    stack.profile("two-fpgas", TWO_FPGAS)
    server = replay.boot("two-fpgas", "compute-1")
    arqs = replay.arqs_for_instance(server)
    assert [(a["state"], a["hostname"], a["attach_handle_type"]) for a in arqs] == [
        ("Bound", "compute-1", "TEST_PCI")
    ] * 2
    assert [c[:2] for c in replay.calls[:3]] == [
        ("GET", "/v2/device_profiles?name=two-fpgas"),
        ("POST", "/v2/accelerator_requests"),
        ("PATCH", "/v2/accelerator_requests"),
    ]
    assert [c[2] for c in replay.calls[:3]] == [200, 201, 202]
    stack.settle()
    assert bodies(stack.nova, server.uuid) == [all_completed(server.uuid, server.arqs)]

    replay.delete_arqs(server)
    r = replay.accelerator.get("/accelerator_requests", params={"instance": server.uuid})
    assert r.json() == {"arqs": []}
    stack.settle()
    assert bodies(stack.nova, server.uuid) == [all_completed(server.uuid, server.arqs)]


def test_evacuate(stack, replay):
    stack.profile("two-fpgas", TWO_FPGAS)
    server = replay.boot("two-fpgas", "compute-1")
    first = server.arqs
    arqs = replay.evacuate(server, "compute-2")
    assert {a["hostname"] for a in arqs} == {"compute-2"}
    assert not {a["uuid"] for a in first} & {a["uuid"] for a in arqs}
    stack.settle()
    # The events of each bind in the order of its PATCH (Nova's ARQ order).
    assert bodies(stack.nova, server.uuid) == [
        all_completed(server.uuid, first),
        all_completed(server.uuid, server.arqs),
    ]


def test_shelve_offload_and_unshelve(stack, replay):
    stack.profile("two-fpgas", TWO_FPGAS)
    server = replay.boot("two-fpgas", "compute-1")
    first = server.arqs
    assert sorted(replay.shelve_offload(server)) == sorted(a["uuid"] for a in first)
    r = replay.accelerator.get("/accelerator_requests", params={"instance": server.uuid})
    assert r.json() == {"arqs": []}
    arqs = replay.unshelve(server, "compute-2")
    assert {(a["hostname"], a["state"]) for a in arqs} == {("compute-2", "Bound")}
    stack.settle()
    # The events of each bind in the order of its PATCH (Nova's ARQ order).
    assert bodies(stack.nova, server.uuid) == [
        all_completed(server.uuid, first),
        all_completed(server.uuid, server.arqs),
    ]


def test_bind_to_an_unknown_provider_fails_and_nova_deletes(stack, replay):
    stack.profile("one-fpga", [{"resources:FPGA": "1"}])
    server_uuid = str(uuid.uuid4())
    stack.nova.add_server(server_uuid, None)
    server = Server(server_uuid, "one-fpga")
    unknown = str(uuid.uuid4())
    with pytest.raises(NovaError, match="Binding failed"):
        replay.create_and_bind(server, "compute-1", {"device_profile_0": [unknown]})
    assert [c[:1] + c[2:] for c in replay.calls] == [("POST", 201), ("PATCH", 409), ("DELETE", 204)]
    assert replay.calls[-1][1] == f"/v2/accelerator_requests?arqs={server.arqs[0]['uuid']}"
    stack.settle()
    assert bodies(stack.nova, server_uuid) == [
        {"events": [event(server_uuid, server.arqs[0]["uuid"], "failed")]}
    ]


def test_bind_to_a_disabled_device_fails_and_nova_deletes(stack, replay):
    stack.profile("one-fpga", [{"resources:FPGA": "1"}])
    admin = stack.adapter("admin")
    devices = admin.get("/devices").json()["devices"]
    for device in devices:
        if device["hostname"] == "compute-1":
            assert admin.post(f"/devices/{device['uuid']}/disable").status_code == 200
    with pytest.raises(NovaError, match="Binding failed"):
        replay.boot("one-fpga", "compute-1")
    server = replay.servers[-1]
    assert [c[0] for c in replay.calls[-3:]] == ["POST", "PATCH", "DELETE"]
    assert [c[2] for c in replay.calls[-3:]] == [201, 409, 204]
    stack.settle()
    assert bodies(stack.nova, server.uuid) == [
        {"events": [event(server.uuid, server.arqs[0]["uuid"], "failed")]}
    ]


# -- binds that program the device first (doc/programming.md) -------------------------------


class SimulatedAgent(threading.Thread):
    """compute-1's agent, played through the agent API with the ``exosuit`` service
    user's token: it polls its desired state, reports each program's progress up to
    ``last`` and then, as after any load, a new inventory snapshot whose deployable
    carries the loaded function's trait."""

    def __init__(self, stack: Stack, last: str = "done", **fields) -> None:
        super().__init__(name="simulated-agent", daemon=True)
        self.stack, self.last, self.fields = stack, last, fields
        self.reported: list[tuple[str, int]] = []
        self.stop = threading.Event()

    def call(self, method: str, path: str, **kwargs):
        url = f"{self.stack.url}/agent/v1/hosts/compute-1/{path}"
        return self.stack.adapter("agent").request(url, method, raise_exc=False, **kwargs)

    def run(self) -> None:
        deadline = time.monotonic() + 30
        while not self.stop.is_set() and time.monotonic() < deadline:
            programs = self.call("GET", "desired_state").json()["programs"]
            for program in programs:
                for state in ("fetching", "programming", "verifying", self.last):
                    body = {"state": state, **(self.fields if state == self.last else {})}
                    r = self.call("PUT", f"programs/{program['uuid']}", json=body)
                    self.reported.append((state, r.status_code))
                if self.last == "done":
                    report_programmable(self.stack, "compute-1", program["image"]["function_id"])
                return
            time.sleep(0.1)


def report_programmable(stack: Stack, host: str, function_id: str | None = None) -> None:
    """The host's FPGAs as a programmable driver reports them; with the trait of the
    function loaded, if any."""
    traits = ("CUSTOM_FAKE_DEVICE",)
    if function_id:
        traits += (simulated.function_id_trait(function_id),)
    devices = [
        programmable_fpga(a, handles=2, hostname=host, traits=traits)
        for a in ("0000:0c:00.0", "0000:0d:00.0")
    ]
    stack.report(host, devices=devices)


def programmed_profile(stack: Stack) -> dict:
    """Programmable FPGAs on compute-1, a public image in the catalogue (as an admin
    of p1 uploads it), and a profile that asks for it."""
    report_programmable(stack, "compute-1")
    admin = stack.adapter("admin")
    data = uuid.uuid4().bytes * 64
    body = {"name": "nic-offload", "format": "simulated", "visibility": "public"}
    body.update(function_id=FUNCTION)
    headers = {"OpenStack-API-Version": "accelerator 2.6"}
    image = admin.post("/images", json=body, headers=headers).json()
    r = admin.put(
        f"/images/{image['uuid']}/file",
        data=data,
        headers={**headers, "Content-Type": "application/octet-stream"},
        raise_exc=False,
    )
    assert r.status_code == 204, r.text
    stack.profile("programmed", [{"resources:FPGA": "1", "accel:bitstream_id": image["uuid"]}])
    return image


def deployable_traits(stack: Stack, rp_uuid: str) -> set[str]:
    for deployable in stack.adapter("admin").get("/deployables").json()["deployables"]:
        if deployable["rp_uuid"] == rp_uuid:
            attributes = json.loads(deployable["attributes_list"])
            return {v for a in attributes for k, v in a.items() if k.startswith("trait")}
    raise AssertionError(f"no deployable has provider {rp_uuid}")


def test_a_bind_that_programs_its_device(stack, replay):
    """nova-compute waits for the event: the bind resolves when the host's agent
    reports the program done, after the PATCH answered; the device then has the
    image, and its function trait once the agent reports its inventory again."""
    image = programmed_profile(stack)
    agent = SimulatedAgent(stack, loaded={"function_id": FUNCTION})
    agent.start()
    try:
        server = replay.boot("programmed", "compute-1")
    finally:
        agent.join(30)
    assert agent.reported == [
        ("fetching", 200),
        ("programming", 200),
        ("verifying", 200),
        ("done", 200),
    ]
    [arq] = replay.arqs_for_instance(server)
    assert arq["state"] == "Bound"
    stack.settle()
    [body] = bodies(stack.nova, server.uuid)
    assert body == all_completed(server.uuid, server.arqs)
    [request] = [r for r in stack.nova.requests if r.body == body]
    assert request.status == 200  # compute was waiting on its host
    deployables = stack.adapter("admin").get("/deployables").json()["deployables"]
    [programmed] = [d for d in deployables if d["rp_uuid"] == arq["device_rp_uuid"]]
    assert programmed["bitstream_id"] == image["uuid"]
    assert simulated.function_id_trait(FUNCTION) in deployable_traits(stack, arq["device_rp_uuid"])


def test_a_failed_program_fails_the_bind_with_one_event(stack, replay):
    programmed_profile(stack)
    agent = SimulatedAgent(stack, "failed", reason="fpgaconf exited 1", restored=True)
    agent.start()
    try:
        with pytest.raises(NovaError, match="failed to bind"):
            replay.boot("programmed", "compute-1")
    finally:
        agent.join(30)
    server = replay.servers[-1]
    [arq] = replay.arqs_for_instance(server)
    assert arq["state"] == "BindFailed"
    stack.settle()
    assert bodies(stack.nova, server.uuid) == [
        {"events": [event(server.uuid, arq["uuid"], "failed")]}
    ]


@pytest.mark.parametrize("bind_timeout", [2])
def test_a_program_the_host_never_reports_fails_the_bind_at_bind_timeout(stack, replay):
    programmed_profile(stack)
    with pytest.raises(NovaError, match="failed to bind"):
        replay.boot("programmed", "compute-1")
    server = replay.servers[-1]
    [arq] = replay.arqs_for_instance(server)
    assert arq["state"] == "BindFailed"
    stack.settle()
    assert bodies(stack.nova, server.uuid) == [
        {"events": [event(server.uuid, arq["uuid"], "failed")]}
    ]
    # The program failed with it: the device is free again, nothing left to run.
    agent = SimulatedAgent(stack)
    assert agent.call("GET", "desired_state").json()["programs"] == []
