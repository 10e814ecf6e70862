"""Applying agent inventory snapshots, on SQLite, PostgreSQL and MariaDB.

Directly through ``exosuit.db.inventory.apply_snapshot`` and through the agent
API (``PUT /agent/v1/hosts/{hostname}/inventory``), with the database read back
table by table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import uuid

import pytest
import sqlalchemy as sa

from exosuit.db import inventory, models
from exosuit.drivers.base import pci_cpid
from exosuit.schemas import device_identity
from tests.helpers.inventory import fpga, rehash, snapshot

HOST = "inv-host"
OTHER_HOST = "other-host"
ADDRESS = "0000:0c:00.0"
SECOND = "0000:0d:00.0"
TABLES = ("devices", "controlpath_ids", "deployables", "attributes", "attach_handles")


# -- helpers ---------------------------------------------------------------------------


def apply(
    database, body: dict, hostname: str = HOST, expect_new: bool = False
) -> inventory.ApplyResult:
    return database.write(inventory.apply_snapshot, hostname, body, expect_new=expect_new)


def put(api, body: dict, hostname: str = HOST, expect: int = 200):
    response = api.put(f"/agent/v1/hosts/{hostname}/inventory", body)
    assert response.status_code == expect, response.text
    return response


def rows(database, table: str, **where) -> list[dict]:
    t = models.Base.metadata.tables[table]
    stmt = sa.select(t).order_by(t.c.id)
    for column, value in where.items():
        stmt = stmt.where(t.c[column] == value)
    with database.reader() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


def everything(database) -> dict[str, list[dict]]:
    return {t: rows(database, t) for t in (*TABLES, "hosts", "accelerator_requests")}


def orphans(database) -> dict[str, int]:
    """Rows whose parent is gone, per relation (all must be 0)."""
    dev, cp, dep, at, ah = (
        models.devices,
        models.controlpath_ids,
        models.deployables,
        models.attributes,
        models.attach_handles,
    )
    arq = models.accelerator_requests
    checks = {
        "controlpath_ids.device_id": (cp, cp.c.device_id, dev.c.id),
        "deployables.device_id": (dep, dep.c.device_id, dev.c.id),
        "attributes.deployable_id": (at, at.c.deployable_id, dep.c.id),
        "attach_handles.deployable_id": (ah, ah.c.deployable_id, dep.c.id),
        "attach_handles.cpid_id": (ah, ah.c.cpid_id, cp.c.id),
        "accelerator_requests.deployable_id": (arq, arq.c.deployable_id, dep.c.id),
        "accelerator_requests.attach_handle_id": (arq, arq.c.attach_handle_id, ah.c.id),
    }
    counts = {}
    with database.reader() as conn:
        for name, (table, column, parent) in checks.items():
            counts[name] = conn.execute(
                sa.select(sa.func.count())
                .select_from(table)
                .where(column.is_not(None), column.not_in(sa.select(parent)))
            ).scalar()
    return counts


def assert_no_orphans(database) -> None:
    assert set(orphans(database).values()) == {0}, orphans(database)


@contextlib.contextmanager
def writes(database):
    """Collect the INSERT/UPDATE/DELETE statements sent to ``database`` meanwhile.

    Listens on every engine of the process (the database may keep more than one,
    e.g. a pool of its own for readers) and keeps those on this database's URL.
    """
    seen: list[str] = []
    target = database.url.render_as_string(hide_password=False)

    def _listener(conn, cursor, statement, parameters, context, executemany):
        if conn.engine.url.render_as_string(hide_password=False) != target:
            return
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb in ("INSERT", "UPDATE", "DELETE", "REPLACE"):
            seen.append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", _listener)
    try:
        yield seen
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", _listener)


def with_deployable(device, **changes):
    """``device`` with its (only) deployable changed."""
    (deployable,) = device.deployables
    return dataclasses.replace(device, deployables=(dataclasses.replace(deployable, **changes),))


def device_tree(database, device_id: int) -> dict:
    """Everything stored under one device, for before/after comparisons."""
    deployables = rows(database, "deployables", device_id=device_id)
    ids = [d["id"] for d in deployables]
    return {
        "device": rows(database, "devices", id=device_id),
        "controlpath_ids": rows(database, "controlpath_ids", device_id=device_id),
        "deployables": deployables,
        "attributes": [a for a in rows(database, "attributes") if a["deployable_id"] in ids],
        "attach_handles": [
            h for h in rows(database, "attach_handles") if h["deployable_id"] in ids
        ],
    }


def ensure_profile(api, profile: str = "inv") -> None:
    r = api.post("/v2/device_profiles", [{"name": profile, "groups": [{"resources:FPGA": "1"}]}])
    assert r.status_code in (201, 409), r.text


def bind(api, rp_uuid: str, hostname: str = HOST, profile: str = "inv") -> tuple[str, str]:
    """Create one ARQ and bind it to ``rp_uuid``; return (arq uuid, instance uuid)."""
    ensure_profile(api, profile)
    r = api.post("/v2/accelerator_requests", {"device_profile_name": profile})
    assert r.status_code == 201, r.text
    (arq,) = r.json["arqs"]
    instance = str(uuid.uuid4())
    r = api.patch(
        "/v2/accelerator_requests",
        {
            arq["uuid"]: [
                {"op": "add", "path": "/hostname", "value": hostname},
                {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
                {"op": "add", "path": "/instance_uuid", "value": instance},
            ]
        },
    )
    assert r.status_code == 202, r.text
    return arq["uuid"], instance


def bind_fails(api, rp_uuid: str, hostname: str = HOST) -> str:
    """Bind a new ARQ to ``rp_uuid``, expecting a 409; return its message."""
    ensure_profile(api)
    r = api.post("/v2/accelerator_requests", {"device_profile_name": "inv"})
    (arq,) = r.json["arqs"]
    r = api.patch(
        "/v2/accelerator_requests",
        {
            arq["uuid"]: [
                {"op": "add", "path": "/hostname", "value": hostname},
                {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
                {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
            ]
        },
    )
    assert r.status_code == 409, r.text
    message = json.loads(r.json["error_message"])["faultstring"]
    assert api.get(f"/v2/accelerator_requests/{arq['uuid']}").json["state"] == "BindFailed"
    api.delete(f"/v2/accelerator_requests/{arq['uuid']}")
    return message


def device_by_uuid(api, device_uuid: str) -> dict | None:
    r = api.get(f"/v2/devices/{device_uuid}", version="2.4")
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json


# -- first snapshot, identity ------------------------------------------------------------


def test_first_snapshot_creates_every_row(database):
    device = dataclasses.replace(fpga(ADDRESS, handles=4), firmware_version="1.2.3")
    body = snapshot(HOST, [device])
    result = apply(database, body)
    assert (result.changed, result.created, result.updated, result.deleted) == (True, 1, 0, 0)

    (dev,) = rows(database, "devices")
    identity = device_identity({"cpid_type": "PCI", "cpid_info": pci_cpid(ADDRESS)})
    assert dev["hostname"] == HOST
    assert dev["identity"] == identity
    assert (dev["type"], dev["vendor"], dev["model"]) == ("FPGA", "0xABCD", "Fake FPGA")
    assert (dev["status"], dev["presence"], dev["presence_reason"]) == ("enabled", "present", None)
    assert (dev["driver_name"], dev["pci_address"], dev["numa_node"]) == ("fake", ADDRESS, 0)
    assert dev["firmware_version"] == "1.2.3"
    assert uuid.UUID(dev["uuid"])

    (cpid,) = rows(database, "controlpath_ids")
    assert cpid["device_id"] == dev["id"]
    assert cpid["cpid_type"] == "PCI"
    assert json.loads(cpid["cpid_info"]) == pci_cpid(ADDRESS)

    (dep,) = rows(database, "deployables")
    assert dep["device_id"] == dev["id"]
    assert (dep["name"], dep["num_accelerators"], dep["driver_name"]) == (
        f"fake_{ADDRESS}",
        4,
        "fake",
    )
    assert dep["rp_uuid"] == inventory.rp_uuid(HOST, identity, dep["name"])

    attributes = rows(database, "attributes")
    assert {(a["key"], a["value"], a["source"]) for a in attributes} == {
        ("rc", "FPGA", "agent"),
        ("trait0", "CUSTOM_FAKE_DEVICE", "agent"),
        # Where the device sits, as an attribute of its deployable (doc/devices.md).
        ("numa_node", "0", "agent"),
    }
    assert {a["deployable_id"] for a in attributes} == {dep["id"]}

    handles = rows(database, "attach_handles")
    assert len(handles) == 4
    for h in handles:
        assert (h["deployable_id"], h["cpid_id"], h["in_use"], h["attach_type"]) == (
            dep["id"],
            cpid["id"],
            False,
            "TEST_PCI",
        )
    assert sorted(json.loads(h["attach_info"])["function"] for h in handles) == ["0", "1", "2", "3"]
    assert len({h["uuid"] for h in handles}) == 4

    (host,) = rows(database, "hosts")
    assert (host["hostname"], host["snapshot_hash"]) == (HOST, body["hash"])
    assert host["last_report_at"] is not None
    assert host["agent_version"] == body["agent_version"]
    assert_no_orphans(database)


def test_first_snapshot_through_the_agent_api(api, database):
    body = snapshot(HOST, [fpga(ADDRESS, handles=2), fpga(SECOND, handles=3)])
    r = put(api, body)
    assert r.json == {
        "hostname": HOST,
        "hash": body["hash"],
        "changed": True,
        "desired_state": r.json["desired_state"],
    }
    devices = api.get("/v2/devices", version="2.4").json["devices"]
    assert sorted(d["pci_address"] for d in devices) == [ADDRESS, SECOND]
    assert {d["hostname"] for d in devices} == {HOST}
    deployables = api.get("/v2/deployables").json["deployables"]
    assert sorted(d["num_accelerators"] for d in deployables) == [2, 3]
    assert len(rows(database, "attach_handles")) == 5
    assert len(rows(database, "controlpath_ids")) == 2


def test_rp_uuid_is_stable_across_rediscovery(database):
    body = snapshot(HOST, [fpga(ADDRESS)])
    apply(database, body)
    (before,) = rows(database, "deployables")
    (device_before,) = rows(database, "devices")

    result = apply(database, snapshot(HOST, []))  # the device disappears
    assert (result.deleted, result.lost) == (1, 0)
    assert {t: len(rows(database, t)) for t in TABLES} == dict.fromkeys(TABLES, 0)

    apply(database, body)  # … and comes back
    (after,) = rows(database, "deployables")
    (device_after,) = rows(database, "devices")
    assert after["rp_uuid"] == before["rp_uuid"]
    assert device_after["uuid"] != device_before["uuid"]  # really a new row

    # Another host with the same PCI address has providers of its own.
    apply(database, snapshot(OTHER_HOST, [fpga(ADDRESS)]), OTHER_HOST)
    theirs = [d for d in rows(database, "deployables") if d["id"] != after["id"]]
    assert len(theirs) == 1 and theirs[0]["rp_uuid"] != after["rp_uuid"]


# -- the unchanged hash costs nothing ------------------------------------------------------


def test_unchanged_hash_writes_nothing(api, database):
    body = snapshot(HOST, [fpga(ADDRESS)])
    with writes(database) as first:
        put(api, body)
    assert first, "the listener saw the first snapshot's writes"
    state = everything(database)

    with writes(database) as again:
        r = put(api, body)
        result = apply(database, body)
    assert r.json["changed"] is False
    assert result == inventory.ApplyResult(changed=False)
    assert again == []
    assert everything(database) == state  # hosts.last_report_at/updated_at included

    # A hash-only report of the known snapshot: 200, still no write.
    with writes(database) as hash_only:
        r = put(api, {"schema_version": 1, "hash": body["hash"]})
    assert r.json["changed"] is False and hash_only == []


# -- changes -----------------------------------------------------------------------------


def test_changed_fields_are_applied_in_place(api, database):
    device = fpga(ADDRESS, handles=16)
    apply(database, snapshot(HOST, [device]))
    (dev_before,) = rows(database, "devices")
    (dep_before,) = rows(database, "deployables")
    handles_before = {h["attach_info"]: h["uuid"] for h in rows(database, "attach_handles")}
    trait_before = rows(database, "attributes", key="trait0")[0]

    changed = with_deployable(
        dataclasses.replace(device, firmware_version="2.0"),
        num_accelerators=8,
        traits=("CUSTOM_NEW", "CUSTOM_EXTRA"),
    )
    result = apply(database, snapshot(HOST, [changed]))
    assert (result.created, result.updated, result.deleted) == (0, 2, 0)

    (dev,) = rows(database, "devices")
    (dep,) = rows(database, "deployables")
    assert (dev["id"], dev["uuid"], dev["firmware_version"]) == (
        dev_before["id"],
        dev_before["uuid"],
        "2.0",
    )
    assert dev["updated_at"] is not None
    assert (dep["id"], dep["rp_uuid"], dep["num_accelerators"]) == (
        dep_before["id"],
        dep_before["rp_uuid"],
        8,
    )
    attributes = {a["key"]: a for a in rows(database, "attributes")}
    assert {k: a["value"] for k, a in attributes.items()} == {
        "rc": "FPGA",
        "trait0": "CUSTOM_NEW",
        "trait1": "CUSTOM_EXTRA",
        "numa_node": "0",
    }
    assert attributes["trait0"]["uuid"] == trait_before["uuid"]  # updated, not replaced
    # The handles did not change: the very same rows.
    assert {h["attach_info"]: h["uuid"] for h in rows(database, "attach_handles")} == handles_before

    # A trait the agent no longer reports goes.
    apply(database, snapshot(HOST, [with_deployable(changed, traits=())]))
    assert {a["key"] for a in rows(database, "attributes")} == {"rc", "numa_node"}
    assert_no_orphans(database)


def test_extra_and_removed_attach_handles(database):
    apply(database, snapshot(HOST, [fpga(ADDRESS, handles=16)]))
    before = {h["attach_info"]: h["uuid"] for h in rows(database, "attach_handles")}

    apply(database, snapshot(HOST, [fpga(ADDRESS, handles=17)]))
    after = {h["attach_info"]: h["uuid"] for h in rows(database, "attach_handles")}
    assert len(after) == 17
    assert {k: after[k] for k in before} == before  # the 16 kept their rows
    (extra,) = set(after) - set(before)
    assert json.loads(extra)["device"] == "02" and json.loads(extra)["function"] == "0"

    apply(database, snapshot(HOST, [fpga(ADDRESS, handles=12)]))
    left = {h["attach_info"]: h["uuid"] for h in rows(database, "attach_handles")}
    assert len(left) == 12
    assert all(before[k] == v for k, v in left.items())
    assert_no_orphans(database)


def test_removed_device_is_deleted_with_all_its_rows(api, database):
    apply(database, snapshot(HOST, [fpga(ADDRESS, handles=4), fpga(SECOND, handles=2)]))
    kept = next(d for d in rows(database, "devices") if d["pci_address"] == SECOND)
    kept_tree = device_tree(database, kept["id"])
    gone = next(d for d in rows(database, "devices") if d["pci_address"] == ADDRESS)
    (gone_dep,) = rows(database, "deployables", device_id=gone["id"])
    # An ARQ that once failed to bind there, and an operator's attribute on it.
    assert "no free attach handle" not in bind_fails(api, gone_dep["rp_uuid"], "elsewhere")
    r = api.post("/v2/attributes", {"deployable_id": gone_dep["id"], "key": "k", "value": "v"})
    assert r.status_code == 201, r.text

    result = apply(database, snapshot(HOST, [fpga(SECOND, handles=2)]))
    assert (result.deleted, result.lost) == (1, 0)
    assert [d["id"] for d in rows(database, "devices")] == [kept["id"]]
    assert device_tree(database, kept["id"]) == kept_tree  # untouched
    assert not rows(database, "controlpath_ids", device_id=gone["id"])
    assert not rows(database, "deployables", device_id=gone["id"])
    assert not rows(database, "attributes", deployable_id=gone_dep["id"])
    assert not rows(database, "attach_handles", deployable_id=gone_dep["id"])
    assert len(rows(database, "attach_handles")) == 2
    assert_no_orphans(database)
    assert api.get(f"/v2/devices/{gone['uuid']}").status_code == 404


# -- a device gone while held ------------------------------------------------------------


@pytest.mark.parametrize("release", ["delete", "unbind"])
def test_device_gone_while_held_is_lost_until_released(api, database, release):
    device = fpga(ADDRESS, handles=2)
    apply(database, snapshot(HOST, [device, fpga(SECOND, handles=1)]))
    (dev,) = rows(database, "devices", pci_address=ADDRESS)
    (dep,) = rows(database, "deployables", device_id=dev["id"])
    arq_uuid, instance = bind(api, dep["rp_uuid"])
    held = api.get(f"/v2/accelerator_requests/{arq_uuid}").json["attach_handle_uuid"]

    result = apply(database, snapshot(HOST, [fpga(SECOND, handles=1)]))
    assert (result.deleted, result.lost) == (0, 1)
    shown = device_by_uuid(api, dev["uuid"])
    assert shown["presence"] == "lost"
    assert arq_uuid in shown["presence_reason"]
    assert instance in shown["presence_reason"]
    assert held in shown["presence_reason"]
    (handle,) = rows(database, "attach_handles", uuid=held)
    assert handle["in_use"] is True
    arq = api.get(f"/v2/accelerator_requests/{arq_uuid}").json
    assert (arq["state"], arq["attach_handle_uuid"]) == ("Bound", held)
    assert "lost" in bind_fails(api, dep["rp_uuid"])  # its free handle is not offered

    # Reported missing again (another hash): still lost, nothing else changes.
    tree = device_tree(database, dev["id"])
    apply(
        database,
        rehash(
            snapshot(HOST, [fpga(SECOND, handles=1)])
            | {"driver_errors": [{"driver": "x", "error": "y"}]}
        ),
    )
    assert device_tree(database, dev["id"]) == tree

    if release == "delete":
        assert api.delete(f"/v2/accelerator_requests/{arq_uuid}").status_code == 204
    else:
        r = api.patch(
            "/v2/accelerator_requests", {arq_uuid: [{"op": "remove", "path": "/instance_uuid"}]}
        )
        assert r.status_code == 202, r.text
        assert api.get(f"/v2/accelerator_requests/{arq_uuid}").json["state"] == "Unbound"
    assert device_by_uuid(api, dev["uuid"]) is None
    assert not rows(database, "deployables", device_id=dev["id"])
    assert not rows(database, "controlpath_ids", device_id=dev["id"])
    assert not rows(database, "attach_handles", uuid=held)
    assert not rows(database, "attributes", deployable_id=dep["id"])
    assert len(rows(database, "devices")) == 1
    assert_no_orphans(database)


def test_device_back_before_release_is_present_again(api, database):
    body = snapshot(HOST, [fpga(ADDRESS, handles=2)])
    apply(database, body)
    (dev,) = rows(database, "devices")
    (dep,) = rows(database, "deployables")
    arq_uuid, _ = bind(api, dep["rp_uuid"])
    apply(database, snapshot(HOST, []))
    assert device_by_uuid(api, dev["uuid"])["presence"] == "lost"

    apply(database, body)
    shown = device_by_uuid(api, dev["uuid"])
    assert (shown["presence"], shown["presence_reason"]) == ("present", None)
    (dep_after,) = rows(database, "deployables")
    assert (dep_after["id"], dep_after["rp_uuid"]) == (dep["id"], dep["rp_uuid"])
    assert api.get(f"/v2/accelerator_requests/{arq_uuid}").json["state"] == "Bound"
    second, _ = bind(api, dep["rp_uuid"])  # its other handle is offered again
    assert "no free attach handle" in bind_fails(api, dep["rp_uuid"])

    r = api.delete(f"/v2/accelerator_requests?arqs={arq_uuid},{second}")
    assert r.status_code == 204, r.text
    assert device_by_uuid(api, dev["uuid"])["presence"] == "present"  # kept: it is there
    assert len(rows(database, "attach_handles", in_use=False)) == 2


def test_held_handle_removed_from_the_report_is_not_offered_again(api, database):
    """A handle held by a Bound ARQ that the host stops reporting is kept while held,
    and once released it is gone: never bound again."""
    full = snapshot(HOST, [fpga(ADDRESS, handles=2)])
    apply(database, full)
    (dep,) = rows(database, "deployables")
    arq_uuid, _ = bind(api, dep["rp_uuid"])
    held = api.get(f"/v2/accelerator_requests/{arq_uuid}").json["attach_handle_info"]
    held_info = json.dumps(held, sort_keys=True, separators=(",", ":"))
    device = fpga(ADDRESS, handles=2)
    (deployable,) = device.deployables
    without = with_deployable(
        device,
        attach_handles=tuple(h for h in deployable.attach_handles if dict(h.attach_info) != held),
    )
    apply(database, snapshot(HOST, [without]))

    (kept,) = rows(database, "attach_handles", attach_info=held_info)
    assert (kept["in_use"], kept["presence"]) == (True, "lost")
    assert api.get(f"/v2/accelerator_requests/{arq_uuid}").json["state"] == "Bound"

    assert api.delete(f"/v2/accelerator_requests/{arq_uuid}").status_code == 204
    assert not rows(database, "attach_handles", attach_info=held_info)
    other, _ = bind(api, dep["rp_uuid"])
    info = api.get(f"/v2/accelerator_requests/{other}").json["attach_handle_info"]
    assert info != held
    assert "no free attach handle" in bind_fails(api, dep["rp_uuid"])
    assert_no_orphans(database)


def test_held_handle_back_in_the_report_before_release_is_kept(api, database):
    full = snapshot(HOST, [fpga(ADDRESS, handles=2)])
    apply(database, full)
    (dep,) = rows(database, "deployables")
    arq_uuid, _ = bind(api, dep["rp_uuid"])
    held = api.get(f"/v2/accelerator_requests/{arq_uuid}").json["attach_handle_uuid"]
    apply(database, snapshot(HOST, [fpga(ADDRESS, handles=0)]))
    assert [(h["uuid"], h["presence"]) for h in rows(database, "attach_handles")] == [
        (held, "lost")
    ]

    apply(database, full)
    handles = {h["uuid"]: h for h in rows(database, "attach_handles")}
    assert len(handles) == 2 and handles[held]["presence"] == "present"
    assert api.delete(f"/v2/accelerator_requests/{arq_uuid}").status_code == 204
    assert rows(database, "attach_handles", uuid=held)[0]["in_use"] is False
    bind(api, dep["rp_uuid"])
    bind(api, dep["rp_uuid"])  # both handles are offered again
    assert "no free attach handle" in bind_fails(api, dep["rp_uuid"])


def test_deployable_gone_while_held_keeps_only_the_held_handle(api, database):
    device = fpga(ADDRESS, handles=3)
    (first,) = device.deployables
    second = dataclasses.replace(first, name="second")
    apply(database, snapshot(HOST, [dataclasses.replace(device, deployables=(first, second))]))
    dep = rows(database, "deployables", name="second")[0]
    arq_uuid, _ = bind(api, dep["rp_uuid"])
    held = api.get(f"/v2/accelerator_requests/{arq_uuid}").json["attach_handle_uuid"]

    result = apply(database, snapshot(HOST, [device]))
    assert (result.deleted, result.lost) == (0, 0)
    assert [
        (h["uuid"], h["presence"], h["in_use"])
        for h in rows(database, "attach_handles", deployable_id=dep["id"])
    ] == [(held, "lost", True)]
    assert "no free attach handle" in bind_fails(api, dep["rp_uuid"])
    assert api.get(f"/v2/accelerator_requests/{arq_uuid}").json["state"] == "Bound"

    r = api.patch("/v2/accelerator_requests", {arq_uuid: [{"op": "remove", "path": "/hostname"}]})
    assert r.status_code == 202, r.text
    assert not rows(database, "attach_handles", deployable_id=dep["id"])
    assert "no free attach handle" in bind_fails(api, dep["rp_uuid"])
    # The host's next changed report removes the deployable itself.
    apply(database, snapshot(HOST, [with_deployable(device, num_accelerators=1)]))
    assert not rows(database, "deployables", name="second")
    assert len(rows(database, "attach_handles")) == 3
    assert_no_orphans(database)


# -- operators' attributes, refused snapshots, hosts -------------------------------------


def test_attribute_created_through_the_api_survives_snapshots(api, database):
    apply(database, snapshot(HOST, [fpga(ADDRESS)]))
    (dep,) = rows(database, "deployables")
    r = api.post("/v2/attributes", {"deployable_id": dep["id"], "key": "rc", "value": "operator"})
    assert r.status_code == 201, r.text
    mine = r.json["uuid"]

    apply(database, snapshot(HOST, [with_deployable(fpga(ADDRESS), traits=("CUSTOM_X",))]))
    apply(database, snapshot(HOST, [with_deployable(fpga(ADDRESS), traits=())]))
    r = api.get(f"/v2/attributes/{mine}")
    assert r.status_code == 200, r.text
    assert (r.json["key"], r.json["value"]) == ("rc", "operator")
    by_source = {(a["key"], a["source"]) for a in rows(database, "attributes")}
    assert by_source == {("rc", "agent"), ("numa_node", "agent"), ("rc", "api")}


@pytest.mark.parametrize("breakage", ["schema", "hash"])
def test_refused_snapshot_writes_nothing(api, database, breakage):
    body = snapshot(HOST, [fpga(ADDRESS)])
    put(api, body)
    state = everything(database)

    bad = snapshot(HOST, [fpga(ADDRESS), fpga(SECOND)])
    if breakage == "schema":
        bad["devices"][1]["deployables"][0]["num_accelerators"] = -1
        bad = rehash(bad)
    else:
        bad["devices"].pop()  # content no longer matches its hash
    with writes(database) as seen:
        r = put(api, bad, expect=400)
    assert seen == []
    assert json.loads(r.json["error_message"])["code"] in (
        "exosuit.body.invalid",
        "exosuit.inventory.hash",
    )
    assert everything(database) == state
    (host,) = rows(database, "hosts")
    assert host["snapshot_hash"] == body["hash"]


def _twice_named(device):
    """``device`` with a second deployable of the same name (other attach handles)."""
    (first,) = device.deployables
    second = dataclasses.replace(first, attach_handles=first.attach_handles[:1])
    return dataclasses.replace(device, deployables=(first, second))


@pytest.mark.parametrize("known", [False, True], ids=["new device", "known device"])
def test_two_deployables_with_one_name_in_a_device_are_refused(api, database, known):
    """Regression (issue 14): the second insert broke uq_deployables_device_name, a 500."""
    if known:
        put(api, snapshot(HOST, [fpga(ADDRESS)]))
    state = everything(database)
    bad = snapshot(HOST, [fpga(SECOND), _twice_named(fpga(ADDRESS, name="twice"))])
    with writes(database) as seen:
        r = put(api, bad, expect=400)
    assert seen == []
    fault = json.loads(r.json["error_message"])
    assert fault["code"] == "exosuit.inventory.invalid"
    assert f"({ADDRESS}): two deployables are named 'twice'" in fault["faultstring"]
    assert everything(database) == state
    # The same devices with distinct names are applied.
    put(api, snapshot(HOST, [fpga(SECOND), fpga(ADDRESS, name="twice")]))
    assert len(rows(database, "deployables")) == 2


def test_snapshot_for_one_host_never_touches_another(api, database):
    # Both hosts have a card at the same PCI address.
    apply(database, snapshot(OTHER_HOST, [fpga(ADDRESS, handles=2)]), OTHER_HOST)
    (theirs,) = rows(database, "devices", hostname=OTHER_HOST)
    (their_dep,) = rows(database, "deployables", device_id=theirs["id"])
    their_arq, _ = bind(api, their_dep["rp_uuid"], OTHER_HOST)
    tree = device_tree(database, theirs["id"])
    (their_host,) = rows(database, "hosts", hostname=OTHER_HOST)

    apply(database, snapshot(HOST, [fpga(ADDRESS, handles=4)]))
    apply(database, snapshot(HOST, [with_deployable(fpga(ADDRESS, handles=3), num_accelerators=1)]))
    apply(database, snapshot(HOST, []))
    put(api, snapshot(HOST, [fpga(ADDRESS, handles=1)]))
    put(api, snapshot(HOST, []))

    assert device_tree(database, theirs["id"]) == tree
    assert rows(database, "hosts", hostname=OTHER_HOST) == [their_host]
    assert rows(database, "devices", hostname=HOST) == []
    assert api.get(f"/v2/accelerator_requests/{their_arq}").json["state"] == "Bound"
    # A report sent for one host that names another is refused.
    r = put(api, snapshot(OTHER_HOST, []), hostname=HOST, expect=400)
    assert "one name everywhere" in r.text
    assert device_tree(database, theirs["id"]) == tree


@pytest.mark.parametrize("expect_new", [False, True], ids=["looked-for", "inserted-first"])
def test_concurrent_reports_of_one_host_are_applied_one_at_a_time(database, expect_new):
    """Eight reports of one host at once (an agent restarted, a retry crossing the
    original): each is applied whole, one after another, so nothing is inserted twice
    and the host ends as the last one applied says. ``expect_new``: as the API applies
    them when it found no row of the host (each tries to insert it first)."""

    def reports(base: int, extra: int) -> list[dict]:
        # num_accelerators stays 1: no row the reports would all update anyway.
        return [
            snapshot(
                HOST,
                [
                    with_deployable(fpga(ADDRESS, handles=base + n), num_accelerators=1),
                    with_deployable(fpga(SECOND, handles=extra), num_accelerators=1),
                ],
            )
            for n in range(1, 9)
        ]

    # A new host, then a known one whose every report adds handles.
    for phase, bodies in enumerate((reports(0, 1), reports(40, 2))):
        barrier = threading.Barrier(len(bodies))
        errors: list[Exception] = []

        def report(body: dict, barrier=barrier, errors=errors) -> None:
            barrier.wait()
            try:
                apply(database, body, expect_new=expect_new)
            except Exception as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=report, args=(b,)) for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == [], (phase, errors)

        (host,) = rows(database, "hosts")
        (last,) = [b for b in bodies if b["hash"] == host["snapshot_hash"]]
        expected = {
            d["pci_address"]: len(d["deployables"][0]["attach_handles"]) for d in last["devices"]
        }
        devices = rows(database, "devices")
        assert sorted(d["pci_address"] for d in devices) == [ADDRESS, SECOND], phase
        assert len(rows(database, "deployables")) == 2
        assert len(rows(database, "controlpath_ids")) == 2
        for device in devices:
            (dep,) = rows(database, "deployables", device_id=device["id"])
            handles = rows(database, "attach_handles", deployable_id=dep["id"])
            infos = [h["attach_info"] for h in handles]
            assert len(infos) == len(set(infos)) == expected[device["pci_address"]], phase
            keys = [a["key"] for a in rows(database, "attributes", deployable_id=dep["id"])]
            assert sorted(keys) == ["numa_node", "rc", "trait0"], phase
        assert_no_orphans(database)


def test_lost_device_goes_when_its_last_holders_are_released_at_once(api, database):
    """Two ARQs hold the two handles of a lost device and are deleted at the same
    moment: whichever commits last must see the other's release and delete the device."""
    for attempt in range(4):
        apply(database, snapshot(HOST, [fpga(ADDRESS, handles=2)]))
        (dev,) = rows(database, "devices")
        (dep,) = rows(database, "deployables")
        holders = [bind(api, dep["rp_uuid"])[0] for _ in range(2)]
        apply(database, snapshot(HOST, []))
        assert device_by_uuid(api, dev["uuid"])["presence"] == "lost"

        barrier = threading.Barrier(2)
        statuses: list[int] = []

        def release(arq_uuid: str, barrier=barrier, statuses=statuses) -> None:
            barrier.wait()
            statuses.append(api.delete(f"/v2/accelerator_requests/{arq_uuid}").status_code)

        threads = [threading.Thread(target=release, args=(u,)) for u in holders]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert statuses == [204, 204], attempt
        assert device_by_uuid(api, dev["uuid"]) is None, attempt
        assert {t: len(rows(database, t)) for t in TABLES} == dict.fromkeys(TABLES, 0)


