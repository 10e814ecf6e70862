"""Attach and detach (microversion 2.10) through the API, in-process, on SQLite,
PostgreSQL and MariaDB: without Nova a server is a standalone consumer, and its
attachment is the claim of that consumer (made, found again, refused for another
profile, released by detach, by profile or all); a Nova that does not answer is a 503
that holds nothing. The Nova path (409 for Nova's servers) is tested against the real
Nova: tests/nova/test_real_nova_attach.py."""

from __future__ import annotations

import socket
import uuid

import pytest

from exosuit.api.deploy import loadapp
from exosuit.conf import make_conf
from tests.conftest import PERSONAS, ApiClient
from tests.helpers.claims import CLAIMS, fault, fpga, gpu, make_world

V = "2.10"
HOST = "srv-host"
OTHER = "srv-other"


def servers(server: str, verb: str) -> str:
    return f"/v2/servers/{server}/{verb}"


@pytest.fixture
def world(database, tmp_path):
    w = make_world(database, tmp_path)
    w.report(HOST, [fpga("0000:5e:00.0", handles=2), gpu("0000:3b:00.0")])
    w.report(OTHER, [fpga("0000:5f:00.0", handles=1)])
    w.profile("fpga", {"resources:FPGA": "1"})
    w.profile("gpu", {"resources:PGPU": "1"})
    return w


def attach(world, server: str, body: dict, expect: int, as_=None) -> dict:
    r = (as_ or world.member).post(servers(server, "attach"), body, version=V)
    assert r.status_code == expect, r.text
    return r.json if expect < 300 else fault(r)


def detach(world, server: str, body: dict, expect: int, as_=None) -> dict:
    r = (as_ or world.member).post(servers(server, "detach"), body, version=V)
    assert r.status_code == expect, r.text
    return r.json if expect < 300 else fault(r)


def test_attach_is_the_servers_claim_and_detach_releases_it(world):
    server = str(uuid.uuid4())
    claim = attach(world, server.upper(), {"device_profile_name": "fpga"}, 201)
    # The id is the claim's consumer, in lower case as Nova's ids are.
    assert claim["consumer"] == server and claim["state"] == "bound"
    assert claim["device_profile_name"] == "fpga"
    [device] = claim["devices"]
    assert world.held() == 1
    assert world.show(claim["uuid"]) == claim
    listed = world.member.get(f"{CLAIMS}?consumer={server}", version=V).json["claims"]
    assert [c["uuid"] for c in listed] == [claim["uuid"]]
    # Attach again: the same claim (idempotent), 200 this time; nothing more held.
    again = attach(world, server, {"device_profile_name": "fpga"}, 200)
    assert again["uuid"] == claim["uuid"] and world.held() == 1
    body = {"device_profile_name": "fpga", "hostname": claim["hostname"]}
    assert attach(world, server, body, 200)["uuid"] == claim["uuid"]
    # On another host than the one it holds its devices on: refused, not ignored.
    elsewhere = OTHER if claim["hostname"] == HOST else HOST
    error = attach(world, server, {**body, "hostname": elsewhere}, 409)
    assert error["code"] == "exosuit.server.attached"
    assert f"device profile fpga on host {claim['hostname']}" in error["faultstring"]
    assert world.held() == 1

    detached = detach(world, server, {}, 200)["claims"]
    assert [(c["uuid"], c["state"]) for c in detached] == [(claim["uuid"], "released")]
    assert detached[0]["reason"] == "detached from its server"
    assert world.held() == 0
    handle = world.admin.get(f"/v2/attach_handles/{device['attach_handle_uuid']}", version=V)
    assert handle.json["in_use"] is False
    # Nothing attached any more: 404, naming why.
    error = detach(world, server, {}, 404)
    assert error["code"] == "exosuit.server.not_attached"
    assert server in error["faultstring"] and "no live claim" in error["faultstring"]
    # Attached again after a detach: a new claim.
    assert attach(world, server, {"device_profile_name": "fpga"}, 201)["uuid"] != claim["uuid"]


def test_a_server_holds_one_attachment_and_detach_by_profile_names_what_it_holds(world):
    server = "my-workstation"  # any consumer id; not a UUID: Nova is never asked
    claim = attach(world, server, {"device_profile_name": "fpga"}, 201)
    error = attach(world, server, {"device_profile_name": "gpu"}, 409)
    assert error["code"] == "exosuit.server.attached"
    assert claim["uuid"] in error["faultstring"] and "device profile fpga" in error["faultstring"]
    assert world.held() == 1  # the GPU was taken and given back
    error = detach(world, server, {"device_profile_name": "gpu"}, 404)
    assert error["code"] == "exosuit.server.not_attached"
    assert f"it holds only {claim['uuid']} (fpga)" in error["faultstring"]
    assert world.show(claim["uuid"])["state"] == "bound"
    [released] = detach(world, server, {"device_profile_name": "fpga"}, 200)["claims"]
    assert released["uuid"] == claim["uuid"] and released["state"] == "released"
    assert attach(world, server, {"device_profile_name": "gpu"}, 201)["hostname"] == HOST


