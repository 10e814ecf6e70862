"""ResourceSlices built from an inventory (exosuit/kubernetes/slices.py): names,
attributes, capacity, which handles are offered, slices of at most 128 — each slice
checked against the published schema and the kubernetes client's model classes."""

from __future__ import annotations

import re
import uuid

import pytest
from kubernetes import client

from exosuit.kubernetes import slices
from exosuit.kubernetes.slices import Inventory
from tests.kubelet.kube_standin import model_round_trip, slice_errors

NODE = "node-a"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def device(type_="FPGA", **fields) -> dict:
    """A device as GET /v2/devices (2.7) shows it."""
    return {
        "uuid": str(uuid.uuid4()),
        "type": type_,
        "vendor": "0xABCD",
        "model": "Fake FPGA",
        "hostname": NODE,
        "status": "enabled",
        "presence": "present",
        "driver_name": "fake",
        "pci_address": "0000:0c:00.0",
        "numa_node": 0,
        "activation": "ready",
        "services": [],
        "usage": {},
        **fields,
    }


def handle(dev: dict, attach_type="TEST_PCI", info=None, **fields) -> dict:
    """An attach handle as GET /v2/attach_handles (2.5) shows it."""
    return {
        "uuid": str(uuid.uuid4()),
        "hostname": NODE,
        "device_uuid": dev["uuid"],
        "attach_type": attach_type,
        "attach_info": info
        if info is not None
        else {"domain": "0000", "bus": "0c", "device": "00", "function": "1"},
        "in_use": False,
        "presence": "present",
        "holder": None,
        **fields,
    }


def pci(function: int, bus: str = "0c") -> dict:
    return {
        "domain": "0000",
        "bus": bus,
        "device": f"{function // 8:02x}",
        "function": str(function % 8),
    }


def fpga_inventory(count: int, **device_fields) -> tuple[Inventory, dict, list[dict]]:
    dev = device(**device_fields)
    handles = [handle(dev, info=pci(i)) for i in range(count)]
    return Inventory(NODE, [dev], handles), dev, handles


def published(inventory: Inventory) -> dict[str, client.V1Device]:
    return {d.name: d for d in slices.devices_of(inventory)}


def attributes(found: client.V1Device) -> dict:
    return slices.serialize(found.attributes)


# -- names ---------------------------------------------------------------------------------


def test_a_pci_handle_is_named_after_its_function():
    inventory, _, [only] = fpga_inventory(1)
    assert list(published(inventory)) == ["fpga-0000-0c-00-0"]
    assert slices.handle_names(inventory) == {"fpga-0000-0c-00-0": only["uuid"]}


def test_mdev_mig_and_other_handles_have_names_of_their_own():
    gpu = device("GPU", vendor="10de", model="A100", driver_name="nvidia_gpu")
    mdev_uuid = "8f1c2a4e-0d3b-4c5a-9e6f-7a8b9c0d1e2f"
    mdev = handle(gpu, "MDEV", {**pci(0, "3b"), "asked_type": "nvidia-223", "mdev_uuid": mdev_uuid})
    mig = handle(
        gpu,
        "MIG",
        {
            **pci(0, "3c"),
            "mig_uuid": "MIG-1",
            "profile": "1g.5gb",
            "gpu_instance_id": "7",
            "compute_instance_id": "0",
        },
    )
    odd = handle(gpu, "NVME_NS", {"namespace": "nvme0n1"})
    names = slices.device_names(Inventory(NODE, [gpu], [mdev, mig, odd]))
    assert names == {
        mdev["uuid"]: f"mdev-{mdev_uuid}",
        mig["uuid"]: "mig-0000-3c-00-0-7-0",
        odd["uuid"]: f"gpu-{odd['uuid']}",
    }
    assert all(DNS_LABEL.match(n) and len(n) <= 63 for n in names.values())


def test_two_handles_that_would_share_a_name_take_their_uuids():
    dev = device()
    one, two = handle(dev, info=pci(3)), handle(dev, info=pci(3))
    names = slices.device_names(Inventory(NODE, [dev], [one, two]))
    assert names == {one["uuid"]: f"h-{one['uuid']}", two["uuid"]: f"h-{two['uuid']}"}


def test_names_are_stable_whatever_is_offered():
    """A handle's name does not change when other handles come and go or get held."""
    inventory, dev, handles = fpga_inventory(4)
    before = slices.device_names(inventory)
    held = dict(handles[0], in_use=True, holder={"arq_uuid": "x"})
    after = slices.device_names(Inventory(NODE, [dev], [held, *handles[1:3]]))
    assert {k: v for k, v in before.items() if k in after} == after


def test_an_odd_device_type_still_gives_a_dns_label():
    dev = device("Crypto/QAT 4xxx")
    [name] = slices.device_names(Inventory(NODE, [dev], [handle(dev, info=pci(1))])).values()
    assert name == "crypto-qat-4xxx-0000-0c-00-1"


# -- attributes and capacity -----------------------------------------------------------------