def test_a_changed_report_costs_the_same_statements_whatever_the_devices(database):
    """A report that changes one device of a known host reads what the host's devices
    hold in a fixed number of statements (issue 16), not a few per device and deployable:
    a host of 2 devices and one of 8 cost the same."""
    from tests.db.test_unchanged_reports import statements

    counts = {}
    for count in (2, 8):
        host = f"{HOST}-{count}"
        addresses = [f"0000:{0x10 + i:02x}:00.0" for i in range(count)]
        devices = [fpga(a, handles=4) for a in addresses]
        apply(database, snapshot(host, devices), hostname=host)
        devices[0] = dataclasses.replace(devices[0], firmware_version="2.0")
        with statements(database) as seen:
            assert apply(database, snapshot(host, devices), hostname=host).updated == 1
        counts[count] = len([s for s in seen if not s.lstrip().upper().startswith("BEGIN")])
        (changed,) = rows(database, "devices", hostname=host, pci_address=addresses[0])
        assert changed["firmware_version"] == "2.0"
    # 13: the pending Placement sync that absorbs the change is written too (jobs.enqueue,
    # so that a conductor cannot take it before this commit: found on Galera, issue 23).
    assert counts[2] == counts[8] <= 13, counts
    assert len(rows(database, "attach_handles")) == 4 * (2 + 8)
    assert_no_orphans(database)