def test_a_claim_made_with_the_server_as_consumer_is_detached_too(world):
    """Detach releases the consumer's live claims however they were made, all of them
    (an admin's view spans projects)."""
    server = str(uuid.uuid4())
    mine = world.claim({"device_profile_name": "fpga", "consumer": server})
    theirs = world.claim(
        {"device_profile_name": "gpu", "consumer": server}, as_=world.api.as_(PERSONAS["admin"])
    )
    # The member sees only its project's.
    [only] = detach(world, server, {}, 200)["claims"]
    assert only["uuid"] == mine["uuid"]
    [also] = detach(world, server, {}, 200, as_=world.admin)["claims"]
    assert also["uuid"] == theirs["uuid"]
    assert world.held() == 0


def test_the_claims_own_refusals_hold_nothing(world):
    server = str(uuid.uuid4())
    error = attach(world, server, {"device_profile_name": "nope"}, 404)
    assert error["code"] == "exosuit.device_profile.not_found"
    error = attach(world, server, {"device_profile_name": "gpu", "hostname": OTHER}, 409)
    assert error["code"] == "exosuit.claim.unsatisfiable"
    error = attach(world, server, {"device_profile_name": "fpga", "hostname": "nowhere"}, 404)
    assert error["code"] == "exosuit.host.not_found"
    assert (
        attach(world, server, {"device_profile_name": "fpga", "hostname": OTHER}, 201)["hostname"]
        == OTHER
    )
    # OTHER's only FPGA is held: another server cannot have it there.
    error = attach(world, "other", {"device_profile_name": "fpga", "hostname": OTHER}, 409)
    assert error["code"] == "exosuit.claim.unsatisfiable"
    assert world.held() == 1


@pytest.mark.parametrize(
    "verb, body, where",
    [
        ("attach", {}, "device_profile_name"),
        ("attach", {"device_profile_name": ""}, "device_profile_name"),
        ("attach", {"device_profile_name": "fpga", "consumer": "x"}, "consumer"),
        ("attach", {"device_profile_name": "fpga", "expires_in": 5}, "expires_in"),
        ("detach", {"hostname": HOST}, "hostname"),
        ("detach", [], "(body)"),
    ],
)
def test_bodies_it_will_not_act_on_are_400_naming_them(world, verb, body, where):
    r = world.member.post(servers("s1", verb), body, version=V)
    assert r.status_code == 400, r.text
    error = fault(r)
    assert error["code"] == "exosuit.body.invalid" and where in error["faultstring"]
    assert world.held() == 0


def test_a_missing_body_is_400_and_an_id_no_consumer_can_have_is_404(world):
    r = world.member.post(servers("s1", "detach"), version=V)
    assert r.status_code == 400 and fault(r)["code"] == "exosuit.body.missing"
    r = world.member.post(servers("x" * 256, "attach"), {"device_profile_name": "fpga"}, version=V)
    assert r.status_code == 404 and fault(r)["code"] == "exosuit.not_found"


def test_below_2_10_the_paths_are_not_found_and_a_reader_may_not_attach(world):
    r = world.member.post(servers("s1", "attach"), {"device_profile_name": "fpga"}, version="2.9")
    assert r.status_code == 404 and fault(r)["code"] == "exosuit.not_found"
    reader = world.api.as_(PERSONAS["reader"])
    for verb in ("attach", "detach"):
        r = reader.post(servers("s1", verb), {"device_profile_name": "fpga"}, version=V)
        assert r.status_code == 403, r.text
    assert world.held() == 0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_nova_that_does_not_answer_is_503_and_holds_nothing(database, tmp_path):
    """With [nova] configured, a UUID is first asked of Nova: unreachable, whose server it
    is cannot be told (503, Retry-After), and nothing is claimed. An id that is no UUID
    is not Nova's, and attaches without asking."""
    dead = f"http://127.0.0.1:{_closed_port()}"
    path = tmp_path / "exosuit.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[inventory]\nnew_device_activation = ready\n"
        f"[nova]\nauth_type = admin_token\ntoken = t\nendpoint = {dead}\n"
        f"endpoint_override = {dead}\n"
    )
    api = ApiClient(loadapp(make_conf([str(path)]), database))
    world = make_world(database, tmp_path)
    world.api, world.member = api, api.as_(PERSONAS["member"])
    world.agent, world.admin = api.as_(PERSONAS["service"]), api.as_(PERSONAS["admin"])
    world.report(HOST, [fpga("0000:5e:00.0", handles=1)])
    world.profile("fpga", {"resources:FPGA": "1"})
    server = str(uuid.uuid4())
    r = world.member.post(servers(server, "attach"), {"device_profile_name": "fpga"}, version=V)
    assert r.status_code == 503, r.text
    assert r.headers["Retry-After"] == "2"
    error = fault(r)
    assert error["code"] == "exosuit.nova.unavailable"
    assert f"Whether Nova manages server {server} cannot be told" in error["faultstring"]
    assert world.held() == 0
    # Detach of nothing asks Nova too (is it Nova's?): 503 again.
    r = world.member.post(servers(server, "detach"), {}, version=V)
    assert r.status_code == 503 and fault(r)["code"] == "exosuit.nova.unavailable"
    # A claim of the server is released without asking Nova.
    world.claim({"device_profile_name": "fpga", "consumer": server})
    assert detach(world, server, {}, 200)["claims"][0]["state"] == "released"
    assert attach(world, "container-7", {"device_profile_name": "fpga"}, 201)["consumer"] == (
        "container-7"
    )
