"""``exosuit device set|unset --label`` and ``exosuit device delete`` (API 2.10,
doc/devices.md "Labels" and "Deleting a lost device") against a real ``exosuit serve``:
labels set and removed on several devices at once, shown by ``device list`` and ``device
show`` and selected with ``--label``; refusals printed whole, with exit status 1."""

from __future__ import annotations

import uuid

V = "2.10"


def _two_devices(api) -> list[str]:
    devices = api.list("/v2/devices", "devices", version=V)
    assert len(devices) >= 2
    return sorted(d["uuid"] for d in devices)[:2]


def test_labels_are_set_shown_selected_and_removed(cli, api):
    first, second = _two_devices(api)
    rows = cli.json("device", "set", "--label", "rack=a1", "--label", "zone=z", first, second)
    assert sorted(r["uuid"] for r in rows) == [first, second]
    for row in rows:
        assert (row["labels"], row["outcome"]) == ({"rack": "a1", "zone": "z"}, "changed")
        assert row["hostname"] == api.get(f"/v2/devices/{row['uuid']}")["hostname"]

    shown = cli.json("device", "show", first)
    assert shown["labels"] == {"rack": "a1", "zone": "z"}
    listed = {d["uuid"]: d["labels"] for d in cli.json("device", "list", "--long")}
    assert listed[first] == listed[second] == {"rack": "a1", "zone": "z"}
    # The table shows them as key=value (and the device by its short id).
    table = cli.run("device", "list", "-c", "uuid", "-c", "labels").stdout
    assert f"| {first[:8]} | rack=a1, zone=z |" in table

    (row,) = cli.json("device", "unset", "--label", "zone", second)
    assert (row["uuid"], row["labels"], row["outcome"]) == (second, {"rack": "a1"}, "changed")
    selected = cli.json("device", "list", "--label", "zone=z", "-c", "uuid")
    assert selected == [{"uuid": first}]
    both = cli.json("device", "list", "--label", "rack=a1", "--label", "zone=z", "-c", "uuid")
    assert both == [{"uuid": first}]

    cli.run("device", "unset", "--label", "rack", "--label", "zone", first, second)
    assert cli.json("device", "show", first)["labels"] == {}


def test_refused_labels_are_printed_whole(cli, api):
    first, _ = _two_devices(api)
    bad = cli.run("device", "set", "--label", "Rack=a1", first, check=False)
    assert bad.returncode == 1
    assert "exosuit.device.labels_invalid" in bad.stderr
    assert "label key 'Rack' is not 1-63 lower-case letters, digits" in bad.stderr
    unknown = str(uuid.uuid4())
    missing = cli.run("device", "set", "--label", "rack=a1", first, unknown, check=False)
    assert missing.returncode == 1
    assert f"Device {unknown} could not be found." in missing.stderr
    assert cli.json("device", "show", first)["labels"] == {}
    malformed = cli.run("device", "set", "--label", "rack", first, check=False)
    assert malformed.returncode == 1 and "--label rack: not KEY=VALUE" in malformed.stderr
    usage = cli.run("device", "set", first, check=False)
    assert usage.returncode == 2 and "--label" in usage.stderr


def test_delete_refuses_a_device_its_host_reports(cli, api):
    first, _ = _two_devices(api)
    refused = cli.run("device", "delete", first, check=False)
    assert refused.returncode == 1
    assert "exosuit.device.not_lost" in refused.stderr
    assert f"Device {first} is present: its host's agent reports it" in refused.stderr
    assert "a device is deleted by the first report that no longer has it" in refused.stderr
    assert cli.json("device", "show", first)["uuid"] == first
    unknown = str(uuid.uuid4())
    missing = cli.run("device", "delete", unknown, check=False)
    assert missing.returncode == 1 and f"Device {unknown} could not be found." in missing.stderr
    old = cli.run("--os-accelerator-api-version", "2.9", "device", "delete", first, check=False)
    assert old.returncode == 1 and "2.10" in old.stderr
