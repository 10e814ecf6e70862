"""Attach and detach (API 2.10) against the real Nova (tests/nova/real_nova.py): a server
Nova manages keeps the accelerators it was booted with, an id Nova does not know is a
standalone consumer.

One server is booted with the flavor ``accel:device_profile=nova-fpga``. First Nova
itself is asked to change its accelerators, the two ways its API has (a resize, an
accelerator port's attach), and its refusals are compared with the ones Exosuit quotes
(exosuit/api/server_attach.py ``NOVA_REFUSALS``). Then Exosuit is asked, with the
project member's token (Exosuit asks Nova with it, as the member sees the server) and
the admin's: 409 ``exosuit.server.nova_managed`` naming Nova's refusal and the
supported path, and nothing changed. Last, an id Nova does not know: a claim of that
consumer, detached again.
"""

from __future__ import annotations

import json
import uuid

import pytest
from keystoneauth1 import adapter as ksa_adapter

from exosuit.api.server_attach import NOVA_REFUSALS
from tests.nova.real_nova import wait_for
from tests.nova.test_real_nova_lifecycle import bound, held_handles

pytestmark = pytest.mark.slow

VERSION = {"OpenStack-API-Version": "accelerator 2.10"}


def exosuit_as(cloud, user: str) -> ksa_adapter.Adapter:
    """Exosuit's /v2 with ``user``'s Keystone token, at microversion 2.10."""
    return ksa_adapter.Adapter(
        cloud.keystone.session(cloud.keystone.password(user)),
        endpoint_override=f"{cloud.exosuit.url}/v2",
        additional_headers=VERSION,
        raise_exc=False,
    )


def fault(response) -> dict:
    return json.loads(response.json()["error_message"])


def nova_refusal(response) -> str:
    assert response.status_code == 400, response.text
    return response.json()["badRequest"]["message"]


def test_nova_keeps_its_servers_accelerators_and_exosuit_says_so(cloud):
    server_id = cloud.boot(cloud.flavor("fpga-flavor", "nova-fpga"))
    server = cloud.wait_status(server_id, "ACTIVE")
    arq = bound(cloud, server)
    before = held_handles(cloud)

    # What Nova 34 answers when asked to change the server's accelerators.
    plain = cloud.flavor("plain", None)
    r = cloud.user.post(f"/servers/{server_id}/action", json={"resize": {"flavorRef": plain}})
    assert nova_refusal(r) == NOVA_REFUSALS["ForbiddenWithAccelerators"]
    port = cloud.standins.create_port(device_profile="nova-smartnic")
    r = cloud.user.post(
        f"/servers/{server_id}/os-interface", json={"interfaceAttachment": {"port_id": port}}
    )
    assert nova_refusal(r) == NOVA_REFUSALS["ForbiddenPortsWithAccelerator"]

    # Exosuit, asked as the server's project member and as an admin.
    for user in ("p1-member", "p1-admin"):
        exosuit = exosuit_as(cloud, user)
        r = exosuit.post(
            f"/servers/{server_id}/attach", json={"device_profile_name": "nova-smartnic"}
        )
        assert r.status_code == 409, (user, r.text)
        error = fault(r)
        assert error["code"] == "exosuit.server.nova_managed", user
        message = error["faultstring"]
        assert f"Server {server_id} is Nova's (its flavor's accel:device_profile: nova-fpga)" in (
            message
        )
        for name, text in NOVA_REFUSALS.items():
            assert f'{name}: "{text}"' in message
        wanted = "boot a new server with a flavor whose extra spec accel:device_profile is "
        assert f"{wanted}nova-smartnic" in message
        r = exosuit.post(f"/servers/{server_id}/detach", json={})
        assert r.status_code == 409, (user, r.text)
        assert fault(r)["code"] == "exosuit.server.nova_managed"
        assert "a flavor without accel:device_profile" in fault(r)["faultstring"]

    # Nothing changed: the server's ARQ still bound, no claim made, the same handles held.
    assert bound(cloud, cloud.wait_status(server_id, "ACTIVE")) == arq
    r = exosuit_as(cloud, "p1-admin").get(f"/claims?consumer={server_id}")
    assert r.status_code == 200 and r.json()["claims"] == [], r.text
    assert held_handles(cloud) == before

    # An id Nova does not know is a standalone consumer: its claim, then released.
    member = exosuit_as(cloud, "p1-member")
    other = str(uuid.uuid4())
    r = member.post(f"/servers/{other}/attach", json={"device_profile_name": "nova-fpga"})
    assert r.status_code == 201, r.text
    claim = r.json()
    assert (claim["consumer"], claim["state"]) == (other, "bound")
    [device] = claim["devices"]
    assert held_handles(cloud).keys() == before.keys() | {device["attach_handle_uuid"]}
    # Its Placement allocation, as any claim's (the consumer is the claim).
    assert cloud.allocations(claim["uuid"])[device["rp_uuid"]]["resources"] == {"FPGA": 1}
    r = member.post(f"/servers/{other}/detach", json={})
    assert r.status_code == 200, r.text
    assert [c["state"] for c in r.json()["claims"]] == ["released"]
    assert held_handles(cloud) == before
    wait_for("the claim's allocation gone", lambda: cloud.allocations(claim["uuid"]) == {}, 60)
    cloud.delete(server_id)
