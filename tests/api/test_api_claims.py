"""Standalone claims through the API (in-process, SQLite, PostgreSQL and MariaDB): how
devices are picked, all or nothing on one host, the named-handle form, idempotent
release and consumers, renew, and a claim's devices held exactly like a VM's (the ARQ
API refuses them, inactive/program/uninstall name the claim, removal grace keeps the
device lost)."""

from __future__ import annotations

import uuid

import pytest

from tests.helpers.claims import ARQS, CLAIMS, V, fault, fpga, gpu, make_world
from tests.helpers.programs import agent_report, program_body, programmable_fpga, upload_image

HOST = "claim-host"
OTHER = "claim-other"
FPGA_A = "0000:5e:00.0"
FPGA_B = "0000:5f:00.0"
GPU = "0000:3b:00.0"
PROG_HOST = "claim-prog"


@pytest.fixture
def world(database, tmp_path):
    w = make_world(database, tmp_path)
    w.report(HOST, [fpga(FPGA_A, handles=2), gpu(GPU)])
    w.report(OTHER, [fpga(FPGA_B, handles=4)])
    w.profile("fpga", {"resources:FPGA": "1"})
    return w


def test_a_claim_binds_a_device_and_shows_its_attach_info(world):
    claim = world.claim({"device_profile_name": "fpga", "consumer": "job-1"})
    assert claim["state"] == "bound" and claim["reason"] is None
    assert claim["consumer"] == "job-1" and claim["container"] is False
    assert claim["device_profile_name"] == "fpga"
    assert claim["project_id"] == world.member.headers["X-Project-Id"]
    assert claim["user_id"] == "u-member"
    assert claim["expires_at"] is None and claim["released_at"] is None
    assert claim["cdi"] == {"state": None, "reason": None}
    (device,) = claim["devices"]
    assert device["attach_handle_type"] == "TEST_PCI"
    assert set(device["attach_handle_info"]) == {"domain", "bus", "device", "function"}
    assert device["cdi_device"] is None
    handle = world.admin.get(f"/v2/attach_handles/{device['attach_handle_uuid']}", version=V).json
    assert handle["in_use"] is True
    assert handle["holder"]["arq_uuid"] == device["arq_uuid"]
    assert handle["holder"]["claim_uuid"] == claim["uuid"]
    assert world.show(claim["uuid"]) == claim
    # Its ARQ is an ordinary one, Bound on the claim's host, held by the claim.
    arq = world.admin.get(f"{ARQS}/{device['arq_uuid']}", version=V).json
    assert (arq["state"], arq["hostname"], arq["claim_uuid"]) == (
        "Bound",
        claim["hostname"],
        claim["uuid"],
    )
    assert arq["instance_uuid"] is None
    assert "claim_uuid" not in world.admin.get(f"{ARQS}/{device['arq_uuid']}", version="2.7").json


def test_the_devices_asked_are_taken_on_one_host_or_none(world):
    """FPGA + GPU: only HOST has both. A claim that cannot have every group on one
    host holds nothing."""
    world.profile("both", {"resources:FPGA": "1"}, {"resources:PGPU": "1"})
    claim = world.claim({"device_profile_name": "both"})
    assert claim["hostname"] == HOST
    assert [d["rp_uuid"] is not None for d in claim["devices"]] == [True, True]
    held = world.held()
    r = world.member.post(CLAIMS, {"device_profile_name": "both"}, version=V)
    assert r.status_code == 409, r.text
    error = fault(r)
    assert error["code"] == "exosuit.claim.unsatisfiable"
    assert "nothing is held" in error["faultstring"]
    assert world.held() == held  # the free FPGA handle of HOST was not kept
    r = world.admin.get(f"{ARQS}", version=V)
    assert len(r.json["arqs"]) == 2  # the first claim's only


