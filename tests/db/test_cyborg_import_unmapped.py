"""Devices whose control-path id is not the JSON object of a PCI address.

Cyborg's in-tree drivers, its QAT driver included, write that object
(``pci_str_to_json``): they import as they are (tests/db/test_cyborg_import.py).
Out-of-tree drivers may have written something else:

* a bare PCI address (``0000:af:00.0``) is that same address: mapped, keeping the
  device's uuid and its deployables' ``rp_uuid`` (the next report matches it:
  test_import.py);
* a serial number says nothing of which PCI device it is, which is how Exosuit's
  agents know a device: it cannot be mapped. The report says why, and names the
  Placement providers Exosuit does not take over; while a server holds one of its
  handles, ``--apply`` refuses and writes nothing.
"""

from __future__ import annotations

import pytest

from tests.helpers.cyborg_import import TABLES, counts, everything, run, table_lines, url_of

pytestmark = pytest.mark.slow


def _serial_keyed(filled: dict) -> tuple[str, dict]:
    [device] = [
        c["device"] for c in filled["controlpath_ids"].values() if c["cpid_info"] == "SN-4F2A19"
    ]
    [deployable] = [d for d in filled["deployables"].values() if d["device"] == device]
    return device, deployable


def test_a_free_unmappable_device_is_left_out_and_its_provider_named(
    capsys, tmp_path, cyborg_source, sqlite_database
):
    filled = cyborg_source.filled
    device, deployable = _serial_keyed(filled)
    code, out, err = run(
        capsys, tmp_path, url_of(sqlite_database), "--from", cyborg_source.url, "--apply"
    )
    assert code == 0, err
    assert (
        f"cannot map devices {device}: its control-path id 'SN-4F2A19' is neither a JSON "
        "object of strings nor a PCI address (DDDD:BB:DD.F)" in out
    )
    assert (
        f"device {device}: deployable {deployable['name']} is left out; Exosuit does not "
        f"take its Placement provider {deployable['rp_uuid']} over" in out
    )
    assert "--apply refuses" not in out
    rows = everything(sqlite_database)
    assert device not in {r["uuid"] for r in rows["devices"]}
    assert deployable["rp_uuid"] not in {r["rp_uuid"] for r in rows["deployables"]}


def test_an_unmappable_device_a_server_holds_is_refused(
    capsys, tmp_path, cyborg_source_unmappable_held, database
):
    filled = cyborg_source_unmappable_held.filled
    device, deployable = _serial_keyed(filled)
    arq = filled["arqs"]["held"]
    instance = filled["instances"]["held"]
    handle = filled["arq_handles"][arq]
    url = url_of(database)
    # The dry run says what holds it and that --apply will refuse.
    code, out, err = run(capsys, tmp_path, url, "--from", cyborg_source_unmappable_held.url)
    assert code == 0, err
    assert f"cannot map devices {device}: its control-path id 'SN-4F2A19'" in out
    assert (
        f"device {device}: ARQ {arq} (Bound, instance {instance}) holds its attach handle "
        f"{handle}: --apply refuses while it does" in out
    )
    assert f"Placement provider {deployable['rp_uuid']}" in out
    assert table_lines(out)["device_profiles"] == ["5", "5", "0", "0"]
    # --apply refuses, and rolls back what it had written (the device profiles).
    before = everything(database)
    assert counts(database) == dict.fromkeys(TABLES, 0)
    code, out, err = run(
        capsys, tmp_path, url, "--from", cyborg_source_unmappable_held.url, "--apply"
    )
    assert code == 1
    assert "nothing written" in err
    assert f"ARQ {arq} (Bound, instance {instance}) holds attach handle {handle}" in err
    assert f"device {device} on compute-c" in err
    assert "Shelve those servers" in err
    assert everything(database) == before