def test_a_devices_attributes():
    services = [
        {"kind": "fpga_function", "name": "gzip", "enabled": True, "details": {}},
    ]
    inventory, dev, [only] = fpga_inventory(1, services=services, numa_node=1)
    [found] = published(inventory).values()
    assert attributes(found) == {
        "type": {"string": "FPGA"},
        "vendor": {"string": "0xABCD"},
        "model": {"string": "Fake FPGA"},
        "pciAddress": {"string": "0000:0c:00.0"},
        "numaNode": {"int": 1},
        "driver": {"string": "fake"},
        "function": {"string": "gzip"},
        "attachType": {"string": "TEST_PCI"},
        "deviceUuid": {"string": dev["uuid"]},
        "attachHandleUuid": {"string": only["uuid"]},
    }
    assert found.capacity is None  # an FPGA's memory is not in the inventory


def test_the_standard_pcie_root_is_the_root_complex_of_the_devices_root_port():
    """resource.kubernetes.io/pcieRoot, as Kubernetes' helper derives it: ``pci<domain>:
    <bus>`` of the root bus, the bus the device's root port sits on."""
    inventory, _, _ = fpga_inventory(1, pcie_root="0000:3a:00.0", iommu_group=7)
    [found] = published(inventory).values()
    assert attributes(found)["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:3a"}
    assert "iommu_group" not in attributes(found) and "iommuGroup" not in attributes(found)
    [built] = slices.build_slices(NODE, slices.slice_devices(slices.devices_of(inventory)), 1)
    assert slice_errors(slices.serialize(built)) == []
    # An integrated endpoint is its own root: the root complex it sits on.
    assert slices.pcie_root_complex("0000:6b:00.0") == "pci0000:6b"
    # Behind a VMD controller: the VMD domain's.
    assert slices.pcie_root_complex("10000:00:02.0") == "pci10000:00"


@pytest.mark.parametrize("root", [None, "", "pci0000:3a", "0000:3a:00"])
def test_without_a_known_root_port_there_is_no_pcie_root(root):
    inventory, _, _ = fpga_inventory(1, pcie_root=root)
    [found] = published(inventory).values()
    assert "resource.kubernetes.io/pcieRoot" not in attributes(found)


def test_unknown_values_and_too_long_strings_are_left_out():
    inventory, _, _ = fpga_inventory(1, numa_node=None, model="M" * 65, vendor="")
    [found] = published(inventory).values()
    assert {"numaNode", "model", "vendor", "function"}.isdisjoint(attributes(found))
    assert attributes(found)["type"] == {"string": "FPGA"}


def test_a_whole_gpu_has_its_memory_as_capacity_a_partition_not():
    gpu = device("GPU", usage={"memory_total_bytes": 85520809984.0, "utilization_percent": 5.0})
    whole = Inventory(NODE, [gpu], [handle(gpu, "PCI", pci(0, "cf"))])
    [found] = published(whole).values()
    assert slices.serialize(found.capacity) == {"memory": {"value": "85520809984"}}
    shared = Inventory(NODE, [gpu], [handle(gpu, "PCI", pci(i, "cf")) for i in range(2)])
    assert all(d.capacity is None for d in published(shared).values())


def test_an_nvme_drive_has_its_namespaces_as_storage():
    ssd = device(
        "SSD",
        services=[
            {
                "kind": "nvme_namespace",
                "name": "nvme0n1",
                "details": {"capacity_bytes": "1000000000000"},
            },
            {
                "kind": "nvme_namespace",
                "name": "nvme0n2",
                "details": {"capacity_bytes": "24000000000"},
            },
        ],
    )
    [found] = published(Inventory(NODE, [ssd], [handle(ssd, "PCI", pci(0, "5e"))])).values()
    assert slices.serialize(found.capacity) == {"storage": {"value": "1024G"}}


@pytest.mark.parametrize(
    "value, text",
    [
        (0, "0"),
        (1, "1"),
        (1000, "1k"),
        (80_000_000_000, "80G"),
        (85520809984, "85520809984"),
        (1_500_000, "1500k"),
        (7 * 10**18, "7E"),
    ],
)
def test_quantities_are_written_as_the_api_server_keeps_them(value, text):
    assert slices.quantity(value) == text


# -- what is offered --------------------------------------------------------------------------


def test_only_ready_present_enabled_devices_and_their_present_handles_are_offered():
    ready = device()
    inactive = device(activation="inactive", pci_address="0000:0d:00.0")
    lost = device(presence="lost", pci_address="0000:0e:00.0")
    maintaining = device(status="maintaining", pci_address="0000:0f:00.0")
    # Held back as unhealthy (2.9); one in warning is still offered.
    held = device(pci_address="0000:10:00.0", health={"state": "unhealthy", "offered": False})
    warning = device(pci_address="0000:11:00.0", health={"state": "warning", "offered": True})
    handles = [
        handle(ready, info=pci(0)),
        handle(ready, info=pci(1), presence="lost"),
        handle(inactive, info=pci(0, "0d")),
        handle(lost, info=pci(0, "0e")),
        handle(maintaining, info=pci(0, "0f")),
        handle(held, info=pci(0, "10")),
        handle(warning, info=pci(0, "11")),
    ]
    inventory = Inventory(NODE, [ready, inactive, lost, maintaining, held, warning], handles)
    assert list(published(inventory)) == ["fpga-0000-0c-00-0", "fpga-0000-11-00-0"]


