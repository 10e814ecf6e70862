"""``exosuit-manage import-cyborg`` on a database Cyborg made (tests/db/conftest.py).

The source holds what fill_cyborg.py's ``cut-over`` scenario wrote through Cyborg's
objects: on compute-a a fake FPGA (16 TEST_PCI handles, a ``bitstream_id``) and an
SR-IOV NIC (two VF deployables with ``physical_network``); on compute-b a fake FPGA, a
QAT from Cyborg's own QAT driver (two VFs), a QAT whose control-path id is a bare PCI
address and an NPU keyed by a serial number; five device profiles; ARQs in every state
Cyborg's database holds. Then the hosts' agents report what Exosuit's drivers find
there, through the agent API: nothing is duplicated and no UUID moves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from exosuit.api.deploy import loadapp
from exosuit.db import models
from exosuit.drivers.base import pci_cpid
from tests.conftest import PERSONAS, ApiClient, make_test_conf
from tests.helpers.cyborg_import import (
    HOST_DEVICES,
    TABLES,
    by_uuid,
    counts,
    qat,
    report,
    run,
    table_lines,
    url_of,
)
from tests.helpers.inventory import snapshot

pytestmark = pytest.mark.slow


def _device_of(filled: dict, kind: str) -> str:
    """The uuid of the source device: ``npu`` (serial-keyed), ``legacy`` (bare address),
    ``qat`` (Cyborg's QAT driver)."""
    by_cpid = {c["device"]: c["cpid_info"] for c in filled["controlpath_ids"].values()}
    wanted = {"npu": lambda i: i == "SN-4F2A19", "legacy": lambda i: i == "0000:af:00.0"}
    wanted["qat"] = lambda i: '"5e"' in i
    [found] = [d for d, info in by_cpid.items() if wanted[kind](info)]
    return found


def test_dry_run_reports_and_writes_nothing(capsys, tmp_path, cyborg_source, sqlite_database):
    filled = cyborg_source.filled
    code, out, err = run(capsys, tmp_path, url_of(sqlite_database), "--from", cyborg_source.url)
    assert code == 0, err
    assert "dry run" in out and "--apply" in out
    lines = table_lines(out)
    # Cyborg table: rows, new, present, skipped.
    assert lines["devices"] == ["6", "5", "0", "1"]
    assert lines["controlpath_ids"] == ["6", "5", "0", "0"]
    assert lines["deployables"] == ["8", "7", "0", "1"]
    assert lines["attributes"] == ["14", "13", "0", "1"]
    assert lines["attach_handles"] == ["38", "37", "0", "1"]
    assert lines["device_profiles"] == ["5", "5", "0", "0"]
    assert lines["extended_accelerator_requests"] == ["11", "11", "0", "0"]
    npu = _device_of(filled, "npu")
    assert (
        f"cannot map devices {npu}: its control-path id 'SN-4F2A19' is neither a JSON "
        "object of strings nor a PCI address" in out
    )
    legacy = _device_of(filled, "legacy")
    assert (
        f"device {legacy} (compute-b): its control-path id '0000:af:00.0' is a bare PCI "
        'address: imported as {"bus":"af","device":"00","domain":"0000","function":"0"}' in out
    )
    assert "hosts: compute-a, compute-b" in out
    assert counts(sqlite_database) == dict.fromkeys(TABLES, 0)


def test_apply_keeps_every_uuid(capsys, tmp_path, cyborg_source, database):
    filled = cyborg_source.filled
    code, out, err = run(capsys, tmp_path, url_of(database), "--from", cyborg_source.url, "--apply")
    assert code == 0, err
    assert "in one transaction" in out
    imported = {name: by_uuid(database, name) for name in TABLES}
    npu = _device_of(filled, "npu")
    assert set(imported["devices"]) == set(filled["devices"]) - {npu}
    assert {r["name"]: u for u, r in imported["device_profiles"].items()} == filled[
        "device_profiles"
    ]
    kept = {u: d for u, d in filled["deployables"].items() if d["device"] != npu}
    assert {u: (r["name"], r["rp_uuid"]) for u, r in imported["deployables"].items()} == {
        u: (d["name"], d["rp_uuid"]) for u, d in kept.items()
    }
    handles = imported["attach_handles"]
    # A handle a failed bind had taken is free (tests/db/test_cyborg_import_arq_states.py).
    released = filled["arq_handles"][filled["arqs"]["bind_started"]]
    for uuid, handle in filled["attach_handles"].items():
        if handle["deployable"] not in kept:
            assert uuid not in handles
            continue
        assert handles[uuid]["in_use"] == (handle["in_use"] and uuid != released)
        assert json.loads(handles[uuid]["attach_info"]) == json.loads(handle["attach_info"])
    arqs = imported["accelerator_requests"]
    states = {
        u: ("BindFailed" if s == "BindStarted" else s) for u, s in filled["arq_states"].items()
    }
    assert {u: r["state"] for u, r in arqs.items()} == states
    handle_ids = {r["id"]: u for u, r in handles.items()}
    assert {
        u: handle_ids[r["attach_handle_id"]] for u, r in arqs.items() if r["attach_handle_id"]
    } == {a: h for a, h in filled["arq_handles"].items() if h != released}
    # Exosuit's API answers for them as Cyborg's did: the ARQ of the SmartNIC port.
    api = ApiClient(loadapp(make_test_conf(), database)).as_(PERSONAS["admin"])
    nic = api.get(f"/v2/accelerator_requests/{filled['arqs']['nic']}").json
    assert nic["state"] == "Bound"
    assert nic["instance_uuid"] == filled["instances"]["nic"]
    assert nic["attach_handle_type"] == "PCI"
    assert nic["attach_handle_info"] == {
        "domain": "0000",
        "bus": "3b",
        "device": "02",
        "function": "0",
        "physical_network": "physnet1",
    }
    with database.engine.connect() as conn:
        hosts = set(conn.execute(sa.select(models.hosts.c.hostname)).scalars())
        syncs = conn.execute(
            sa.select(models.jobs.c.key).where(models.jobs.c.kind == "placement_sync")
        ).scalars()
        assert hosts == {"compute-a", "compute-b"}
        assert sorted(syncs) == ["placement-sync:compute-a", "placement-sync:compute-b"]


def test_apply_keeps_fields_attributes_and_control_paths(capsys, tmp_path, cyborg_source, database):
    """bitstream_id, driver names, attribute and control-path UUIDs survive the import."""
    filled = cyborg_source.filled
    assert run(capsys, tmp_path, url_of(database), "--from", cyborg_source.url, "--apply")[0] == 0
    npu = _device_of(filled, "npu")
    devices = by_uuid(database, "devices")
    deployables = by_uuid(database, "deployables")
    dep_uuids = {r["id"]: u for u, r in deployables.items()}
    dev_uuids = {r["id"]: u for u, r in devices.items()}
    kept = {u: d for u, d in filled["deployables"].items() if d["device"] != npu}
    # Each deployable: its driver name and bitstream_id, under the same device.
    assert {
        u: (r["driver_name"], r["bitstream_id"], dev_uuids[r["device_id"]])
        for u, r in deployables.items()
    } == {u: (d["driver_name"], d["bitstream_id"], d["device"]) for u, d in kept.items()}
    [programmed] = [u for u, d in kept.items() if d["bitstream_id"]]
    assert deployables[programmed]["bitstream_id"] == filled["bitstream_id"]
    assert kept[programmed]["name"] == "compute-a_FakeDevice"
    # A device's driver name is its deployables' (Cyborg keeps it there only).
    for uuid, device in devices.items():
        drivers = {d["driver_name"] for d in kept.values() if d["device"] == uuid}
        assert {device["driver_name"]} == drivers
    # Attributes: same uuid, deployable, key and value.
    attributes = by_uuid(database, "attributes")
    assert {
        u: (dep_uuids[r["deployable_id"]], r["key"], r["value"], r["source"])
        for u, r in attributes.items()
    } == {
        u: (a["deployable"], a["key"], a["value"], "agent")
        for u, a in filled["attributes"].items()
        if a["deployable"] in kept
    }
    # Control-path ids: same uuid and device; the info as the agent reports it, the
    # bare address of the out-of-tree driver as the JSON of its PCI address.
    legacy = _device_of(filled, "legacy")
    cpids = by_uuid(database, "controlpath_ids")
    expected = {}
    for uuid, cpid in filled["controlpath_ids"].items():
        if cpid["device"] == npu:
            continue
        info = pci_cpid(cpid["cpid_info"]) if cpid["device"] == legacy else cpid["cpid_info"]
        expected[uuid] = (
            cpid["device"],
            "PCI",
            info if isinstance(info, dict) else json.loads(info),
        )
    assert {
        u: (dev_uuids[r["device_id"]], r["cpid_type"], json.loads(r["cpid_info"]))
        for u, r in cpids.items()
    } == expected
    # Each attach handle points at its device's control-path id.
    cpid_of_device = {r["device_id"]: r["id"] for r in cpids.values()}
    for handle in by_uuid(database, "attach_handles").values():
        device_id = deployables[dep_uuids[handle["deployable_id"]]]["device_id"]
        assert handle["cpid_id"] == cpid_of_device[device_id]
    # Exosuit's API shows them as Cyborg's did.
    api = ApiClient(loadapp(make_test_conf(), database)).as_(PERSONAS["admin"])
    shown = api.get(f"/v2/deployables/{programmed}").json
    assert (shown["bitstream_id"], shown["driver_name"]) == (filled["bitstream_id"], "fake")


def test_running_it_twice_is_harmless(capsys, tmp_path, cyborg_source, sqlite_database):
    url = url_of(sqlite_database)
    assert run(capsys, tmp_path, url, "--from", cyborg_source.url, "--apply")[0] == 0
    before = {name: by_uuid(sqlite_database, name) for name in TABLES}
    code, out, err = run(capsys, tmp_path, url, "--from", cyborg_source.url, "--apply")
    assert code == 0, err
    lines = table_lines(out)
    assert lines["devices"] == ["6", "0", "5", "1"]
    assert lines["extended_accelerator_requests"] == ["11", "0", "11", "0"]
    assert {name: by_uuid(sqlite_database, name) for name in TABLES} == before


def test_a_target_that_holds_other_rows_is_refused_unless_merge(
    capsys, tmp_path, cyborg_source, sqlite_database
):
    api = ApiClient(loadapp(make_test_conf(), sqlite_database))
    body = snapshot("compute-z", [qat("compute-z")])
    assert (
        api.as_(PERSONAS["service"]).put("/agent/v1/hosts/compute-z/inventory", body).status_code
        == 200
    )
    url = url_of(sqlite_database)
    before = counts(sqlite_database)
    code, out, err = run(capsys, tmp_path, url, "--from", cyborg_source.url, "--apply")
    assert code == 1
    assert "nothing written" in err and "1 devices" in err and "--merge" in err
    assert counts(sqlite_database) == before
    # A dry run says so too, and still reports.
    code, out, err = run(capsys, tmp_path, url, "--from", cyborg_source.url)
    assert code == 0 and "rows not from this source: 1 devices" in out
    code, out, err = run(capsys, tmp_path, url, "--from", cyborg_source.url, "--apply", "--merge")
    assert code == 0, err
    assert counts(sqlite_database)["devices"] == before["devices"] + 5


def test_an_unreadable_source_is_refused(capsys, tmp_path, sqlite_database):
    empty = f"sqlite:///{tmp_path}/nothing.sqlite"
    code, out, err = run(capsys, tmp_path, url_of(sqlite_database), "--from", empty)
    assert code == 2 and "is not a Cyborg database" in err


def test_the_next_agent_reports_match_the_imported_rows(capsys, tmp_path, cyborg_source, database):
    filled = cyborg_source.filled
    assert run(capsys, tmp_path, url_of(database), "--from", cyborg_source.url, "--apply")[0] == 0
    before = {name: by_uuid(database, name) for name in TABLES}
    # As deployed: new devices start inactive; the imported ones were offered by Cyborg.
    conf = make_test_conf(**{"inventory.new_device_activation": "inactive"})
    api = ApiClient(loadapp(conf, database))
    admin = api.as_(PERSONAS["admin"])
    for _ in range(2):  # the first report applies the difference; the second, nothing
        for host, devices in HOST_DEVICES.items():
            report(api, host, devices())
    after = {name: by_uuid(database, name) for name in TABLES}
    # No device, deployable or attach handle twice. The QAT of Cyborg's driver and the
    # one keyed by a bare address are matched; only the NPU Cyborg keyed by a serial
    # number is new (the import left it out).
    [new_device] = set(after["devices"]) - set(before["devices"])
    assert after["devices"][new_device]["hostname"] == "compute-b"
    assert after["devices"][new_device]["pci_address"] == "0000:d8:00.0"
    assert new_device != _device_of(filled, "npu")
    assert set(before["devices"]) <= set(after["devices"])
    # Imported devices are ready (Cyborg offered every device it found) and stay so;
    # the one the import left out is new, and starts inactive.
    assert {d["activation"] for d in before["devices"].values()} == {"ready"}
    assert {
        u: d["activation"] for u, d in after["devices"].items() if u not in before["devices"]
    } == {new_device: "inactive"}
    assert all(after["devices"][u]["activation"] == "ready" for u in before["devices"])
    for kind in ("qat", "legacy"):
        assert _device_of(filled, kind) in after["devices"]
    assert len(after["deployables"]) == len(before["deployables"]) + 1
    for uuid, deployable in before["deployables"].items():
        assert after["deployables"][uuid]["rp_uuid"] == deployable["rp_uuid"]
        assert after["deployables"][uuid]["device_id"] == deployable["device_id"]
    # The fake FPGAs' deployables took the names Exosuit's driver gives them.
    names = {d["name"] for d in after["deployables"].values()}
    assert {"compute-a_0000:0c:00.0", "compute-b_0000:0c:00.0"} <= names
    assert not {n for n in names if n.endswith("_FakeDevice")}
    assert set(before["attach_handles"]) <= set(after["attach_handles"])
    assert len(after["attach_handles"]) == len(before["attach_handles"]) + 1
    for uuid, handle in before["attach_handles"].items():
        assert after["attach_handles"][uuid]["in_use"] == handle["in_use"]
    # Bound stays Bound, holding its attach handle, as Nova last read it.
    for name in ("bound", "two-0", "two-1", "nic", "qat"):
        arq = admin.get(f"/v2/accelerator_requests/{filled['arqs'][name]}").json
        assert arq["state"] == "Bound"
        assert arq["attach_handle_uuid"] == filled["arq_handles"][arq["uuid"]]
    devices = admin.get("/v2/devices").json["devices"]
    assert len(devices) == 6
    assert {d["hostname"] for d in devices} == {"compute-a", "compute-b"}


def test_the_console_script(tmp_path, cyborg_source, sqlite_database):
    """The installed ``exosuit-manage`` (as an operator runs it)."""
    conf = tmp_path / "exosuit.conf"
    conf.write_text(f"[database]\nconnection = {url_of(sqlite_database)}\n")
    script = Path(sys.executable).with_name("exosuit-manage")
    result = subprocess.run(
        [str(script), "import-cyborg", "--config-file", str(conf), "--from", cyborg_source.url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "would import (dry run: nothing written)" in result.stdout
