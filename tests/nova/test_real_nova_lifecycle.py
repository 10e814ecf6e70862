"""Servers with accelerators through a real Nova (tests/nova/real_nova.py): every
operation Nova supports for them, and a bind that fails.

The flavor carries ``accel:device_profile=nova-fpga`` (one FPGA with the trait
``CUSTOM_FAKE_DEVICE``). Each host has one such FPGA (four attach handles), reported
to Exosuit under the compute node's name. What is checked is what Nova, Placement and
Exosuit hold: the server's status, its ARQs (state, instance, host, attach handle),
its allocations, and which attach handles are in use.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from exosuit.db import models
from tests.nova.real_nova import FPGA_ADDRESS, HOSTS, wait_for

pytestmark = pytest.mark.slow


def held_handles(cloud) -> dict[str, str]:
    """attach handle uuid → the instance of the ARQ holding it, for every handle in use."""
    ah, arq = models.attach_handles, models.accelerator_requests
    with cloud.exosuit.db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(ah.c.uuid, arq.c.instance_uuid)
            .select_from(ah.outerjoin(arq, arq.c.attach_handle_id == ah.c.id))
            .where(ah.c.in_use.is_(True))
        ).all()
    return {r.uuid: r.instance_uuid for r in rows}


def fpga_provider(cloud, host: str) -> str:
    return cloud.exosuit.deployables()[f"{host}_{FPGA_ADDRESS}"]["rp_uuid"]


def bound(cloud, server: dict) -> dict:
    """The server's one ARQ, checked Bound to it on its host, its allocation on the
    FPGA's provider and its attach handle held for it."""
    host = cloud.host_of(server)
    [arq] = cloud.exosuit.arqs(server["id"])
    assert arq["state"] == "Bound"
    assert (arq["instance_uuid"], arq["hostname"]) == (server["id"], host)
    rp = fpga_provider(cloud, host)
    assert arq["device_rp_uuid"] == rp
    assert cloud.allocations(server["id"])[rp]["resources"] == {"FPGA": 1}
    assert held_handles(cloud)[arq["attach_handle_uuid"]] == server["id"]
    return arq


def boot(cloud) -> dict:
    server_id = cloud.boot(cloud.flavor("fpga-flavor", "nova-fpga"))
    return cloud.wait_status(server_id, "ACTIVE")


def test_boot_reboot_stop_start_rebuild_keep_the_bound_arq(cloud):
    server = boot(cloud)
    arq = bound(cloud, server)
    for action, status in (
        ({"reboot": {"type": "HARD"}}, "ACTIVE"),
        ({"reboot": {"type": "SOFT"}}, "ACTIVE"),
        ({"os-stop": None}, "SHUTOFF"),
        ({"os-start": None}, "ACTIVE"),
        ({"rebuild": {"imageRef": cloud.image}}, "ACTIVE"),
    ):
        cloud.action(server["id"], action)
        server = cloud.wait_status(server["id"], status)
        # The same ARQ, still bound: these operations only read it again.
        assert bound(cloud, server) == arq, action
    cloud.delete(server["id"])


def test_shelve_then_unshelve_binds_again(cloud):
    server = boot(cloud)
    first = bound(cloud, server)
    cloud.action(server["id"], {"shelve": None})
    cloud.wait_status(server["id"], "SHELVED_OFFLOADED")
    # Offloading deletes the ARQs (by instance) and frees the handle and the allocation.
    assert cloud.exosuit.arqs(server["id"]) == []
    assert first["attach_handle_uuid"] not in held_handles(cloud)
    assert cloud.allocations(server["id"]) == {}
    cloud.action(server["id"], {"unshelve": None})
    server = cloud.wait_status(server["id"], "ACTIVE")
    second = bound(cloud, server)
    assert second["uuid"] != first["uuid"]
    cloud.delete(server["id"])


def test_evacuate_binds_on_the_other_host_and_frees_the_old_handle(cloud):
    server = boot(cloud)
    first = bound(cloud, server)
    source = cloud.host_of(server)
    [target] = [h for h in HOSTS if h != source]
    cloud.force_down(source, True)
    try:
        cloud.action(server["id"], {"evacuate": {}}, admin=True)
        server = wait_for(
            "the evacuated server ACTIVE on the other host",
            lambda: (
                s
                if (s := cloud.wait_status(server["id"], "ACTIVE")) and cloud.host_of(s) == target
                else None
            ),
            timeout=180,
        )
    finally:
        cloud.recover(source)
    second = bound(cloud, server)
    assert second["hostname"] == target and second["uuid"] != first["uuid"]
    assert first["attach_handle_uuid"] not in held_handles(cloud)
    assert cloud.exosuit.admin.get(f"/accelerator_requests/{first['uuid']}").status_code == 404
    cloud.delete(server["id"])


def test_delete_deletes_the_arqs_and_the_allocation(cloud):
    server = boot(cloud)
    arq = bound(cloud, server)
    cloud.delete(server["id"])
    assert cloud.exosuit.arqs(server["id"]) == []
    assert cloud.exosuit.admin.get(f"/accelerator_requests/{arq['uuid']}").status_code == 404
    assert arq["attach_handle_uuid"] not in held_handles(cloud)
    wait_for("the allocation gone", lambda: cloud.allocations(server["id"]) == {}, timeout=60)


def test_a_bind_that_fails_leaves_the_server_in_error_holding_nothing(cloud):
    """The FPGAs are disabled in Exosuit while Placement still offers them (Exosuit's
    conductor, which would reserve them there, is stopped): Nova schedules, the bind
    fails, and Nova gives up with the fault it shows for Cyborg."""
    exosuit = cloud.exosuit
    devices = [exosuit.device(host, "FPGA")["uuid"] for host in HOSTS]
    before = held_handles(cloud)
    exosuit.stop_conductor()
    try:
        for device in devices:
            assert exosuit.admin.post(f"/devices/{device}/disable").status_code == 200
        server_id = cloud.boot(cloud.flavor("fpga-flavor", "nova-fpga"))
        server = cloud.wait_status(server_id, "ERROR")
    finally:
        for device in devices:
            assert exosuit.admin.post(f"/devices/{device}/enable").status_code == 200
        exosuit.start_conductor()
    assert "Failed to bind accelerator requests" in server["fault"]["message"], server["fault"]
    assert exosuit.arqs(server_id) == []
    assert held_handles(cloud) == before
    # Nova keeps its Placement allocation for a server in ERROR until it is deleted (as
    # with Cyborg): the server holds no device.
    cloud.delete(server_id)
    wait_for("the allocation gone", lambda: cloud.allocations(server_id) == {}, timeout=60)