def test_a_named_host_is_the_one_used_and_an_unknown_host_is_404(world):
    claim = world.claim({"device_profile_name": "fpga", "hostname": OTHER})
    assert claim["hostname"] == OTHER
    r = world.member.post(CLAIMS, {"device_profile_name": "fpga", "hostname": "nowhere"}, version=V)
    assert r.status_code == 404 and fault(r)["code"] == "exosuit.host.not_found"
    world.profile("gpu", {"resources:PGPU": "1"})
    r = world.member.post(CLAIMS, {"device_profile_name": "gpu", "hostname": OTHER}, version=V)
    assert r.status_code == 409 and "host claim-other" in fault(r)["faultstring"]


def test_traits_and_resource_classes_are_matched_as_placement_would(world):
    world.profile("no-fake", {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "forbidden"})
    world.profile("t4", {"resources:PGPU": "1", "trait:CUSTOM_NVIDIA_1EB8": "required"})
    world.profile("a100", {"resources:PGPU": "1", "trait:CUSTOM_NVIDIA_20B0": "required"})
    r = world.member.post(CLAIMS, {"device_profile_name": "no-fake"}, version=V)
    assert r.status_code == 409 and fault(r)["code"] == "exosuit.claim.unsatisfiable"
    assert world.claim({"device_profile_name": "t4"})["hostname"] == HOST
    r = world.member.post(CLAIMS, {"device_profile_name": "a100"}, version=V)
    assert r.status_code == 409
    assert world.held() == 1


def test_a_device_that_is_not_ready_or_is_disabled_is_not_claimed(world):
    (fpga_b,) = [d for d in world.devices(OTHER)]
    (fpga_a,) = [d for d in world.devices(HOST) if d["type"] == "FPGA"]
    r = world.admin.post(f"/v2/devices/{fpga_a['uuid']}/disable")
    assert r.status_code == 200, r.text
    r = world.admin.post(
        "/v2/device_activations", {"state": "inactive", "uuids": [fpga_b["uuid"]]}, version=V
    )
    assert r.status_code == 202, r.text
    r = world.member.post(CLAIMS, {"device_profile_name": "fpga"}, version=V)
    assert r.status_code == 409 and fault(r)["code"] == "exosuit.claim.unsatisfiable"
    assert world.held() == 0


def test_release_frees_everything_and_is_idempotent(world):
    claim = world.claim({"device_profile_name": "fpga"})
    world.release(claim["uuid"])
    world.release(claim["uuid"])
    released = world.show(claim["uuid"])
    assert (released["state"], released["devices"]) == ("released", [])
    assert released["released_at"] is not None and released["reason"] == "released"
    assert world.held() == 0
    assert world.admin.get(ARQS, version=V).json["arqs"] == []
    r = world.member.delete(f"{CLAIMS}/{uuid.uuid4()}", version=V)
    assert r.status_code == 404 and fault(r)["code"] == "exosuit.claim.not_found"
    r = world.member.get(f"{CLAIMS}/not-a-uuid", version=V)
    assert r.status_code == 404


def test_renew_moves_the_expiry_and_a_released_claim_cannot_be_renewed(world):
    claim = world.claim({"device_profile_name": "fpga", "expires_in": 60})
    assert claim["expires_at"] is not None
    r = world.member.post(f"{CLAIMS}/{claim['uuid']}/renew", {"expires_in": 86400}, version=V)
    assert r.status_code == 200, r.text
    assert r.json["expires_at"] > claim["expires_at"]
    for bad in ({}, {"expires_in": 0}, {"expires_in": "1"}, {"expires_in": 1, "x": 1}):
        r = world.member.post(f"{CLAIMS}/{claim['uuid']}/renew", bad, version=V)
        assert r.status_code == 400, (bad, r.text)
    world.release(claim["uuid"])
    r = world.member.post(f"{CLAIMS}/{claim['uuid']}/renew", {"expires_in": 60}, version=V)
    assert r.status_code == 409 and fault(r)["code"] == "exosuit.claim.released"


