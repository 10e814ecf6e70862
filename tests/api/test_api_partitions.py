"""Partition layouts through the API (doc/devices.md, "Partitions"): an admin sets a
device's layout, the host's desired state lists it until its agent reports, a layout
that would remove a slice in use is refused (409), and the slices follow what the host
reports. On SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json

from tests.helpers.devices import desired
from tests.helpers.partitions import (
    HOST,
    V2_9,
    VGPU_TYPE,
    bind_vgpu,
    outcome,
    partitions,
    report_gpu,
    set_layout,
)


def _code(response_json: dict) -> str:
    return json.loads(response_json["error_message"])["code"]


def test_a_layout_is_desired_state_until_the_agent_reports_it(api):
    device = report_gpu(api, mdevs=2)
    before = partitions(api, device)
    assert (before["layout"], before["state"], before["generation"]) == (None, None, None)
    assert [s["type"] for s in before["slices"]] == [VGPU_TYPE, VGPU_TYPE]
    assert not any(s["in_use"] for s in before["slices"])

    set_to = set_layout(api, device, {"mdev": {VGPU_TYPE: 4}, "on_demand": True})
    assert set_to["layout"] == {"mdev": {VGPU_TYPE: 4}, "on_demand": True}
    assert set_to["state"] == "applying"
    state = desired(api, HOST)
    (item,) = state["partitions"]
    assert item["device"] == device
    assert item["layout"] == {"mdev": {VGPU_TYPE: 4}, "on_demand": True}
    assert item["generation"] == set_to["generation"] == state["generation"]
    assert item["controlpath_id"]["cpid_info"]["bus"] == "3b"

    # The same layout again changes nothing (idempotent: no new generation).
    again = set_layout(api, device, {"on_demand": True, "mdev": {VGPU_TYPE: 4}})
    assert again["generation"] == set_to["generation"]
    assert desired(api, HOST)["generation"] == state["generation"]

    assert outcome(api, device, generation=item["generation"], state="applied") == {
        "state": "applied"
    }
    # Again: the same outcome is recorded already.
    assert outcome(api, device, generation=item["generation"], state="applied") == {
        "state": "applied"
    }
    after = desired(api, HOST)
    assert after["partitions"] == [] and after["generation"] > state["generation"]
    shown = partitions(api, device)
    assert (shown["state"], shown["reason"]) == ("applied", None)

    # The mdevs the agent made appear with its next report, and are offered.
    report_gpu(api, mdevs=4)
    assert len(partitions(api, device)["slices"]) == 4


def test_a_failure_keeps_its_reason_and_the_layout_can_be_set_again(api):
    device = report_gpu(api)
    first = set_layout(api, device, {"mdev": {VGPU_TYPE: 40}})
    outcome(api, device, generation=first["generation"], state="failed", reason="too many")
    shown = partitions(api, device)
    assert (shown["state"], shown["reason"]) == ("failed", "too many")
    # A failed layout set again is applied again (a new generation).
    retry = set_layout(api, device, {"mdev": {VGPU_TYPE: 40}})
    assert retry["state"] == "applying" and retry["generation"] > first["generation"]


def test_a_late_outcome_for_an_older_layout_is_refused(api):
    device = report_gpu(api)
    first = set_layout(api, device, {"mdev": {VGPU_TYPE: 3}})
    second = set_layout(api, device, {"mdev": {VGPU_TYPE: 4}})
    r = api.put(
        f"/agent/v1/hosts/{HOST}/partitions/{device}",
        {"generation": first["generation"], "state": "applied"},
    )
    assert r.status_code == 409, r.text
    assert _code(r.json) == "exosuit.partition.superseded"
    assert partitions(api, device)["state"] == "applying"
    outcome(api, device, generation=second["generation"], state="applied")
    # Another host does not report for this device.
    r = api.put(
        f"/agent/v1/hosts/other-host/partitions/{device}",
        {"generation": second["generation"], "state": "applied"},
    )
    assert r.status_code == 404, r.text


def test_a_layout_that_removes_a_slice_in_use_is_refused(api):
    device = report_gpu(api, mdevs=2)
    bind_vgpu(api)
    shown = partitions(api, device)
    assert sum(s["in_use"] for s in shown["slices"]) == 1

    for layout in ({"mdev": {VGPU_TYPE: 0}}, {"mdev": {"nvidia-223": 2}}):
        r = api.put(f"/v2/devices/{device}/partitions", layout, version=V2_9)
        assert r.status_code == 409, r.text
        assert _code(r.json) == "exosuit.partition.in_use"
        assert f"1 slice(s) of type {VGPU_TYPE} in use" in r.text
    assert partitions(api, device)["layout"] is None
    assert desired(api, HOST)["partitions"] == []

    # Keeping the slice in use (one of its type, or more) is allowed.
    assert set_layout(api, device, {"mdev": {VGPU_TYPE: 1}})["state"] == "applying"


def test_bad_layouts_are_400_and_unknown_devices_404(api):
    device = report_gpu(api)
    for layout in (
        {},
        {"mdev": {VGPU_TYPE: 1}, "vfs": 2},
        {"mdev": {VGPU_TYPE: -1}},
        {"mdev": {"../x": 1}},
        {"vfs": "8"},
        {"mig": {"1g.5gb": 1}, "colour": "red"},
        [],
    ):
        r = api.put(f"/v2/devices/{device}/partitions", layout, version=V2_9)
        assert r.status_code == 400, (layout, r.text)
    for path in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        r = api.get(f"/v2/devices/{path}/partitions", version=V2_9)
        assert r.status_code == 404, r.text
        r = api.put(f"/v2/devices/{path}/partitions", {"vfs": 2}, version=V2_9)
        assert r.status_code == 404, r.text
    r = api.put(f"/agent/v1/hosts/{HOST}/partitions/{device}", {"generation": 1, "state": "done"})
    assert r.status_code == 400, r.text
    # Below 2.9 the path is not there.
    r = api.get(f"/v2/devices/{device}/partitions", version="2.8")
    assert r.status_code == 404, r.text
