"""SmartNIC ports through a real Nova: a Neutron port with a ``device_profile``.

The port is ``accelerator-direct`` with ``device_profile=nova-smartnic`` (one
``CUSTOM_NIC`` with the trait ``CUSTOM_PHYSNET1``); each host has an SR-IOV NIC whose
two VFs Exosuit offers, each with ``physical_network`` in its attach handle (as
exosuit/drivers/sriov_nic.py reports a PF mapped to physnet1). Nova asks Exosuit for
the profile's groups, schedules the port's request group onto a VF's provider, creates
and binds the port's ARQ, and copies its attach info into the port's binding profile.

Neutron is the stand-in of tests/nova/standins.py (see there what it does not
cover): what is checked on its side is what Nova wrote into the port.
"""

from __future__ import annotations

import pytest

from tests.nova.real_nova import NIC_VFS, PHYSNET, wait_for
from tests.nova.test_real_nova_lifecycle import held_handles

pytestmark = pytest.mark.slow


def test_a_port_with_a_device_profile_gets_a_vf_bound_and_its_binding_profile(cloud):
    port = cloud.standins.create_port(device_profile="nova-smartnic")
    server_id = cloud.boot(cloud.flavor("plain", None), networks=[{"port": port}])
    server = cloud.wait_status(server_id, "ACTIVE")
    host = cloud.host_of(server)
    [arq] = cloud.exosuit.arqs(server_id)
    assert arq["state"] == "Bound"
    assert (arq["instance_uuid"], arq["hostname"]) == (server_id, host)
    assert arq["device_profile_name"] == "nova-smartnic"
    assert arq["attach_handle_type"] == "PCI"
    info = arq["attach_handle_info"]
    assert info["physical_network"] == PHYSNET
    slot = f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
    assert slot in NIC_VFS
    # The allocation is on that VF's provider, from the port's request group.
    provider = cloud.exosuit.deployables()[f"{host}_{slot}"]["rp_uuid"]
    assert arq["device_rp_uuid"] == provider
    assert cloud.allocations(server_id)[provider]["resources"] == {"CUSTOM_NIC": 1}
    # What Nova wrote into the port (Neutron's SR-IOV agent would program the VF from it).
    bound_port = cloud.standins.port(port)
    assert bound_port["binding:host_id"] == host
    assert bound_port["device_id"] == server_id
    assert bound_port["binding:profile"] == {
        "physical_network": PHYSNET,
        "pci_slot": slot,
        "arq_uuid": arq["uuid"],
    }
    assert held_handles(cloud)[arq["attach_handle_uuid"]] == server_id

    cloud.delete(server_id)
    # Nova deletes the port's ARQ by uuid and takes its keys out of the binding profile.
    assert cloud.exosuit.admin.get(f"/accelerator_requests/{arq['uuid']}").status_code == 404
    assert arq["attach_handle_uuid"] not in held_handles(cloud)
    unbound = cloud.standins.port(port)
    assert not {"arq_uuid", "pci_slot", "physical_network"} & set(unbound["binding:profile"])
    assert unbound["device_id"] == ""
    wait_for("the allocation gone", lambda: cloud.allocations(server_id) == {}, timeout=60)
    assert not cloud.standins.unknown, cloud.standins.unknown


def test_a_port_whose_profile_asks_for_two_devices_is_refused_by_nova(cloud):
    """Nova allows one device per port; Exosuit answers the profile lookup, Nova refuses."""
    cloud.exosuit.profile("two-nics", [{"resources:CUSTOM_NIC": "2"}])
    port = cloud.standins.create_port(device_profile="two-nics")
    r = cloud.user.post(
        "/servers",
        json={
            "server": {
                "name": "two-nics",
                "imageRef": cloud.image,
                "flavorRef": cloud.flavor("plain", None),
                "networks": [{"port": port}],
            }
        },
    )
    assert r.status_code == 400, r.text
    assert "request multiple devices for single port" in r.text