def test_a_consumer_has_one_live_claim(world):
    first = world.claim({"device_profile_name": "fpga", "consumer": "k8s:ns/pod/uid"})
    again = world.claim({"device_profile_name": "fpga", "consumer": "k8s:ns/pod/uid"})
    assert again["uuid"] == first["uuid"] and world.held() == 1
    # Another project's consumer of the same name is another consumer.
    other = world.claim(
        {"device_profile_name": "fpga", "consumer": "k8s:ns/pod/uid"},
        as_=world.api.as_(
            {"X-User-Id": "u2", "X-Project-Id": "p2" + "0" * 30, "X-Roles": "member,reader"}
        ),
    )
    assert other["uuid"] != first["uuid"]
    world.release(first["uuid"])
    renewed = world.claim({"device_profile_name": "fpga", "consumer": "k8s:ns/pod/uid"})
    assert renewed["uuid"] != first["uuid"]
    listed = world.member.get(f"{CLAIMS}?consumer=k8s:ns/pod/uid", version=V).json["claims"]
    assert [c["uuid"] for c in listed] == [renewed["uuid"], first["uuid"]]


def test_the_named_attach_handles_are_claimed_or_the_holder_is_named(world):
    free = world.handles(hostname=OTHER)
    claim = world.claim({"attach_handles": [free[0]["uuid"], free[1]["uuid"]], "hostname": OTHER})
    assert claim["device_profile_name"] is None
    assert [d["attach_handle_uuid"] for d in claim["devices"]] == [free[0]["uuid"], free[1]["uuid"]]
    r = world.member.post(CLAIMS, {"attach_handles": [free[1]["uuid"], free[2]["uuid"]]}, version=V)
    assert r.status_code == 409, r.text
    assert f"held by claim {claim['uuid']}" in fault(r)["faultstring"]
    assert world.held() == 2
    # Handles of two hosts, a host that is not theirs, an unknown handle.
    (on_host,) = [h for h in world.handles(hostname=HOST) if h["attach_type"] == "PCI"]
    r = world.member.post(CLAIMS, {"attach_handles": [free[3]["uuid"], on_host["uuid"]]}, version=V)
    assert r.status_code == 409 and "of one host" in fault(r)["faultstring"]
    r = world.member.post(
        CLAIMS, {"attach_handles": [free[3]["uuid"]], "hostname": HOST}, version=V
    )
    assert r.status_code == 409 and f"not {HOST}" in fault(r)["faultstring"]
    r = world.member.post(CLAIMS, {"attach_handles": [str(uuid.uuid4())]}, version=V)
    assert r.status_code == 404 and fault(r)["code"] == "exosuit.attach_handle.not_found"


def test_a_handle_held_by_a_vm_is_named_with_its_instance(world):
    world.profile("gpu", {"resources:PGPU": "1"})
    (arq,) = world.nova.post(ARQS, {"device_profile_name": "gpu"}).json["arqs"]
    (deployable,) = [
        d for d in world.admin.get("/v2/deployables").json["deployables"] if "gpu" in d["name"]
    ]
    instance = str(uuid.uuid4())
    ops = [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": deployable["rp_uuid"]},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]
    assert world.nova.patch(ARQS, {arq["uuid"]: ops}).status_code == 202
    (handle,) = [h for h in world.handles(hostname=HOST) if h["attach_type"] == "PCI"]
    r = world.member.post(CLAIMS, {"attach_handles": [handle["uuid"]]}, version=V)
    assert r.status_code == 409
    assert f"of instance {instance}" in fault(r)["faultstring"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "exosuit.claim.selection"),
        (
            {"device_profile_name": "fpga", "attach_handles": [str(uuid.uuid4())]},
            "exosuit.claim.selection",
        ),
        ({"device_profile_name": "fpga", "expires_in": 0}, "exosuit.body.invalid"),
        ({"device_profile_name": "fpga", "container": "yes"}, "exosuit.body.invalid"),
        ({"device_profile_name": "fpga", "consumer": "x" * 256}, "exosuit.body.invalid"),
        ({"device_profile_name": "fpga", "colour": "red"}, "exosuit.body.invalid"),
        ({"attach_handles": ["not-a-uuid"]}, "exosuit.body.invalid"),
        ({"attach_handles": []}, "exosuit.body.invalid"),
        ([], "exosuit.body.invalid"),
    ],
    ids=[
        "neither",
        "both",
        "zero-expiry",
        "container-text",
        "long-consumer",
        "unknown-field",
        "bad-handle",
        "no-handle",
        "not-an-object",
    ],
)
def test_bad_bodies_are_400_and_hold_nothing(world, body, code):
    r = world.member.post(CLAIMS, body, version=V)
    assert r.status_code == 400, r.text
    assert fault(r)["code"] == code
    assert world.held() == 0


