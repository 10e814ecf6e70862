"""Topology constraints on claims (doc/devices.md, "Topology constraints"), on SQLite,
PostgreSQL and MariaDB: a host of 4 GPUs and 2 NICs on 2 NUMA nodes (2 GPUs and a NIC per
node, each node its own PCIe roots). Pairs land together, or are refused naming why;
``accel:numa_node``, labels and a claim's ``numa_node`` choose; a Nova bind checks the
same constraints against the devices its instance already holds."""

from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa

from exosuit.db import models
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from tests.helpers.claims import ARQS, CLAIMS, fault, make_world

V = "2.10"
HOST = "topo"
# (address, NUMA node, PCIe root): node 0 has roots 00 and 17, node 1 has 80 and 97.
GPUS = (
    ("0000:01:00.0", 0, "0000:00:01.0"),
    ("0000:18:00.0", 0, "0000:17:01.0"),
    ("0000:81:00.0", 1, "0000:80:01.0"),
    ("0000:98:00.0", 1, "0000:97:01.0"),
)
NICS = (
    ("0000:02:00.0", 0, "0000:00:01.0"),
    ("0000:99:00.0", 1, "0000:97:01.0"),
)


def _device(kind: str, address: str, numa: int, root: str) -> Device:
    """A GPU (PGPU, two attach handles: two VFs) or a NIC (CUSTOM_NIC, one)."""
    handles = 2 if kind == "GPU" else 1
    bus = address.split(":")[1]
    return Device(
        type=kind,
        vendor="10de" if kind == "GPU" else "15b3",
        model=kind,
        driver_name="static",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=numa,
        pcie_root=root,
        deployables=(
            Deployable(
                name=f"{kind.lower()}_{address}",
                num_accelerators=handles,
                resource_class="PGPU" if kind == "GPU" else "CUSTOM_NIC",
                traits=(),
                driver_name="static",
                attach_handles=tuple(
                    AttachHandle("PCI", pci_cpid(f"0000:{bus}:00.{i + 1}")) for i in range(handles)
                ),
            ),
        ),
    )


@pytest.fixture
def world(database, tmp_path):
    w = make_world(database, tmp_path)
    w.report(
        HOST,
        [_device("GPU", *g) for g in GPUS] + [_device("NIC", *n) for n in NICS],
    )
    w.profile("gpu", {"resources:PGPU": "1"})
    w.profile("nic", {"resources:CUSTOM_NIC": "1"})
    w.profile(
        "gpu-near-nic",
        {"resources:PGPU": "1", "accel:same_numa_node": "true"},
        {"resources:CUSTOM_NIC": "1"},
    )
    return w


def _claim(world, body: dict, expect: int = 201):
    r = world.member.post(CLAIMS, body, version=V)
    assert r.status_code == expect, r.text
    return r


PLACES = {address: (numa, root) for address, numa, root in GPUS + NICS}


def _topology(world) -> dict[str, tuple[int, str]]:
    """Device uuid → (NUMA node, PCIe root), as the host reported them."""
    return {
        d["uuid"]: PLACES[d["pci_address"]]
        for d in world.admin.get(f"/v2/devices?hostname={HOST}", version=V).json["devices"]
    }


def _nodes(world, claim: dict) -> list[int]:
    where = _topology(world)
    return [where[d["device_uuid"]][0] for d in claim["devices"]]


def _nic_on(world, node: int) -> str:
    """Claim the NIC on ``node`` (by the claim's numa_node); its uuid."""
    claim = _claim(world, {"device_profile_name": "nic", "numa_node": node}).json
    assert _nodes(world, claim) == [node]
    return claim["uuid"]


def test_a_gpu_and_a_nic_land_on_one_numa_node_or_are_refused_naming_why(world):
    first = _claim(world, {"device_profile_name": "gpu-near-nic"}).json
    assert _nodes(world, first) == [0, 0]
    world.release(first["uuid"])
    # Node 0's NIC held: the pair goes to node 1.
    held_0 = _nic_on(world, 0)
    second = _claim(world, {"device_profile_name": "gpu-near-nic"}).json
    assert _nodes(world, second) == [1, 1]
    world.release(second["uuid"])
    # Both NICs held: refused, nothing held for it, saying why.
    held_1 = _nic_on(world, 1)
    before = world.held()
    r = _claim(world, {"device_profile_name": "gpu-near-nic"}, expect=409)
    error = fault(r)
    assert error["code"] == "exosuit.claim.unsatisfiable"
    text = error["faultstring"]
    assert text.endswith(
        "No device on any host can take the claim: 4 free, but no device on its host serves "
        f"group 1 (CUSTOM_NIC:1), 2 held (by claim {held_0}, claim {held_1})."
    )
    assert world.held() == before


