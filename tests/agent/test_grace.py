"""The removal grace as a pure function: what is sent, what is remembered."""

from __future__ import annotations

import copy
import time

import pytest

from exosuit import schemas
from exosuit.agent.grace import apply_removal_grace
from tests.helpers.inventory import fpga, snapshot

NOW = 1_000_000.0
GRACE = 120.0
A, B, C, D = "0000:0a:00.0", "0000:0b:00.0", "0000:0c:00.0", "0000:0d:00.0"
# Every device as a discovery describes it.
DEVICES = {d["pci_address"]: d for d in snapshot("h", [fpga(a) for a in (A, B, C, D)])["devices"]}


def _identity(address: str) -> str:
    return schemas.device_identity(DEVICES[address]["controlpath_id"])


def _iso(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - seconds_ago))


CASES = [
    # (id, remembered: address → seconds since last seen, found, grace,
    #  sent: address → missing_since or None, remembered after: address → seconds ago)
    ("first-sight", {}, [A], GRACE, {A: None}, {A: 0}),
    ("seen-again", {A: 60}, [A], GRACE, {A: None}, {A: 0}),
    ("missing-within-grace", {A: 60, B: 60}, [A], GRACE, {A: None, B: _iso(60)}, {A: 0, B: 60}),
    (
        "missing-just-within-grace",
        {B: 119.5},
        [A],
        GRACE,
        {A: None, B: _iso(119.5)},
        {A: 0, B: 119.5},
    ),
    ("missing-for-exactly-the-grace", {A: 60, B: 120}, [A], GRACE, {A: None}, {A: 0}),
    ("missing-past-grace", {A: 60, B: 500}, [A], GRACE, {A: None}, {A: 0}),
    ("coming-back", {A: 30, B: 90}, [A, B], GRACE, {A: None, B: None}, {A: 0, B: 0}),
    (
        "several-at-once",
        {A: 10, B: 119, C: 121, D: 3600},
        [],
        GRACE,
        {A: _iso(10), B: _iso(119)},
        {A: 10, B: 119},
    ),
    (
        "kept-ones-sorted-among-found",
        {A: 5, C: 5},
        [B, D],
        GRACE,
        {A: _iso(5), B: None, C: _iso(5), D: None},
        {A: 5, B: 0, C: 5, D: 0},
    ),
    ("no-grace-drops-at-once", {A: 0.001, B: 0.001}, [A], 0.0, {A: None}, {A: 0}),
    ("nothing-at-all", {}, [], GRACE, {}, {}),
]


@pytest.mark.parametrize(
    ("remembered", "found", "grace", "sent", "remembered_after"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_removal_grace(remembered, found, grace, sent, remembered_after):
    discovery = snapshot("h", [fpga(a) for a in found])
    memory = {
        _identity(a): {"last_seen": NOW - ago, "device": DEVICES[a]}
        for a, ago in remembered.items()
    }
    before = copy.deepcopy((discovery, memory))

    result, new_memory = apply_removal_grace(discovery, memory, NOW, grace)

    assert (discovery, memory) == before  # inputs untouched
    assert {d["pci_address"]: d.get("missing_since") for d in result["devices"]} == sent
    identities = [schemas.device_identity(d["controlpath_id"]) for d in result["devices"]]
    assert identities == sorted(identities)
    assert result["hash"] == schemas.snapshot_hash(result["devices"], result["driver_errors"])
    if all(missing is None for missing in sent.values()):
        assert result == discovery  # nothing kept: exactly the discovery, hash included
    else:
        assert result["hash"] != discovery["hash"]
        assert {k: v for k, v in result.items() if k not in ("devices", "hash")} == {
            k: v for k, v in discovery.items() if k not in ("devices", "hash")
        }
    assert {identity: NOW - entry["last_seen"] for identity, entry in new_memory.items()} == {
        _identity(a): ago for a, ago in remembered_after.items()
    }
    for identity, entry in new_memory.items():
        # What is remembered is the device as discovered, never its missing_since copy.
        assert entry["device"] == DEVICES[entry["device"]["pci_address"]]
        assert schemas.device_identity(entry["device"]["controlpath_id"]) == identity


def test_a_kept_device_is_sent_as_last_discovered_plus_missing_since():
    memory = {_identity(B): {"last_seen": NOW - 30, "device": DEVICES[B]}}
    result, _ = apply_removal_grace(snapshot("h", [fpga(A)]), memory, NOW, GRACE)
    (kept,) = [d for d in result["devices"] if d["pci_address"] == B]
    assert kept == {**DEVICES[B], "missing_since": _iso(30)}
    assert list(kept)[-1] == "missing_since"


def test_the_grace_chains_from_one_discovery_to_the_next():
    """Fed its own output, a device missing at every discovery lasts the grace, no more."""
    memory = apply_removal_grace(snapshot("h", [fpga(A), fpga(B)]), {}, NOW, GRACE).remembered
    sent_b = []
    for minute in range(1, 5):
        result, memory = apply_removal_grace(
            snapshot("h", [fpga(A)]), memory, NOW + 60 * minute, GRACE
        )
        sent_b.append(any(d["pci_address"] == B for d in result["devices"]))
    assert sent_b == [True, False, False, False]  # missing 60 s: kept; 120 s: dropped


def test_a_device_of_a_driver_disabled_on_purpose_has_no_grace():
    """The driver that found each device is remembered; when it is disabled on purpose
    its devices go at once, while a device of a driver that merely failed is kept."""
    found = snapshot("h", [fpga(A), fpga(B), fpga(C)])
    by = {_identity(A): "alpha", _identity(B): "beta", _identity(C): "gamma"}
    memory = apply_removal_grace(found, {}, NOW, GRACE, found_by=by).remembered
    assert {i: e.get("found_by") for i, e in memory.items()} == by
    # beta disabled by the operator, gamma failing: neither finds its device any more.
    result, memory = apply_removal_grace(
        snapshot("h", [fpga(A)]), memory, NOW + 10, GRACE, found_by=by, no_grace={"beta"}
    )
    assert {d["pci_address"]: d.get("missing_since") for d in result["devices"]} == {
        A: None,
        C: _iso(0),
    }
    assert set(memory) == {_identity(A), _identity(C)}


def test_the_hash_of_a_kept_device_includes_the_drivers_report():
    drivers = [{"name": "static", "version": None, "enabled": True, "found": 1}]
    found = {**snapshot("h", [fpga(A)]), "drivers": drivers}
    found["hash"] = schemas.snapshot_hash(found["devices"], found["driver_errors"], drivers)
    memory = {_identity(B): {"last_seen": NOW - 30, "device": DEVICES[B]}}
    result, _ = apply_removal_grace(found, memory, NOW, GRACE)
    assert result["drivers"] == drivers
    assert result["hash"] == schemas.snapshot_hash(
        result["devices"], result["driver_errors"], drivers
    )
    assert result["hash"] != schemas.snapshot_hash(result["devices"], result["driver_errors"])