def test_a_claim_is_bounded_by_max_arqs_per_request(database, tmp_path):
    before = make_world(database, tmp_path)  # the profile was made before the limit
    before.report(HOST, [fpga(FPGA_A, handles=4)])
    before.profile("three", {"resources:FPGA": "3"})
    world = make_world(database, tmp_path, **{"api.max_arqs_per_request": 2})
    r = world.member.post(CLAIMS, {"device_profile_name": "three"}, version=V)
    assert r.status_code == 400 and fault(r)["code"] == "exosuit.limit.exceeded"
    assert "max_arqs_per_request" in fault(r)["faultstring"]
    handles = [h["uuid"] for h in world.handles()][:3]
    r = world.member.post(CLAIMS, {"attach_handles": handles}, version=V)
    assert r.status_code == 400 and fault(r)["code"] == "exosuit.limit.exceeded"
    assert world.held() == 0


def test_unknown_profile_is_404(world):
    r = world.member.post(CLAIMS, {"device_profile_name": "nope"}, version=V)
    assert r.status_code == 404 and fault(r)["code"] == "exosuit.device_profile.not_found"


def test_lists_filter_and_page(world):
    a = world.claim({"device_profile_name": "fpga", "hostname": HOST, "consumer": "a"})
    b = world.claim({"device_profile_name": "fpga", "hostname": OTHER, "consumer": "b"})
    world.release(a["uuid"])

    def uuids(query: str, who=None) -> list[str]:
        r = (who or world.member).get(f"{CLAIMS}{query}", version=V)
        assert r.status_code == 200, r.text
        return [c["uuid"] for c in r.json["claims"]]

    assert uuids("") == [b["uuid"], a["uuid"]]
    assert uuids("?state=released") == [a["uuid"]]
    assert uuids("?state=bound,pending") == [b["uuid"]]
    assert uuids(f"?hostname={OTHER}") == [b["uuid"]]
    assert uuids("?consumer=a") == [a["uuid"]]
    assert uuids("?limit=1") == [b["uuid"]]
    r = world.member.get(f"{CLAIMS}?limit=1", version=V)
    assert uuids(r.json["next"].split(CLAIMS, 1)[1]) == [a["uuid"]]
    assert uuids("?sort_key=hostname&sort_dir=asc") == [a["uuid"], b["uuid"]]
    # An admin sees every project's, and filters by project; a member may name their own
    # project, and another is refused (never answered with their own claims).
    project = world.member.headers["X-Project-Id"]
    assert uuids(f"?project={project}", world.admin) == [b["uuid"], a["uuid"]]
    assert uuids("?project=someone-else", world.admin) == []
    assert uuids(f"?project={project}") == [b["uuid"], a["uuid"]]
    r = world.member.get(f"{CLAIMS}?project=someone-else", version=V)
    assert r.status_code == 403 and fault(r)["code"] == "exosuit.query.project", r.text
    r = world.member.get(f"{CLAIMS}?state=lost", version=V)
    assert r.status_code == 400 and fault(r)["code"] == "exosuit.query.state"
    # Below 2.8 there are no claims.
    r = world.member.get(CLAIMS, version="2.7")
    assert r.status_code == 404 and fault(r)["code"] == "exosuit.not_found"


