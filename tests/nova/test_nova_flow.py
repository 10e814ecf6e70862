"""Nova's flows replayed against a running Exosuit: create, delete, evacuate,
shelve-offload and unshelve, failed binds, a bind that waits for its host.

Exosuit is served over HTTP (cheroot, as ``exosuit-api`` runs it) with its real
conductor worker in the same process, on SQLite and PostgreSQL. Every token is
a real Keystone's (tests/functional/keystone_fixture.py): Nova's calls, replayed
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
from tests.conftest import empty_database
from tests.functional.keystone_fixture import (
    REGION,
    Keystone,
)
from tests.helpers.inventory import fpga, snapshot
from tests.nova.fake_nova import FakeNova, keystone_tokens
from tests.nova.replay import NovaError, NovaReplay, Server
from tests.nova.test_notify import event

HOSTS = ("compute-1", "compute-2")
TWO_FPGAS = [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"},
             {"resources:FPGA": "1"}]
BITSTREAM = "1e1b5b6c-6a3c-4a57-9c55-6b2f2c3c5d11"
CONDUCTOR = Settings(poll_interval=0.05, lease_seconds=30, max_attempts=5, backoff_base=0.1,
                     backoff_max=0.5)


class Stack:
    """A running Exosuit (HTTP API + conductor) on one database, and its fake Nova."""

    def __init__(self, conf, db, nova: FakeNova, sessions: dict) -> None:
        self.conf, self.db, self.nova = conf, db, nova
        app = loadapp(conf, db)
        self.server = cheroot_wsgi.Server(("127.0.0.1", 0), app, numthreads=8,
                                          server_name="exosuit-test")
        self.server.prepare()
        self.url = f"http://127.0.0.1:{self.server.bind_addr[1]}"
        self._thread = threading.Thread(target=self.server.serve, name="exosuit-api",
                                        daemon=True)
        self._thread.start()
        self.conductor = Conductor(conf, db, workers=1, settings=CONDUCTOR)
        self.conductor.start()
        self.sessions = sessions

    def adapter(self, who: str) -> ksa_adapter.Adapter:
        """An Adapter on Exosuit's /v2 with ``who``'s session (nova, admin, agent)."""
        return ksa_adapter.Adapter(self.sessions[who], service_type="accelerator",
                                   endpoint_override=f"{self.url}/v2")

    def stop(self) -> None:
        self.conductor.stop(timeout=10)
        self.server.stop()
        self._thread.join(10)

    def report(self, host: str, addresses=("0000:0c:00.0", "0000:0d:00.0")) -> None:
        devices = [fpga(a, handles=2, name=f"{host}_{a}") for a in addresses]
        r = self.adapter("agent").put(f"{self.url}/agent/v1/hosts/{host}/inventory",
                                      json=snapshot(host, devices), raise_exc=False)
        assert r.status_code == 200, r.text

    def profile(self, name: str, groups: list[dict]) -> None:
        r = self.adapter("admin").post("/device_profiles", json=[{"name": name,
                                                                 "groups": groups}],
                                       raise_exc=False)
        assert r.status_code == 201, r.text

    def settle(self, timeout: float = 20.0) -> None:
        """Wait until no notification is due or running (delayed ones may wait)."""
        jobs = models.jobs
        deadline = time.monotonic() + timeout
        while True:
            with self.db.engine.connect() as conn:
                busy = conn.execute(sa.select(sa.func.count()).select_from(jobs).where(
                    jobs.c.kind == "nova_notify",
                    sa.or_(jobs.c.state == "running",
                           sa.and_(jobs.c.state == "pending",
                                   jobs.c.run_after <= models.utcnow())))).scalar()
            if not busy:
                return
            if time.monotonic() > deadline:
                raise AssertionError("nova_notify jobs still due or running")
            time.sleep(0.05)


def bodies(nova: FakeNova, server_uuid: str) -> list[dict]:
    """The bodies of the event requests Nova answered (200/207/404) for a server."""
    return [r.body for r in nova.requests if r.status in (200, 207, 404)
            and r.body["events"][0]["server_uuid"] == server_uuid]


def all_completed(server_uuid: str, arqs: list[dict]) -> dict:
    return {"events": [event(server_uuid, a["uuid"], "completed") for a in arqs]}


# -- the cloud: Keystone, Exosuit, Nova ------------------------------------------------

def exosuit_conf(workdir: Path, keystone: Keystone, db, nova_url: str):
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
bind_timeout = 30
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
{credentials}""")
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
def stack(tmp_path, keystone, database):
    """Exosuit (HTTP + conductor) on ``database`` with Keystone, and a fake Nova that
    validates every token with Keystone as the ``nova`` service user."""
    nova_session = keystone.session(keystone.password("nova"))
    nova = FakeNova(keystone_tokens(nova_session, keystone.auth_url),
                    require_service_token=True).start()
    made = None
    try:
        conf = exosuit_conf(tmp_path, keystone, database, nova.url)
        user_token = keystone.token("p1-member")
        sessions = {
            # Nova: the user's token, plus a service token of the nova user.
            "nova": ksa_session.Session(auth=service_token.ServiceTokenAuthWrapper(
                user_auth=TokenOnly(None, user_token), service_auth=keystone.password("nova"))),
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
        endpoint_override=f"{stack.url}/v2")
    r = user_alone.patch("/accelerator_requests", json={arq["uuid"]: [
        {"op": "remove", "path": "/hostname"}]}, raise_exc=False)
    assert r.status_code == 403 and "requires a service token" in r.text


