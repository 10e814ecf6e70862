"""The stand-in API server checks what it is given against Kubernetes' published
schemas (1.34 and 1.35, strict): the ResourceSlices the plugin writes and the
ResourceClaims the tests make up for it to read; and it answers only what the plugin's
ClusterRole (deploy/kubernetes/) grants."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from exosuit.kubernetes import slices
from exosuit.kubernetes.slices import DRIVER, Inventory
from tests.deploy.kube_calls import Permission
from tests.helpers.kube_schemas import schema_errors
from tests.kubelet.kube_standin import KubeStandIn, api_rules, slice_errors

NODE = "node-a"


def a_slice() -> dict:
    device = {"uuid": "d1", "type": "FPGA", "numa_node": 0}
    handle = {"uuid": "h1", "device_uuid": "d1", "attach_type": "TEST_PCI", "attach_info": {}}
    inventory = Inventory(NODE, [device], [handle])
    chunks = slices.slice_devices(slices.devices_of(inventory))
    [built] = slices.build_slices(NODE, chunks, 1, "node-uid")
    return slices.serialize(built)


def test_a_published_slice_is_valid_in_each_release_by_schema_and_rules():
    body = a_slice()
    assert schema_errors(body) == [] and api_rules(body) == [] and slice_errors(body) == []


def test_the_schemas_alone_refuse_unknown_fields_and_wrong_types():
    body = a_slice()
    body["spec"]["pool"]["generations"] = 1
    assert [e.split(":")[0] for e in schema_errors(body)] == ["Kubernetes 1.34", "Kubernetes 1.35"]
    assert "'generations' was unexpected" in schema_errors(body)[0]
    body = a_slice()
    body["spec"]["devices"][0]["attributes"]["numaNode"] = {"int": "0"}
    assert schema_errors(body) and slice_errors(body)
    body = a_slice()
    del body["spec"]["driver"]
    assert "'driver' is a required property" in schema_errors(body)[0]


def test_the_standin_refuses_a_claim_kubernetes_would_not_hold():
    standin = KubeStandIn()
    result = {"request": "r", "driver": DRIVER, "pool": NODE, "device": "fpga-h1"}
    standin.add_claim("default", "fine", [result])
    with pytest.raises(ValueError, match="'pol' was unexpected"):
        standin.add_claim("default", "misspelt", [{**result, "pol": NODE}])
    incomplete = dict(result)
    del incomplete["device"]
    with pytest.raises(ValueError, match="'device' is a required property"):
        standin.add_claim("default", "incomplete", [incomplete])
    assert sorted(standin.claims) == [("default", "fine")]


def test_the_standin_forbids_what_the_plugins_cluster_role_does_not_grant():
    standin = KubeStandIn().start()
    try:
        api = client.ApiClient(client.Configuration(host=standin.url))
        resources = client.ResourceV1Api(api)
        assert resources.list_resource_slice().items == []  # granted: list
        with pytest.raises(ApiException) as raised:
            resources.list_namespaced_resource_claim("default")  # not granted: list claims
        assert raised.value.status == 403
        with pytest.raises(ApiException) as raised:
            client.CoreV1Api(api).list_node()  # nodes: get only
        assert raised.value.status == 403
    finally:
        standin.stop()
    assert standin.forbidden == [
        ("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"),
        ("GET", "/api/v1/nodes"),
    ]
    assert Permission("resource.k8s.io", "resourceslices", "list") in standin.granted