def test_another_projects_claim_is_not_found(world):
    claim = world.claim({"device_profile_name": "fpga"})
    other = world.api.as_(
        {"X-User-Id": "u2", "X-Project-Id": "p2" + "0" * 30, "X-Roles": "member,reader"}
    )
    for method, path, body in (
        ("GET", f"{CLAIMS}/{claim['uuid']}", None),
        ("DELETE", f"{CLAIMS}/{claim['uuid']}", None),
        ("POST", f"{CLAIMS}/{claim['uuid']}/renew", {"expires_in": 5}),
    ):
        r = other.request(method, path, body, version=V)
        assert r.status_code == 404, r.text
    assert other.get(CLAIMS, version=V).json["claims"] == []
    assert world.show(claim["uuid"])["state"] == "bound"


# -- held like a VM's ----------------------------------------------------------------------


def test_the_arq_api_refuses_a_claims_arqs(world):
    claim = world.claim({"device_profile_name": "fpga"})
    arq = claim["devices"][0]["arq_uuid"]
    unbind = {
        arq: [
            {"op": "remove", "path": p} for p in ("/hostname", "/device_rp_uuid", "/instance_uuid")
        ]
    }
    for r in (
        world.nova.patch(ARQS, unbind),
        world.nova.delete(f"{ARQS}/{arq}"),
        world.nova.delete(f"{ARQS}?arqs={arq}"),
        world.member.delete(f"{ARQS}/{arq}"),
    ):
        assert r.status_code == 409, r.text
        error = fault(r)
        assert error["code"] == "exosuit.arq.claimed", error
        assert claim["uuid"] in error["faultstring"]
    bind = {
        arq: [
            {"op": "add", "path": "/hostname", "value": HOST},
            {"op": "add", "path": "/device_rp_uuid", "value": claim["devices"][0]["rp_uuid"]},
            {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
        ]
    }
    r = world.nova.patch(ARQS, bind)
    assert r.status_code == 409 and fault(r)["code"] == "exosuit.arq.claimed"
    # Nova deleting an instance's ARQs never touches a claim's.
    r = world.nova.delete(f"{ARQS}?instance={uuid.uuid4()}")
    assert r.status_code == 204
    assert world.show(claim["uuid"])["state"] == "bound" and world.held() == 1
    listed = world.member.get(ARQS, version=V).json["arqs"]
    assert [(a["uuid"], a["claim_uuid"]) for a in listed] == [(arq, claim["uuid"])]


def test_inactive_program_and_uninstall_name_the_claim(world):
    world.report(PROG_HOST, [programmable_fpga(hostname=PROG_HOST)])
    claim = world.claim({"device_profile_name": "fpga", "hostname": PROG_HOST})
    device = claim["devices"][0]["device_uuid"]
    r = world.admin.post(
        "/v2/device_activations", {"state": "inactive", "uuids": [device]}, version=V
    )
    assert r.status_code == 409, r.text
    assert f"claim {claim['uuid']}" in fault(r)["faultstring"]
    image = upload_image(world.admin)
    r = world.admin.patch(
        f"/v2/deployables/{claim['devices'][0]['deployable_uuid']}/program",
        program_body(image["uuid"]),
        version=V,
    )
    assert r.status_code == 409, r.text
    assert fault(r)["code"] == "exosuit.program.in_use"
    assert f"claim {claim['uuid']}" in fault(r)["faultstring"]
    r = world.admin.post("/v2/drivers/static/uninstall", {"hostnames": [PROG_HOST]}, version=V)
    assert r.status_code == 409, r.text
    assert fault(r)["code"] == "exosuit.driver.in_use"
    assert f"claim {claim['uuid']}" in fault(r)["faultstring"]
    world.release(claim["uuid"])
    r = world.admin.post(
        "/v2/device_activations", {"state": "inactive", "uuids": [device]}, version=V
    )
    assert r.status_code == 202, r.text


def test_removal_grace_keeps_a_claimed_device_lost_until_released(world):
    claim = world.claim({"device_profile_name": "fpga", "hostname": OTHER})
    device = claim["devices"][0]["device_uuid"]
    world.report(OTHER, [])  # the FPGA is gone from its host's report
    assert world.device(device)["presence"] == "lost"
    assert world.show(claim["uuid"])["state"] == "bound"
    world.release(claim["uuid"])
    r = world.admin.get(f"/v2/devices/{device}", version=V)
    assert r.status_code == 404, r.text


# -- containers: the desired state and the agent's CDI report ----------------------------------


def test_a_container_claim_is_in_its_hosts_desired_state_until_released(world):
    before = world.desired(OTHER)["generation"]
    claim = world.claim({"device_profile_name": "fpga", "hostname": OTHER, "container": True})
    assert claim["cdi"] == {"state": "pending", "reason": None}
    device = claim["devices"][0]
    assert device["cdi_device"] == f"exosuit.dev/fpga={claim['uuid']}-0"
    state = world.desired(OTHER)
    assert state["generation"] > before
    (entry,) = state["containers"]
    assert entry["claim"] == claim["uuid"]
    (spec,) = entry["devices"]
    assert spec["name"] == f"{claim['uuid']}-0" and spec["class"] == "fpga"
    assert spec["device"] == device["device_uuid"]
    assert spec["attach_handle"] == {
        "type": device["attach_handle_type"],
        "info": device["attach_handle_info"],
    }
    assert spec["controlpath_id"]["cpid_type"] == "PCI"
    assert spec["driver"] == "static"  # the plug-in that found it (tests' inventory helper)
    assert world.desired(HOST)["containers"] == []

    path = f"/agent/v1/hosts/{OTHER}/claims/{claim['uuid']}"
    written = {"cdi": "written", "devices": [device["cdi_device"]]}
    r = world.agent.put(path, {"cdi": "written", "devices": ["exosuit.dev/fpga=x-0"]})
    assert r.status_code == 400 and device["cdi_device"] in fault(r)["faultstring"]
    for _ in range(2):  # idempotent
        r = world.agent.put(path, written)
        assert r.status_code == 200, r.text
        assert r.json == {"claim": claim["uuid"], "cdi": {"state": "written", "reason": None}}
    assert world.show(claim["uuid"])["cdi"] == {"state": "written", "reason": None}
    r = world.agent.put(f"/agent/v1/hosts/{HOST}/claims/{claim['uuid']}", written)
    assert r.status_code == 404, r.text  # not this host's

    generation = world.desired(OTHER)["generation"]
    world.release(claim["uuid"])
    state = world.desired(OTHER)
    assert state["containers"] == [] and state["generation"] > generation
    r = world.agent.put(path, written)
    assert r.status_code == 404 and fault(r)["code"] == "exosuit.claim.not_found"


def test_a_claim_without_container_gets_no_cdi(world):
    claim = world.claim({"device_profile_name": "fpga"})
    assert world.desired(claim["hostname"])["containers"] == []
    r = world.agent.put(
        f"/agent/v1/hosts/{claim['hostname']}/claims/{claim['uuid']}", {"cdi": "failed"}
    )
    assert r.status_code == 404


def test_cdi_names_follow_the_order_of_the_claims_devices(world):
    world.profile("two", {"resources:FPGA": "2"})
    claim = world.claim({"device_profile_name": "two", "hostname": OTHER, "container": True})
    names = [d["cdi_device"] for d in claim["devices"]]
    assert names == [f"exosuit.dev/fpga={claim['uuid']}-{n}" for n in range(2)]
    (entry,) = world.desired(OTHER)["containers"]
    assert [d["name"] for d in entry["devices"]] == [f"{claim['uuid']}-{n}" for n in range(2)]
    assert [d["attach_handle"]["info"] for d in entry["devices"]] == [
        d["attach_handle_info"] for d in claim["devices"]
    ]
    r = world.agent.put(
        f"/agent/v1/hosts/{OTHER}/claims/{claim['uuid']}", {"cdi": "failed", "reason": "no /dev"}
    )
    assert r.status_code == 200
    assert world.show(claim["uuid"])["cdi"] == {"state": "failed", "reason": "no /dev"}


# -- claims whose profile asks for an image: pending while the host programs ----------------


@pytest.mark.parametrize("outcome", ["done", "failed"])
def test_a_claim_that_programs_its_device_is_pending_until_the_program_ends(world, outcome):
    world.report(PROG_HOST, [programmable_fpga(hostname=PROG_HOST)])
    image = upload_image(world.admin)
    world.profile("loaded", {"resources:FPGA": "1", "accel:bitstream_id": image["uuid"]})
    body = {"device_profile_name": "loaded", "container": True, "consumer": "c"}
    claim = world.claim(body, expect=202)
    assert (claim["state"], claim["hostname"]) == ("pending", PROG_HOST)
    assert claim["devices"][0]["attach_handle_uuid"] is not None  # held meanwhile
    state = world.desired(PROG_HOST)
    assert state["containers"] == []  # no CDI spec before the device is ready
    (program,) = state["programs"]
    deployable = claim["devices"][0]["deployable_uuid"]
    shown = world.admin.get(f"/v2/deployables/{deployable}/program", version=V).json
    assert (shown["uuid"], shown["arq_uuid"]) == (program["uuid"], claim["devices"][0]["arq_uuid"])
    # The same consumer again: the pending claim, not a second one.
    assert world.claim(body, expect=202)["uuid"] == claim["uuid"]
    for step in ("fetching", "programming", "verifying"):
        assert agent_report(world.agent, program["uuid"], step, host=PROG_HOST).status_code == 200
    fields = {"reason": "bad luck", "restored": True} if outcome == "failed" else {}
    r = agent_report(world.agent, program["uuid"], outcome, host=PROG_HOST, **fields)
    assert r.status_code == 200, r.text
    shown = world.show(claim["uuid"])
    state = world.desired(PROG_HOST)
    if outcome == "done":
        assert shown["state"] == "bound"
        assert [c["claim"] for c in state["containers"]] == [claim["uuid"]]
        assert world.held() == 1
    else:
        assert shown["state"] == "failed" and "bad luck" in shown["reason"]
        assert state["containers"] == [] and world.held() == 0
        # Its consumer claims again: the failed claim is released, a new one made.
        again = world.claim(body, expect=202)
        assert again["uuid"] != claim["uuid"]
        assert world.show(claim["uuid"])["state"] == "released"
    world.release(claim["uuid"])
    assert world.show(claim["uuid"])["state"] == "released"


def test_a_host_that_cannot_serve_every_unit_is_passed_over_before_any_program(world):
    """Two FPGAs asked, the first loaded with an image: host A's only FPGA (one handle)
    cannot serve both units, which the choice sees before binding anything
    (exosuit/db/candidates.py assigns every unit a handle first), so A queues no program
    and host B (two FPGAs) serves the claim."""
    a, b = "claim-a", "claim-b"
    world.report(a, [programmable_fpga("0000:5a:00.0", handles=1, hostname=a)])
    world.report(
        b,
        [
            programmable_fpga("0000:5b:00.0", handles=1, hostname=b),
            programmable_fpga("0000:5c:00.0", handles=1, hostname=b),
        ],
    )
    image = upload_image(world.admin)
    world.profile(
        "loaded-and-plain",
        {
            "resources:FPGA": "1",
            "accel:bitstream_id": image["uuid"],
            "trait:CUSTOM_FPGA_SIM": "required",
        },
        {"resources:FPGA": "1", "trait:CUSTOM_FPGA_SIM": "required"},
    )
    claim = world.claim({"device_profile_name": "loaded-and-plain"}, expect=202)
    assert claim["hostname"] == b
    assert {d["device_uuid"] for d in claim["devices"]} == {d["uuid"] for d in world.devices(b)}
    assert world.desired(a)["programs"] == []
    assert [h["in_use"] for h in world.handles(hostname=a)] == [False]
    assert len(world.desired(b)["programs"]) == 1