# -- the flows -------------------------------------------------------------------------

def test_create_then_delete(stack, replay):
    stack.profile("two-fpgas", TWO_FPGAS)
    server = replay.boot("two-fpgas", "compute-1")
    arqs = replay.arqs_for_instance(server)
    assert [(a["state"], a["hostname"], a["attach_handle_type"]) for a in arqs] == [
        ("Bound", "compute-1", "TEST_PCI")] * 2
    assert [c[:2] for c in replay.calls[:3]] == [
        ("GET", "/v2/device_profiles?name=two-fpgas"),
        ("POST", "/v2/accelerator_requests"),
        ("PATCH", "/v2/accelerator_requests")]
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
    assert bodies(stack.nova, server.uuid) == [all_completed(server.uuid, first),
                                               all_completed(server.uuid, server.arqs)]


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
    assert bodies(stack.nova, server.uuid) == [all_completed(server.uuid, first),
                                               all_completed(server.uuid, server.arqs)]


def test_bind_to_an_unknown_provider_fails_and_nova_deletes(stack, replay):
    stack.profile("one-fpga", [{"resources:FPGA": "1"}])
    server_uuid = str(uuid.uuid4())
    stack.nova.add_server(server_uuid, None)
    server = Server(server_uuid, "one-fpga")
    unknown = str(uuid.uuid4())
    with pytest.raises(NovaError, match="Binding failed"):
        replay.create_and_bind(server, "compute-1", {"device_profile_0": [unknown]})
    assert [c[:1] + c[2:] for c in replay.calls] == [("POST", 201), ("PATCH", 409),
                                                     ("DELETE", 204)]
    assert replay.calls[-1][1] == f"/v2/accelerator_requests?arqs={server.arqs[0]['uuid']}"
    stack.settle()
    assert bodies(stack.nova, server_uuid) == [
        {"events": [event(server_uuid, server.arqs[0]["uuid"], "failed")]}]


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
        {"events": [event(server.uuid, server.arqs[0]["uuid"], "failed")]}]


def test_a_bind_that_waits_for_its_host(stack, replay):
    """nova-compute waits for the event: the bind resolves when the host's agent
    reports the programming done, after the PATCH answered."""
    stack.profile("programmed", [{"resources:FPGA": "1", "accel:bitstream_id": BITSTREAM}])
    agent = stack.adapter("agent")
    reported = []

    def agent_reports():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not reported:
            arqs = stack.adapter("admin").get("/accelerator_requests").json()["arqs"]
            for arq in arqs:
                if arq["state"] == "BindStarted":
                    r = agent.put(f"{stack.url}/agent/v1/hosts/{arq['hostname']}/"
                                  f"accelerator_requests/{arq['uuid']}",
                                  json={"result": "done"}, raise_exc=False)
                    reported.append(r.status_code)
            time.sleep(0.2)

    thread = threading.Thread(target=agent_reports)
    thread.start()
    try:
        server = replay.boot("programmed", "compute-1")
    finally:
        thread.join(30)
    assert reported == [200]
    stack.settle()
    [body] = bodies(stack.nova, server.uuid)
    assert body == all_completed(server.uuid, server.arqs)
    [request] = [r for r in stack.nova.requests if r.body == body]
    assert request.status == 200  # compute was waiting on its host
