"""Device labels (API 2.10, doc/devices.md "Labels"): an operator sets and removes them on
devices in bulk, all or none; they are shown on the devices, filter the list, survive the
agent's reports and are audited. On SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json

from tests.conftest import PERSONAS
from tests.helpers.devices import FIRST, HOST, SECOND, device, report

V2_10 = "2.10"
UNKNOWN = "5a1d0f3c-0000-4000-8000-00000000dead"


def _fault(response) -> tuple[str, str]:
    fault = json.loads(response.json["error_message"])
    return fault["code"], fault["faultstring"]


def _devices(api, query: str = "", version: str = V2_10) -> list[dict]:
    r = api.get(f"/v2/devices?hostname={HOST}{query}", version=version)
    assert r.status_code == 200, r.text
    return r.json["devices"]


def _two_devices(api) -> tuple[str, str]:
    report(api, HOST, [device(FIRST), device(SECOND)])
    found = {d["pci_address"]: d["uuid"] for d in _devices(api)}
    return found[FIRST], found[SECOND]


def _label(api, expect: int = 200, **body):
    r = api.post("/v2/device_labels", body, version=V2_10)
    assert r.status_code == expect, r.text
    return r


def _labels_of(api) -> dict[str, dict]:
    return {d["uuid"]: d["labels"] for d in _devices(api)}


def test_labels_are_set_and_removed_in_bulk_and_shown(api, database):
    first, second = _two_devices(api)
    assert _labels_of(api) == {first: {}, second: {}}

    r = _label(api, uuids=[second, first], set={"rack": "a1", "team.ml": "vision"})
    assert r.json == {
        "devices": [
            {
                "uuid": first,
                "hostname": HOST,
                "labels": {"rack": "a1", "team.ml": "vision"},
                "outcome": "changed",
            },
            {
                "uuid": second,
                "hostname": HOST,
                "labels": {"rack": "a1", "team.ml": "vision"},
                "outcome": "changed",
            },
        ]
    }
    shown = api.get(f"/v2/devices/{first}", version=V2_10).json
    assert shown["labels"] == {"rack": "a1", "team.ml": "vision"}
    # Below 2.10 the field is not there.
    assert "labels" not in api.get(f"/v2/devices/{first}", version="2.9").json

    # Set one, remove another, on one device; the same again changes nothing.
    body = {"uuids": [first], "set": {"rack": "b2"}, "unset": ["team.ml", "absent"]}
    assert _label(api, **body).json["devices"][0]["outcome"] == "changed"
    again = _label(api, **body).json["devices"][0]
    assert (again["labels"], again["outcome"]) == ({"rack": "b2"}, "unchanged")
    assert _labels_of(api) == {first: {"rack": "b2"}, second: {"rack": "a1", "team.ml": "vision"}}

    _label(api, uuids=[first], unset=["rack"])
    assert _labels_of(api)[first] == {}


def test_the_list_filters_by_label_byte_for_byte(api, database):
    first, second = _two_devices(api)
    odd = 'a"b,c%_}'  # JSON and LIKE's special characters
    _label(api, uuids=[first], set={"rack": "a1", "zone": odd})
    _label(api, uuids=[second], set={"rack": "A1", "zone": "z"})

    def matching(*selectors: str) -> set[str]:
        query = "".join(f"&label={s}" for s in selectors)
        return {d["uuid"] for d in _devices(api, query.replace("%", "%25").replace(",", "%2C"))}

    assert matching("rack=a1") == {first}
    assert matching("rack=A1") == {second}  # case counts, on MariaDB too
    assert matching(f"zone={odd}") == {first}
    assert matching("rack=a1", "zone=z") == set()  # every one must match
    assert matching("rack=A1", "zone=z") == {second}
    assert matching("zone=a") == set()

    r = api.get("/v2/devices?label=Rack", version=V2_10)
    assert r.status_code == 400, r.text
    assert _fault(r)[0] == "exosuit.query.label"
    assert "not key=value" in _fault(r)[1]


def test_invalid_labels_are_refused_and_nothing_changes(api, database):
    first, second = _two_devices(api)
    _label(api, uuids=[first], set={"rack": "a1"})
    refusals = [
        ({"set": {"Rack": "a1"}}, "label key 'Rack' is not 1-63 lower-case letters"),
        ({"set": {"-rack": "a1"}}, "label key '-rack'"),
        ({"set": {"rack": " a1"}}, "no blank at either end"),
        ({"set": {"rack": "x" * 64}}, "1-63 printable characters"),
        ({"set": {"rack": "a\x01"}}, "1-63 printable characters"),
        ({"unset": ["Rack"]}, "label key 'Rack'"),
        ({"set": {"rack": "b"}, "unset": ["rack"]}, "rack: both set and unset"),
        ({"set": {}}, "nothing to do"),
        (
            {"set": {f"k{i}": "v" for i in range(16)}},
            f"device {first} would have 17 labels; at most 16",
        ),
    ]
    for asked, reason in refusals:
        r = _label(api, 400, uuids=[second, first], **asked)
        code, text = _fault(r)
        assert code == "exosuit.device.labels_invalid", (asked, text)
        assert reason in text, (asked, text)
    assert _labels_of(api) == {first: {"rack": "a1"}, second: {}}


def test_an_unknown_device_is_named_and_nothing_changes(api, database):
    first, _ = _two_devices(api)
    r = _label(api, 404, uuids=[first, UNKNOWN], set={"rack": "a1"})
    assert _fault(r) == ("exosuit.device.not_found", f"Device {UNKNOWN} could not be found.")
    assert _labels_of(api)[first] == {}


def test_labels_survive_the_agent_reports_and_are_audited(api, database):
    first, _ = _two_devices(api)
    _label(api, uuids=[first], set={"rack": "a1"})
    _label(api, uuids=[first], set={"zone": "z"}, unset=["rack"])
    # A changed report (a device gone, the first one's driver changed) keeps the labels.
    report(api, HOST, [device(FIRST, driver="other")])
    (found,) = _devices(api)
    assert (found["uuid"], found["driver_name"], found["labels"]) == (first, "other", {"zone": "z"})

    r = api.get(f"/v2/audit_events?object_uuid={first}&action=label", version="2.9")
    assert r.status_code == 200, r.text
    changes = [(e["before"], e["after"], e["host"]) for e in r.json["audit_events"]]
    assert changes == [  # newest first
        ({"labels": {"rack": "a1"}}, {"labels": {"zone": "z"}}, HOST),
        ({"labels": {}}, {"labels": {"rack": "a1"}}, HOST),
    ]


def test_labels_are_admin_only_and_from_2_10(api, database):
    first, _ = _two_devices(api)
    r = api.post("/v2/device_labels", {"uuids": [first], "set": {"a": "b"}}, version="2.9")
    assert r.status_code == 404, r.text
    r = api.as_(PERSONAS["member"]).post(
        "/v2/device_labels", {"uuids": [first], "set": {"a": "b"}}, version=V2_10
    )
    assert r.status_code == 403, r.text
