"""A deployable being programmed takes no new workload: its inventory in a real
Placement is fully reserved while the program runs, released when it ends, and the
function trait the agent reports after loading reaches its provider."""

from __future__ import annotations

from exosuit.db import images as images_db
from exosuit.drivers import simulated
from tests.helpers.programs import FUNCTION, agent_report, program_body, programmable_fpga
from tests.placement.conftest import Stack, inventory, placement_conf

PCI = "0000:0c:00.0"


def test_a_program_reserves_the_deployable_until_it_ends(
    placement, placement_api, sqlite_database, hostname, tmp_path
):
    stack = Stack(placement_conf(placement, state_path=str(tmp_path)), sqlite_database)
    stack.report(hostname, [programmable_fpga(PCI, hostname=hostname)])
    stack.run_jobs()
    [rp_uuid] = stack.deployables(hostname).values()
    assert placement_api.inventories(rp_uuid) == {"FPGA": inventory(4)}

    image = sqlite_database.write(
        images_db.create,
        name="sim",
        format="simulated",
        owner="admin",
        function_id=FUNCTION,
        visibility="public",
    )
    sqlite_database.write(images_db.activate, image["uuid"], size=4, sha256="0" * 64)
    [deployable] = stack.api.get("/v2/deployables").json["deployables"]
    r = stack.api.patch(
        f"/v2/deployables/{deployable['uuid']}/program", program_body(image["uuid"]), version="2.6"
    )
    assert r.status_code == 202, r.text
    program = r.json["program"]["uuid"]
    stack.run_jobs()
    assert placement_api.inventories(rp_uuid) == {"FPGA": inventory(4, reserved=4)}

    r = agent_report(stack.api, program, "done", host=hostname)
    assert r.status_code == 200, r.text
    stack.run_jobs()
    assert placement_api.inventories(rp_uuid) == {"FPGA": inventory(4)}
    trait = simulated.function_id_trait(FUNCTION)
    assert trait not in placement_api.traits(rp_uuid)

    # The agent's next report: the loaded function as a trait of the deployable.
    traits = ("CUSTOM_FPGA_SIM", trait)
    stack.report(hostname, [programmable_fpga(PCI, hostname=hostname, traits=traits)])
    stack.run_jobs()
    assert set(placement_api.traits(rp_uuid)) == {"CUSTOM_FPGA_SIM", trait, "OWNER_CYBORG"}