def test_without_same_numa_node_a_pair_may_straddle_nodes(world):
    """The control: the same groups without the constraint take the first GPU and the
    first free NIC, on different nodes once node 0's NIC is held."""
    world.profile("gpu-and-nic", {"resources:PGPU": "1"}, {"resources:CUSTOM_NIC": "1"})
    _nic_on(world, 0)
    claim = _claim(world, {"device_profile_name": "gpu-and-nic"}).json
    assert _nodes(world, claim) == [0, 1]


def test_distinct_devices_gives_two_gpus_where_one_would_serve_both(world):
    world.profile("two-gpus", {"resources:PGPU": "1"}, {"resources:PGPU": "1"})
    world.profile(
        "two-distinct-gpus",
        {"resources:PGPU": "1", "accel:distinct_devices": "true"},
        {"resources:PGPU": "1"},
    )
    shared = _claim(world, {"device_profile_name": "two-gpus"}).json
    assert len({d["device_uuid"] for d in shared["devices"]}) == 1  # two VFs of one GPU
    apart = _claim(world, {"device_profile_name": "two-distinct-gpus"}).json
    assert len({d["device_uuid"] for d in apart["devices"]}) == 2


def test_distinct_devices_is_refused_when_one_device_is_left(world):
    world.profile(
        "two-distinct-gpus-on-1",
        {"resources:PGPU": "1", "accel:distinct_devices": "true", "accel:numa_node": "1"},
        {"resources:PGPU": "1", "accel:numa_node": "1"},
    )
    # One GPU of node 1 fully held (both its VFs): one device left there.
    world.profile("gpu-on-1", {"resources:PGPU": "2", "accel:numa_node": "1"})
    held = _claim(world, {"device_profile_name": "gpu-on-1"}).json
    assert len({d["device_uuid"] for d in held["devices"]}) == 1
    r = _claim(world, {"device_profile_name": "two-distinct-gpus-on-1"}, expect=409)
    text = fault(r)["faultstring"]
    assert "with too few distinct devices (accel:distinct_devices)" in text
    assert "2 on NUMA node 0, not 1" in text


def test_same_pcie_root_pairs_a_gpu_with_the_nic_under_its_root_or_refuses(world):
    world.profile(
        "gpu-under-nic-root",
        {"resources:PGPU": "1", "accel:same_pcie_root": "true"},
        {"resources:CUSTOM_NIC": "1"},
    )
    claim = _claim(world, {"device_profile_name": "gpu-under-nic-root"}).json
    roots = {_topology(world)[d["device_uuid"]][1] for d in claim["devices"]}
    assert roots == {"0000:00:01.0"}
    world.release(claim["uuid"])
    # The GPUs under the NICs' roots held (both VFs each): no root has both free.
    for address in (GPUS[0][0], GPUS[3][0]):
        _label(world, address, {"root": "nic"})
    world.profile("gpu-by-nic", {"resources:PGPU": "2", "accel:label:root": "nic"})
    for _ in range(2):
        _claim(world, {"device_profile_name": "gpu-by-nic"})
    r = _claim(world, {"device_profile_name": "gpu-under-nic-root"}, expect=409)
    text = fault(r)["faultstring"]
    assert "alone on its PCIe root, without a free device of group 1 (CUSTOM_NIC:1)" in text
    assert "accel:same_pcie_root" in text


def test_a_claim_names_its_numa_node_and_a_node_with_nothing_is_refused(world):
    claim = _claim(world, {"device_profile_name": "gpu", "numa_node": 1}).json
    assert _nodes(world, claim) == [1]
    r = _claim(world, {"device_profile_name": "gpu", "numa_node": 7}, expect=409)
    text = fault(r)["faultstring"]
    assert "2 on NUMA node 0, not 7, 2 on NUMA node 1, not 7" in text
    assert "2 of resource class CUSTOM_NIC, not PGPU" in text
    # Before 2.10 there is no numa_node: a 400, not a claim anywhere.
    r = world.member.post(CLAIMS, {"device_profile_name": "gpu", "numa_node": 1}, version="2.9")
    assert r.status_code == 400, r.text
    # Named attach handles are chosen already: numa_node is refused with them.
    handle = world.handles(hostname=HOST)[0]["uuid"]
    r = world.member.post(CLAIMS, {"attach_handles": [handle], "numa_node": 0}, version=V)
    assert r.status_code == 400 and fault(r)["code"] == "exosuit.claim.selection"


def test_accel_numa_node_and_labels_choose_the_device(world):
    world.profile("gpu-on-1", {"resources:PGPU": "1", "accel:numa_node": "1"})
    claim = _claim(world, {"device_profile_name": "gpu-on-1"}).json
    assert _nodes(world, claim) == [1]
    world.profile("ml-gpu", {"resources:PGPU": "1", "accel:label:team": "ml"})
    r = _claim(world, {"device_profile_name": "ml-gpu"}, expect=409)
    assert "4 missing label team=ml" in fault(r)["faultstring"]
    labelled = GPUS[3][0]
    _label(world, labelled, {"team": "ml"})
    claim = _claim(world, {"device_profile_name": "ml-gpu"}).json
    by_address = {
        d["uuid"]: d["pci_address"]
        for d in world.admin.get(f"/v2/devices?hostname={HOST}", version=V).json["devices"]
    }
    assert by_address[claim["devices"][0]["device_uuid"]] == labelled


