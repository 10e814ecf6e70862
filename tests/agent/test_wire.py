"""The inventory wire of issue 11 against the real API, on every database: services on
devices and the drivers' report (hashed), observed_generation and usage (not hashed, in
unchanged reports too), and what the schema refuses."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json

import pytest

from exosuit import schemas
from exosuit.agent.plugins import config_digest
from exosuit.agent.snapshot import discover, make_snapshot
from exosuit.drivers.base import Service
from tests.helpers.inventory import fpga

HOST = "wire-host"
URL = f"/agent/v1/hosts/{HOST}/inventory"


class _One:
    name = "one"

    def __init__(self, *devices):
        self.devices = list(devices)

    def discover(self):
        return list(self.devices)


DRIVERS = [
    {
        "name": "one",
        "version": "1.2.3",
        "enabled": True,
        "config_digest": config_digest({"count": 1}),
        "found": 1,
        "error": None,
    },
    {
        "name": "pci",
        "version": "0.1.0",
        "enabled": False,
        "config_digest": None,
        "found": 0,
        "error": None,
    },
]


def _snapshot() -> dict:
    device = dataclasses.replace(
        fpga("0000:0c:00.0"),
        services=(Service("fpga_function", "f00d", True, {"region": "0"}),),
    )
    found = discover([_One(device)])
    snapshot = make_snapshot(HOST, found, copy.deepcopy(DRIVERS))
    identity = schemas.device_identity(snapshot["devices"][0]["controlpath_id"])
    snapshot["observed_generation"] = 7
    snapshot["usage"] = {identity: {"utilization_percent": 12.5, "memory_used_bytes": 1024}}
    return snapshot


def test_a_snapshot_with_services_drivers_usage_and_observed_generation_is_applied(api):
    snapshot = _snapshot()
    response = api.put(URL, snapshot)
    assert response.status_code == 200, response.text
    assert response.json["changed"] is True
    assert response.json["hash"] == snapshot["hash"]
    devices = api.get("/v2/devices").json["devices"]
    assert [d["hostname"] for d in devices] == [HOST]
    # Unchanged, with other live figures and a newer generation: only the hash and those.
    again = {
        "schema_version": 1,
        "hostname": HOST,
        "hash": snapshot["hash"],
        "observed_generation": 8,
        "usage": {next(iter(snapshot["usage"])): {"utilization_percent": 99.0}},
    }
    response = api.put(URL, again)
    assert response.status_code == 200, response.text
    assert response.json["changed"] is False
    # The whole snapshot with other usage is the same inventory: nothing changes.
    snapshot["usage"] = {}
    assert api.put(URL, snapshot).json["changed"] is False


def test_the_drivers_report_is_hashed_and_a_bare_inventory_hashes_as_before(api):
    snapshot = _snapshot()
    bare = {"devices": snapshot["devices"], "driver_errors": snapshot["driver_errors"]}
    with_drivers = {**bare, "drivers": DRIVERS}
    assert snapshot["hash"] == _sha(with_drivers)
    assert schemas.snapshot_hash(bare["devices"], bare["driver_errors"]) == _sha(bare)
    # A report whose drivers do not match its hash is refused, nothing written.
    tampered = json.loads(json.dumps(snapshot))
    tampered["drivers"][1]["enabled"] = True
    response = api.put(URL, tampered)
    assert response.status_code == 400
    assert "does not match its content" in response.text
    assert api.get("/v2/devices").json["devices"] == []
    # The same devices without the drivers' report: the old hash, accepted.
    old = {k: v for k, v in snapshot.items() if k not in ("drivers", "usage")}
    old["hash"] = _sha(bare)
    assert api.put(URL, old).status_code == 200


def _sha(content: dict) -> str:
    return "sha256:" + hashlib.sha256(schemas.canonical_json(content).encode()).hexdigest()


@pytest.mark.parametrize(
    ("change", "where"),
    [
        pytest.param(
            lambda s: s["devices"][0]["services"][0].update(kind="FPGA"),
            "devices/0/services/0/kind",
            id="service-kind",
        ),
        pytest.param(
            lambda s: s["devices"][0]["services"][0].pop("enabled"),
            "devices/0/services/0",
            id="service-without-enabled",
        ),
        pytest.param(
            lambda s: s["devices"][0]["services"][0]["details"].update(vfs=4),
            "devices/0/services/0/details/vfs",
            id="service-detail-not-a-string",
        ),
        pytest.param(lambda s: s["drivers"][0].update(found=5000), "drivers/0/found", id="found"),
        pytest.param(lambda s: s["drivers"][0].pop("enabled"), "drivers/0", id="driver-enabled"),
        pytest.param(
            lambda s: s.update(observed_generation=-1), "observed_generation", id="generation"
        ),
        pytest.param(
            lambda s: next(iter(s["usage"].values())).update({"Bad-Name": 1}),
            "usage/",
            id="figure-name",
        ),
        pytest.param(
            lambda s: next(iter(s["usage"].values())).update(utilization_percent="high"),
            "usage/",
            id="figure-not-a-number",
        ),
        pytest.param(
            lambda s: next(iter(s["usage"].values())).update(errors_total=float("inf")),
            None,  # refused before the schema: Infinity is not JSON (bd7ee74)
            id="figure-infinite",
        ),
    ],
)
def test_the_schema_refuses_what_the_wire_does_not_carry(sqlite_api, change, where):
    snapshot = _snapshot()
    change(snapshot)
    snapshot["hash"] = schemas.snapshot_hash(
        snapshot["devices"], snapshot["driver_errors"], snapshot["drivers"]
    )
    # json.dumps writes an infinity as Infinity, which the API's parser refuses.
    response = sqlite_api.put(URL, snapshot)
    assert response.status_code == 400, response.text
    if where is None:
        assert "exosuit.body.json" in response.text
        assert "Infinity is not a JSON number" in response.text
    else:
        assert f"Invalid request body at {where}" in response.text
    assert sqlite_api.get("/v2/devices").json["devices"] == []