def test_handles_held_by_nova_or_other_claims_are_left_out_kubernetes_ones_kept():
    dev = device()
    free = handle(dev, info=pci(0))
    by_arq = handle(dev, info=pci(1), in_use=True, holder={"arq_uuid": "a"})
    by_pod = handle(dev, info=pci(2), in_use=True, holder={"arq_uuid": "b"})
    inventory = Inventory(NODE, [dev], [free, by_arq, by_pod], frozenset({by_pod["uuid"]}))
    assert list(published(inventory)) == ["fpga-0000-0c-00-0", "fpga-0000-0c-00-2"]


# -- slices ------------------------------------------------------------------------------


def test_300_devices_are_three_slices_of_one_pool():
    inventory, _, _ = fpga_inventory(300)
    chunks = slices.slice_devices(slices.devices_of(inventory))
    built = slices.build_slices(NODE, chunks, generation=4, node_uid="node-uid")
    assert [len(s.spec.devices) for s in built] == [128, 128, 44]
    names = [d.name for s in built for d in s.spec.devices]
    assert len(set(names)) == 300 and names == sorted(names)
    for body in map(slices.serialize, built):
        assert body["spec"]["pool"] == {"name": NODE, "generation": 4, "resourceSliceCount": 3}
        assert body["spec"]["driver"] == "exosuit.dev" and body["spec"]["nodeName"] == NODE
        assert body["metadata"] == {
            "generateName": f"{NODE}-exosuit.dev-",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": NODE,
                    "uid": "node-uid",
                    "controller": True,
                }
            ],
        }
        assert slice_errors(body) == []


def test_a_slice_reads_back_through_the_model_classes_whole():
    gpu = device("GPU", usage={"memory_total_bytes": 16e9})
    inventory = Inventory(NODE, [gpu], [handle(gpu, "PCI", pci(0, "3b"))])
    [built] = slices.build_slices(NODE, slices.slice_devices(slices.devices_of(inventory)), 1)
    body = slices.serialize(built)
    assert model_round_trip(body, "V1ResourceSlice") == body
    assert isinstance(built, client.V1ResourceSlice)
    assert body["spec"]["devices"][0]["capacity"] == {"memory": {"value": "16G"}}


def test_the_schema_check_refuses_what_the_api_server_would():
    """The checks the tests rely on catch what they are there for."""
    inventory, _, _ = fpga_inventory(2)
    [built] = slices.build_slices(NODE, slices.slice_devices(slices.devices_of(inventory)), 1)
    good = slices.serialize(built)
    assert slice_errors(good) == []

    def broken(change) -> list[str]:
        body = slices.serialize(built)
        change(body)
        return slice_errors(body)

    assert broken(lambda b: b["spec"]["devices"][0].update(name="Fpga_0"))
    assert broken(lambda b: b["spec"]["devices"][0]["attributes"].update(x={"string": "a" * 65}))
    assert broken(
        lambda b: b["spec"]["devices"][0]["attributes"].update(x={"int": 1, "bool": True})
    )
    assert broken(lambda b: b["spec"]["devices"][0]["attributes"].update({"bad-name": {"int": 1}}))
    assert broken(lambda b: b["spec"]["pool"].update(resourceSliceCount=0))
    assert broken(lambda b: b["spec"].update(allNodes=True))  # and nodeName
    assert broken(lambda b: b["spec"].update(devices=b["spec"]["devices"] * 65))  # 130
    assert broken(lambda b: b["spec"].update(drivr="x"))  # unknown field
    assert broken(
        lambda b: b["spec"]["devices"][0]["attributes"].update(
            {f"a{i}": {"int": i} for i in range(30)}
        )
    )
    assert broken(lambda b: b["spec"]["devices"][0].update(capacity={"memory": {"value": "16 GB"}}))


def test_labels_are_attributes_of_their_domain_when_their_key_can_be_a_name():
    """An operator's labels (API 2.10) are published under labels.exosuit.dev, each
    whose key is a C identifier of at most 32 characters (resource.k8s.io's rule for an
    attribute's name); team.ml and cooling-zone cannot be, and are left out."""
    labels = {f"k{i:02}": "v" for i in range(15)} | {"rack": "a1"}
    labels |= {"team.ml": "vision", "cooling-zone": "north", "x" * 33: "long"}
    inventory, _, _ = fpga_inventory(1, numa_node=1, labels=labels)
    [found] = published(inventory).values()
    published_labels = {
        name.split("/", 1)[1]: value["string"]
        for name, value in attributes(found).items()
        if name.startswith(f"{slices.LABELS_DOMAIN}/")
    }
    assert published_labels == {f"k{i:02}": "v" for i in range(15)} | {"rack": "a1"}
    # 16 labels at most (exosuit/schemas/labels.py) fit beside Exosuit's own attributes.
    [built] = slices.build_slices(NODE, [[found]], 1)
    assert slice_errors(slices.serialize(built)) == []