def _label(world, address: str, labels: dict[str, str]) -> None:
    """Set a device's labels in the database (the label API is another change's)."""
    dev = models.devices
    world.database.write(
        lambda conn: conn.execute(
            sa.update(dev)
            .where(dev.c.pci_address == address, dev.c.hostname == HOST)
            .values(labels=json.dumps(labels, sort_keys=True))
        )
    )


# -- Nova's binds: the constraints checked against the instance's bound devices ----------


def _rps(world) -> dict[tuple[str, int], str]:
    """(device type, NUMA node) → the resource provider of its first device there."""
    found: dict[tuple[str, int], str] = {}
    for d in world.admin.get("/v2/deployables", version=V).json["deployables"]:
        kind, address = d["name"].split("_", 1)
        found.setdefault((kind.upper(), PLACES[address][0]), d["rp_uuid"])
    return found


def _bind(world, arqs: list[dict], rps: list[str], instance: str) -> tuple[list[dict], str]:
    """Nova's bind of ``arqs`` to ``rps``: the ARQs after it, and why a bind failed."""
    patch = {
        a["uuid"]: [
            {"path": "/hostname", "op": "add", "value": HOST},
            {"path": "/device_rp_uuid", "op": "add", "value": rp},
            {"path": "/instance_uuid", "op": "add", "value": instance},
        ]
        for a, rp in zip(arqs, rps, strict=True)
    }
    r = world.nova.patch(ARQS, patch)
    # A failed bind answers 409 exosuit.arq.bind_failed, as Cyborg's does; its ARQ says why.
    assert r.status_code == 202 or fault(r)["code"] == "exosuit.arq.bind_failed", r.text
    why = "" if r.status_code == 202 else fault(r)["faultstring"]
    return [world.admin.get(f"{ARQS}/{a['uuid']}", version=V).json for a in arqs], why


def test_a_nova_bind_that_splits_a_same_numa_node_pair_fails_with_the_reason(world):
    rps = _rps(world)
    r = world.nova.post(ARQS, {"device_profile_name": "gpu-near-nic"})
    assert r.status_code == 201, r.text
    arqs = r.json["arqs"]
    bound, why = _bind(world, arqs, [rps[("GPU", 0)], rps[("NIC", 1)]], str(uuid.uuid4()))
    assert [a["state"] for a in bound] == ["Bound", "BindFailed"]
    assert "is on NUMA node 1, but ARQ" in why and "on NUMA node 0 (accel:same_numa_node)" in why
    # Where Placement's choice keeps the pair together, the bind succeeds.
    r = world.nova.post(ARQS, {"device_profile_name": "gpu-near-nic"})
    pair = [rps[("GPU", 1)], rps[("NIC", 1)]]
    instance = str(uuid.uuid4())
    together, why = _bind(world, r.json["arqs"], pair, instance)
    assert [a["state"] for a in together] == ["Bound", "Bound"] and why == ""
    # A dry run names the VM's ARQ as the holder of node 1's NIC.
    body = {"device_profile_name": "nic", "numa_node": 1, "dry_run": True}
    answer = world.member.post(CLAIMS, body, version=V).json
    (host,) = answer["hosts"]
    (nic,) = [d for d in host["devices"] if d["verdict"] == "held"]
    assert nic["holders"] == [
        {"arq_uuid": together[1]["uuid"], "instance_uuid": instance, "claim_uuid": None}
    ]
    assert f"ARQ {together[1]['uuid']} of instance {instance}" in answer["reason"]


def test_a_nova_bind_checks_accel_numa_node_and_distinct_devices(world):
    rps = _rps(world)
    world.profile("gpu-on-1", {"resources:PGPU": "1", "accel:numa_node": "1"})
    r = world.nova.post(ARQS, {"device_profile_name": "gpu-on-1"})
    (failed,), why = _bind(world, r.json["arqs"], [rps[("GPU", 0)]], str(uuid.uuid4()))
    assert failed["state"] == "BindFailed"
    assert "is on NUMA node 0, not 1 (accel:numa_node)" in why
    world.profile(
        "two-distinct-gpus",
        {"resources:PGPU": "1", "accel:distinct_devices": "true"},
        {"resources:PGPU": "1"},
    )
    r = world.nova.post(ARQS, {"device_profile_name": "two-distinct-gpus"})
    same, why = _bind(world, r.json["arqs"], [rps[("GPU", 0)]] * 2, str(uuid.uuid4()))
    assert [a["state"] for a in same] == ["Bound", "BindFailed"]
    assert "of the same request holds device" in why and "(accel:distinct_devices)" in why
