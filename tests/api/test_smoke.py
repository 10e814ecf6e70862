"""A first walk through the API: profile, ARQs, bind, unbind, delete."""

import uuid

from tests.helpers.inventory import fpga, snapshot


def test_profile_arq_bind_cycle(api):
    r = api.put("/agent/v1/hosts/host1/inventory", snapshot("host1", [fpga("0000:0c:00.0")]))
    assert r.status_code == 200, r.text
    assert r.json["changed"] is True
    deployables = api.get("/v2/deployables").json["deployables"]
    assert len(deployables) == 1
    rp = deployables[0]["rp_uuid"]

    r = api.post("/v2/device_profiles", [{"name": "dp1", "groups": [{"resources:FPGA": "1"}]}])
    assert r.status_code == 201, r.text

    r = api.post("/v2/accelerator_requests", {"device_profile_name": "dp1"})
    assert r.status_code == 201, r.text
    (arq,) = r.json["arqs"]
    assert arq["state"] == "Initial"

    instance = str(uuid.uuid4())
    r = api.patch(
        "/v2/accelerator_requests",
        {
            arq["uuid"]: [
                {"op": "add", "path": "/hostname", "value": "host1"},
                {"op": "add", "path": "/device_rp_uuid", "value": rp},
                {"op": "add", "path": "/instance_uuid", "value": instance},
            ]
        },
    )
    assert r.status_code == 202, r.text
    r = api.get(f"/v2/accelerator_requests?instance={instance}&bind_state=resolved")
    assert r.status_code == 200, r.text
    (bound,) = r.json["arqs"]
    assert bound["state"] == "Bound"
    assert bound["attach_handle_type"] == "TEST_PCI"
    assert set(bound["attach_handle_info"]) == {"domain", "bus", "device", "function"}

    r = api.delete(f"/v2/accelerator_requests?instance={instance}")
    assert r.status_code == 204, r.text
    assert api.get("/v2/accelerator_requests").json["arqs"] == []
    r = api.delete("/v2/device_profiles/dp1")
    assert r.status_code == 204, r.text
