"""Whole-device programming and the agent's side of it, through the API (in-process, every
backend): PATCH/GET /v2/deployables/{uuid}/program at 2.6 and below, the host's desired
state (ETag, 304, and in the inventory answer), the agent's progress reports, and binds
whose profile group asks for an image."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from exosuit.api.deploy import loadapp
from tests.conftest import PERSONAS, ApiClient, make_test_conf
from tests.helpers.inventory import snapshot
from tests.helpers.programs import (
    DEPLOYABLES,
    FUNCTION,
    HOST,
    V2_6,
    agent_report,
    error_code,
    program_body,
    programmable_fpga,
    upload_image,
)

ARQS = "/v2/accelerator_requests"
DEADLINE = 60.0


class World:
    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.admin = api.as_(PERSONAS["admin"])
        self.agent = api.as_(PERSONAS["service"])
        self.nova = api.as_(PERSONAS["nova"])

    def report(self, devices=None) -> dict:
        devices = devices if devices is not None else [programmable_fpga()]
        r = self.agent.put(f"/agent/v1/hosts/{HOST}/inventory", snapshot(HOST, devices))
        assert r.status_code == 200, r.text
        return r.json

    def deployable(self) -> dict:
        [found] = self.admin.get(DEPLOYABLES).json["deployables"]
        return found

    def program(self, image_uuid: str, version: str = V2_6, deployable: str | None = None):
        deployable = deployable or self.deployable()["uuid"]
        return self.admin.patch(
            f"{DEPLOYABLES}/{deployable}/program", program_body(image_uuid), version=version
        )

    def latest(self) -> dict:
        r = self.admin.get(f"{DEPLOYABLES}/{self.deployable()['uuid']}/program", version=V2_6)
        assert r.status_code == 200, r.text
        return r.json

    def play_agent(self, *states: str, **last) -> None:
        """The host's agent: takes the program of its desired state, reports ``states``
        (the last with ``last``'s fields)."""
        [program] = self.desired()["programs"]
        for i, state in enumerate(states):
            fields = last if i == len(states) - 1 else {}
            r = agent_report(self.agent, program["uuid"], state, **fields)
            assert r.status_code == 200, r.text

    def desired(self) -> dict:
        r = self.agent.get(f"/agent/v1/hosts/{HOST}/desired_state")
        assert r.status_code == 200, r.text
        return r.json


def make_world(database, tmp_path, **conf) -> World:
    settings = {"state_path": str(tmp_path), **conf}
    world = World(ApiClient(loadapp(make_test_conf(**settings), database)))
    world.report()
    return world


@pytest.fixture
def world(database, tmp_path) -> World:
    return make_world(database, tmp_path)


@pytest.fixture
def sqlite_world(sqlite_database, tmp_path) -> World:
    return make_world(sqlite_database, tmp_path)


def test_program_at_2_6_is_desired_state_until_the_agent_reports_it_done(world):
    image = upload_image(world.admin)
    deployable = world.deployable()
    r = world.program(image["uuid"])
    assert r.status_code == 202, r.text
    program = r.json["program"]
    assert program["state"] == "pending"
    assert (program["deployable_uuid"], program["image_uuid"], program["image_source"]) == (
        deployable["uuid"],
        image["uuid"],
        "exosuit",
    )
    assert program["hostname"] == HOST and program["function_id"] == FUNCTION
    assert world.latest() == program
    # The agent's view: the desired state, with its generation as ETag.
    r = world.agent.get(f"/agent/v1/hosts/{HOST}/desired_state")
    etag = r.headers["ETag"]
    assert etag == f'"{r.json["generation"]}"'
    [desired] = r.json["programs"]
    assert desired["uuid"] == program["uuid"]
    assert desired["image"]["sha256"] == image["sha256"]
    assert desired["image"]["href"] == f"/agent/v1/images/{image['uuid']}/data"
    r = world.agent.get(f"/agent/v1/hosts/{HOST}/desired_state", headers={"If-None-Match": etag})
    assert r.status_code == 304 and r.headers["ETag"] == etag and not r.body
    assert world.report()["desired_state"] == world.desired()
    # Two identical requests are one program.
    again = world.program(image["uuid"])
    assert again.status_code == 202 and again.json["program"]["uuid"] == program["uuid"]

    world.play_agent("fetching", "programming", "verifying")
    assert world.latest()["state"] == "verifying"
    r = agent_report(
        world.agent, program["uuid"], "done", loaded={"function_id": FUNCTION, "image_uuid": None}
    )
    assert r.status_code == 200, r.text
    assert r.json["state"] == "done" and r.json["finished_at"] is not None
    assert world.deployable()["bitstream_id"] == image["uuid"]
    r = world.agent.get(f"/agent/v1/hosts/{HOST}/desired_state", headers={"If-None-Match": etag})
    assert r.status_code == 200 and r.json["programs"] == []
    # Idempotent, then ended.
    assert agent_report(world.agent, program["uuid"], "done").status_code == 200
    late = agent_report(world.agent, program["uuid"], "failed", reason="late")
    assert late.status_code == 409 and error_code(late) == "exosuit.program.ended"
    # The image loaded already: nothing to do, said so.
    r = world.program(image["uuid"])
    assert r.json["program"]["state"] == "done"
    assert r.json["program"]["reason"] == "already loaded"


def test_agent_reports_that_are_refused(sqlite_world):
    world = sqlite_world
    image = upload_image(world.admin)
    program = world.program(image["uuid"]).json["program"]
    elsewhere = agent_report(world.agent, program["uuid"], "fetching", host="other-host")
    assert elsewhere.status_code == 404 and error_code(elsewhere) == "exosuit.program.not_found"
    unknown = agent_report(world.agent, str(uuid.uuid4()), "fetching")
    assert unknown.status_code == 404
    for body in ({"state": "pending"}, {"state": "done", "extra": 1}, {}):
        r = world.agent.put(f"/agent/v1/hosts/{HOST}/programs/{program['uuid']}", body)
        assert r.status_code == 400, (body, r.text)
    member = world.api.as_(PERSONAS["member"])
    r = member.put(f"/agent/v1/hosts/{HOST}/programs/{program['uuid']}", {"state": "done"})
    assert r.status_code == 403
    assert world.latest()["state"] == "pending"


def test_below_2_6_the_request_answers_202_when_its_wait_ends(database, tmp_path):
    world = make_world(database, tmp_path, **{"api.program_wait": 0})
    image = upload_image(world.admin)
    r = world.program(image["uuid"], version="2.5")
    assert r.status_code == 202, r.text
    assert r.json["uuid"] == world.deployable()["uuid"] and r.json["bitstream_id"] is None
    assert world.latest()["state"] == "pending"


def answer_while_the_agent_works(world: World, version: str, image_uuid: str, *states, **last):
    """PATCH (no microversion header: what openstacksdk sends) while the agent plays."""
    answers = []
    thread = threading.Thread(
        target=lambda: answers.append(world.program(image_uuid, version=version))
    )
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while not world.desired()["programs"]:
        assert time.monotonic() < deadline, "the program never became desired state"
        time.sleep(0.02)
    world.play_agent(*states, **last)
    thread.join(DEADLINE)
    return answers[0]


@pytest.mark.parametrize("version", ["2.0", "2.5"])
def test_below_2_6_the_request_waits_for_done(sqlite_world, version):
    image = upload_image(sqlite_world.admin)
    r = answer_while_the_agent_works(
        sqlite_world, version, image["uuid"], "fetching", "programming", "verifying", "done"
    )
    assert r.status_code == 200, r.text
    assert r.json["bitstream_id"] == image["uuid"]
    # Again: loaded already, answered at once.
    again = sqlite_world.program(image["uuid"], version=version)
    assert again.status_code == 200 and again.json["bitstream_id"] == image["uuid"]


def test_below_2_6_a_failed_program_is_a_409_saying_why(world):
    image = upload_image(world.admin)
    r = answer_while_the_agent_works(
        world,
        "2.0",
        image["uuid"],
        "fetching",
        "failed",
        reason="fpgaconf exited 1",
        restored=False,
    )
    assert r.status_code == 409, r.text
    assert error_code(r) == "exosuit.program.failed"
    assert "fpgaconf exited 1" in r.text and "could not be restored" in r.text
    device = world.admin.get("/v2/devices", version=V2_6).json["devices"][0]
    assert device["status"] == "maintaining" and "fpgaconf exited 1" in device["status_reason"]


def test_refusals_never_a_500(world):
    image = upload_image(world.admin)
    unknown = world.program(str(uuid.uuid4()))
    assert unknown.status_code == 404 and error_code(unknown) == "exosuit.image.not_found"
    r = world.admin.post("/v2/images", {"name": "empty", "format": "simulated"}, version=V2_6)
    queued = world.program(r.json["uuid"])
    assert queued.status_code == 409 and error_code(queued) == "exosuit.image.not_active"
    other = world.program(image["uuid"], deployable=str(uuid.uuid4()))
    assert other.status_code == 404 and error_code(other) == "exosuit.deployable.not_found"
    xclbin = upload_image(world.admin, fmt="xclbin")
    r = world.program(xclbin["uuid"])
    assert r.status_code == 409 and error_code(r) == "exosuit.program.unsupported"
    # Busy with another image; the same image again is the same program.
    first = world.program(image["uuid"]).json["program"]
    r = world.program(upload_image(world.admin)["uuid"])
    assert r.status_code == 409 and error_code(r) == "exosuit.program.busy"
    assert first["uuid"] in r.text
    world.play_agent("failed", reason="no", restored=True)
    # A held attach handle: in use, naming the ARQ.
    arq = bind(world, {"resources:FPGA": "1"})
    r = world.program(image["uuid"])
    assert r.status_code == 409 and error_code(r) == "exosuit.program.in_use"
    assert arq in r.text
    r = world.admin.delete(f"{ARQS}/{arq}")
    device = world.admin.get("/v2/devices").json["devices"][0]
    world.admin.post(f"/v2/devices/{device['uuid']}/disable")
    r = world.program(image["uuid"])
    assert r.status_code == 409 and error_code(r) == "exosuit.program.unavailable"


def test_get_program(sqlite_world):
    world = sqlite_world
    deployable = world.deployable()["uuid"]
    path = f"{DEPLOYABLES}/{deployable}/program"
    r = world.admin.get(path, version=V2_6)
    assert r.status_code == 404 and error_code(r) == "exosuit.program.not_found"
    r = world.admin.get(path, version="2.5")  # masked below 2.6, as an unknown path
    assert r.status_code == 404 and error_code(r) == "exosuit.not_found"
    assert "OpenStack-API-Version" not in r.headers
    assert world.admin.get(f"{DEPLOYABLES}/{uuid.uuid4()}/program", version=V2_6).status_code == 404
    assert world.admin.get(f"{DEPLOYABLES}/nope/program", version=V2_6).status_code == 400
    # An unknown method is a 405 whatever the version (PATCH exists in every version).
    r = world.admin.post(path, program_body(str(uuid.uuid4())), version="2.0")
    assert r.status_code == 405 and r.headers["Allow"] == "GET, PATCH"


# -- binds ------------------------------------------------------------------------------------


def bind(world: World, group: dict, instance: str | None = None, expect: int = 202) -> str:
    name = f"profile-{uuid.uuid4().hex[:6]}"
    r = world.admin.post("/v2/device_profiles", [{"name": name, "groups": [group]}])
    assert r.status_code == 201, r.text
    [arq] = world.nova.post(ARQS, {"device_profile_name": name}).json["arqs"]
    r = world.nova.patch(
        ARQS,
        {
            arq["uuid"]: [
                {"op": "add", "path": "/hostname", "value": HOST},
                {"op": "add", "path": "/device_rp_uuid", "value": world.deployable()["rp_uuid"]},
                {"op": "add", "path": "/instance_uuid", "value": instance or str(uuid.uuid4())},
            ]
        },
    )
    assert r.status_code == expect, r.text
    return arq["uuid"]


def arq_of(world: World, uuid_: str) -> dict:
    return world.admin.get(f"{ARQS}/{uuid_}").json


def test_a_bind_with_a_bitstream_programs_the_device_first(world):
    image = upload_image(world.admin)
    arq = bind(world, {"resources:FPGA": "1", "accel:bitstream_id": image["uuid"]})
    assert arq_of(world, arq)["state"] == "BindStarted"
    program = world.latest()
    assert (program["arq_uuid"], program["state"]) == (arq, "pending")
    # The ARQ's own report is refused: its program's reports end it.
    r = world.agent.put(f"/agent/v1/hosts/{HOST}/accelerator_requests/{arq}", {"result": "done"})
    assert r.status_code == 409 and error_code(r) == "exosuit.arq.bad_state"
    world.play_agent("fetching", "programming", "verifying", "done")
    assert arq_of(world, arq)["state"] == "Bound"
    assert world.deployable()["bitstream_id"] == image["uuid"]
    # Loaded already: the next bind of that image is Bound at once.
    again = bind(world, {"resources:FPGA": "1", "accel:bitstream_id": image["uuid"]})
    assert arq_of(world, again)["state"] == "Bound"


def test_a_bind_with_a_function_finds_its_image(sqlite_world):
    world = sqlite_world
    image = upload_image(world.admin)
    arq = bind(world, {"resources:FPGA": "1", "accel:function_id": FUNCTION})
    assert world.latest()["image_uuid"] == image["uuid"]
    world.play_agent("failed", reason="bad luck", restored=True)
    shown = arq_of(world, arq)
    assert shown["state"] == "BindFailed"


@pytest.mark.parametrize(
    ("group", "words"),
    [
        ({"accel:bitstream_id": "IMAGE", "accel:function_id": FUNCTION}, "has both"),
        ({"accel:bitstream_id": str(uuid.uuid4())}, "could not be found"),
        ({"accel:function_id": "no-such-function"}, "could not be found"),
    ],
    ids=["both-keys", "unknown-bitstream", "unknown-function"],
)
def test_binds_whose_image_cannot_be_had_fail(sqlite_world, group, words):
    image = upload_image(sqlite_world.admin)
    group = {k: image["uuid"] if v == "IMAGE" else v for k, v in group.items()}
    r_arq = bind(sqlite_world, {"resources:FPGA": "1", **group}, expect=409)
    shown = arq_of(sqlite_world, r_arq)
    assert shown["state"] == "BindFailed"
    assert sqlite_world.desired()["programs"] == []


def test_a_private_image_of_another_project_is_not_found_for_a_bind(sqlite_world):
    world = sqlite_world
    image = upload_image(world.admin, visibility="private")  # the admin's project's
    arq = bind(world, {"resources:FPGA": "1", "accel:bitstream_id": image["uuid"]}, expect=409)
    assert arq_of(world, arq)["state"] == "BindFailed"
