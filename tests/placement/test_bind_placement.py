"""A bind that programs its device, as Nova makes it, ends ``Bound`` with the function
trait in a real Placement.

The API (in-process) and a real conductor worker on one database keep the real Placement
of the tests (tests/placement/conftest.py); the host is a real agent in-process: the
simulated driver (its FPGA loads ``simulated`` images into its state folder), the program
reconciler and the reporter, talking to the API's WSGI application. Nova's part is played
by its calls: Placement allocates the deployable's provider, then the ARQ is created and
bound by PATCH.
"""

from __future__ import annotations

import uuid

import pytest

from exosuit.agent.cache import AgentCache
from exosuit.agent.clock import FakeClock
from exosuit.agent.programs import ProgramReconciler
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import Agent
from exosuit.agent.transport import WsgiSession
from exosuit.drivers import DriverContext, simulated
from exosuit.drivers.simulated import SimulatedDriver
from exosuit.images.store import ContentStore
from tests.helpers.programs import FUNCTION, V2_6, upload_image
from tests.placement.conftest import Stack, inventory, placement_conf

ARQS = "/v2/accelerator_requests"
ENDPOINT = "http://exosuit.test"
POLL = 5.0  # the reconciler's desired-state interval, on the fake clock
MAX_STEPS = 20


class Host:
    """One host's agent, in-process: the simulated FPGA, its reporter and its program
    reconciler, on a fake clock."""

    def __init__(self, stack: Stack, hostname: str, state_dir) -> None:
        session = WsgiSession(stack.api.app)
        self.clock = FakeClock()
        self.driver = SimulatedDriver(
            DriverContext(
                hostname=hostname,
                settings={"devices": {"fake_fpga": "1"}},
                state_dir=str(state_dir / "drivers" / "simulated"),
            )
        )
        cache = AgentCache(str(state_dir))
        self.programs = ProgramReconciler(
            hostname,
            [self.driver],
            session,
            ENDPOINT,
            ContentStore(str(state_dir / "images"), 10**7),
            cache,
            clock=self.clock,
            interval=POLL,
        )
        self.agent = Agent(
            hostname,
            [self.driver],
            Reporter(session, ENDPOINT, hostname, clock=self.clock),
            cache,
            clock=self.clock,
            reconcilers=[self.programs],
        )

    def report(self) -> None:
        outcome = self.agent.report_once(self.agent.snapshot())
        assert outcome.kind == "ok", outcome

    def run_programs(self) -> None:
        """What the agent loop does between reports: poll the desired state and run its
        programs until one changed the device."""
        for _ in range(MAX_STEPS):
            self.clock.advance(POLL)
            if self.programs.step(self.agent.state):
                return
        raise AssertionError(f"no program ran in {MAX_STEPS} polls: {self.agent.state}")


@pytest.mark.parametrize("key", ["accel:bitstream_id", "accel:function_id"])
def test_a_bind_that_programs_ends_bound_with_the_function_trait_in_placement(
    placement, placement_api, sqlite_database, hostname, tmp_path, key
):
    stack = Stack(placement_conf(placement, state_path=str(tmp_path / "api")), sqlite_database)
    host = Host(stack, hostname, tmp_path / "agent")
    host.report()
    stack.run_jobs()
    [rp_uuid] = stack.deployables(hostname).values()
    trait = simulated.function_id_trait(FUNCTION)
    assert trait not in placement_api.traits(rp_uuid)
    assert placement_api.inventories(rp_uuid) == {"FPGA": inventory(16)}

    image = upload_image(stack.api)
    value = image["uuid"] if key == "accel:bitstream_id" else FUNCTION
    profile = f"programmed-{uuid.uuid4().hex[:6]}"
    r = stack.api.post(
        "/v2/device_profiles", [{"name": profile, "groups": [{"resources:FPGA": "1", key: value}]}]
    )
    assert r.status_code == 201, r.text
    # Nova: the scheduler's allocation on the deployable's provider, then the ARQ's bind.
    instance = str(uuid.uuid4())
    placement_api.allocate(instance, rp_uuid, {"FPGA": 1})
    [arq] = stack.api.post(ARQS, {"device_profile_name": profile}).json["arqs"]
    bind = [
        {"op": "add", "path": "/hostname", "value": hostname},
        {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]
    r = stack.api.patch(ARQS, {arq["uuid"]: bind})
    assert r.status_code == 202, r.text
    assert stack.api.get(f"{ARQS}/{arq['uuid']}").json["state"] == "BindStarted"
    stack.run_jobs()
    # Being programmed: no new workload lands on it.
    assert placement_api.inventories(rp_uuid) == {"FPGA": inventory(16, reserved=16)}

    host.run_programs()

    shown = stack.api.get(f"{ARQS}/{arq['uuid']}").json
    assert (shown["state"], shown["device_rp_uuid"]) == ("Bound", rp_uuid)
    [deployable] = stack.api.get("/v2/deployables").json["deployables"]
    assert deployable["bitstream_id"] == image["uuid"]
    program = stack.api.get(f"/v2/deployables/{deployable['uuid']}/program", version=V2_6).json
    assert program["arq_uuid"] == arq["uuid"]
    assert (program["state"], program["image_uuid"]) == ("done", image["uuid"])

    # The agent reports its inventory right after the program (as its loop does): the
    # loaded function is a trait of the deployable, and the conductor puts it in Placement.
    host.report()
    stack.run_jobs()
    assert set(placement_api.traits(rp_uuid)) == {"CUSTOM_FAKE_DEVICE", trait, "OWNER_CYBORG"}
    assert placement_api.inventories(rp_uuid) == {"FPGA": inventory(16)}
    usages = placement_api.get(f"/resource_providers/{rp_uuid}/usages")["usages"]
    assert usages == {"FPGA": 1}
