"""Drivers as managed objects and discover now (doc/devices.md): an operator's wish is
each host's desired state from a new generation; the agent's report of that generation
says it applied it (drivers) and brought its new inventory (discoveries). Uninstalling a
driver is refused while one of its devices is held, and makes the others inactive.
Through the API, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json

from tests.helpers.devices import (
    FIRST,
    HOST,
    OTHER,
    SECOND,
    V2_7,
    activate,
    bind,
    body,
    desired,
    device,
    drivers,
    hash_only,
    outcome,
    report,
    rp_uuid,
    the_device,
    unbind,
)


def _post(api, path: str, payload: dict, expect: int = 202) -> dict:
    r = api.post(path, payload, version=V2_7)
    assert r.status_code == expect, r.text
    return r.json


def _drivers(api, query: str = "") -> list[dict]:
    r = api.get(f"/v2/drivers{query}", version=V2_7)
    assert r.status_code == 200, r.text
    return r.json["drivers"]


def _code(response) -> str:
    return json.loads(response.json["error_message"])["code"]


def test_install_update_uninstall_are_each_hosts_desired_state(api):
    report(api, HOST, [device()], drivers=drivers("pci"))
    report(api, OTHER)
    before = desired(api, OTHER)["generation"]

    answer = _post(api, "/v2/drivers/pci/install", {"hostnames": [HOST], "config": {"x": "1"}})
    generation = answer["hosts"][0]["generation"]
    assert answer == {
        "driver": "pci",
        "action": "install",
        "all_hosts": False,
        "hosts": [{"hostname": HOST, "generation": generation}],
        "deactivated": [],
    }
    state = desired(api)
    assert state["generation"] == generation
    assert state["drivers"] == {"pci": {"enabled": True, "config": {"x": "1"}}}
    assert desired(api, OTHER) == {
        "generation": before,
        "programs": [],
        "discovery": None,
        "drivers": {},
        "activations": [],
        "partitions": [],
        "slices": [],
        "containers": [],
    }
    (row,) = _drivers(api, "?name=pci")
    assert row["hostname"] == HOST and row["observed"] is False
    assert row["desired"] == {
        "enabled": True,
        "config": {"x": "1"},
        "generation": generation,
        "scope": "host",
    }

    # The agent applies it and says so (an unchanged report is enough).
    snapshot = body(HOST, [device()], drivers=drivers("pci"))
    hash_only(api, HOST, snapshot["hash"], observed_generation=generation)
    (row,) = _drivers(api, "?name=pci")
    assert row["observed"] is True

    _post(api, "/v2/drivers/pci/update", {"hostnames": [HOST], "config": {"x": "2"}})
    assert desired(api)["drivers"] == {"pci": {"enabled": True, "config": {"x": "2"}}}
    answer = _post(api, "/v2/drivers/pci/uninstall", {"hostnames": [HOST]})
    assert desired(api)["drivers"] == {"pci": {"enabled": False, "config": {"x": "2"}}}
    assert _drivers(api, "?name=pci")[0]["observed"] is False


def test_what_is_asked_of_every_host_reaches_those_that_report_later(api):
    report(api, HOST, [device()])
    answer = _post(api, "/v2/drivers/nvme/uninstall", {})
    assert answer["all_hosts"] is True
    assert [h["hostname"] for h in answer["hosts"]] == [HOST]
    assert desired(api)["drivers"] == {"nvme": {"enabled": False, "config": {}}}

    report(api, OTHER, drivers=drivers("nvme"))  # a host first seen after the wish
    assert desired(api, OTHER)["drivers"] == {"nvme": {"enabled": False, "config": {}}}
    fleet = [d for d in _drivers(api, "?name=nvme") if d["hostname"] is None]
    assert fleet[0]["desired"]["scope"] == "fleet"

    # A host's own wish wins over the fleet's, until the fleet is asked again.
    _post(api, "/v2/drivers/nvme/install", {"hostnames": [OTHER]})
    assert desired(api, OTHER)["drivers"] == {"nvme": {"enabled": True, "config": {}}}
    assert desired(api)["drivers"]["nvme"]["enabled"] is False
    _post(api, "/v2/drivers/nvme/install", {"config": {"poll": "5"}})
    for host in (HOST, OTHER):
        assert desired(api, host)["drivers"] == {"nvme": {"enabled": True, "config": {"poll": "5"}}}


def test_uninstall_is_refused_while_a_device_is_held_and_deactivates_the_others(api):
    """The devices of the plug-in ``static`` (tests/helpers/inventory.py's agent driver),
    whatever driver_name they report (``fake``)."""
    report(api, HOST, [device(FIRST), device(SECOND)])
    uuids = {}
    for address in (FIRST, SECOND):
        uuids[address] = the_device(api, address=address)["uuid"]
        activate(api, "ready", uuids=[uuids[address]])
        (step,) = [a for a in desired(api)["activations"] if a["device"] == uuids[address]]
        outcome(api, uuids[address], action="install", generation=step["generation"], state="done")
    _, arq = bind(api, rp_uuid(FIRST))
    assert arq["state"] == "Bound"

    r = api.post("/v2/drivers/static/uninstall", {"hostnames": [HOST]}, version=V2_7)
    assert r.status_code == 409, r.text
    assert _code(r) == "exosuit.driver.in_use"
    assert arq["uuid"] in r.text
    assert desired(api)["drivers"] == {}
    assert the_device(api, address=SECOND)["activation"] == "ready"

    unbind(api, arq["uuid"])
    answer = _post(api, "/v2/drivers/static/uninstall", {"hostnames": [HOST]})
    assert sorted(answer["deactivated"]) == sorted(uuids.values())
    for address in (FIRST, SECOND):
        found = the_device(api, address=address)
        assert found["activation"] == "inactive"
        assert found["activation_reason"] == "its driver static was uninstalled"
    assert desired(api)["activations"] == []  # no host work: the driver is going


def test_bad_driver_requests(api):
    report(api, HOST)
    cases = (
        ("/v2/drivers/pci/install", {"hostnames": ["nowhere"]}, 404),
        ("/v2/drivers/pci/install", {"config": {"Bad": "1"}}, 400),
        ("/v2/drivers/pci/install", {"config": {"x": 1}}, 400),
        ("/v2/drivers/pci/uninstall", {"config": {}}, 400),
        ("/v2/drivers/p%20ci/install", {}, 400),
        ("/v2/drivers/pci/install", {"hostnames": []}, 400),
    )
    for path, payload, status in cases:
        r = api.post(path, payload, version=V2_7)
        assert r.status_code == status, (path, payload, r.text)
    assert desired(api)["drivers"] == {}
    assert api.post("/v2/drivers/pci/install", {}, version="2.6").status_code == 404


def test_discover_now_until_each_host_reports_past_its_generation(api, conf):
    report(api, HOST, [device()])
    report(api, OTHER)
    rate = conf.api.discovery_rate
    answer = _post(api, "/v2/discoveries", {})
    assert answer["all_hosts"] is True
    assert answer["spread"] == round(2 / rate, 3)
    assert (answer["host_count"], answer["received"], answer["complete"]) == (2, 0, False)
    generations = {h["hostname"]: h["generation"] for h in answer["hosts"]}
    for host in (HOST, OTHER):
        state = desired(api, host)
        assert state["discovery"] == {"generation": generations[host], "spread": answer["spread"]}
        assert state["generation"] == generations[host]

    # A report at an older generation answers nothing; at (or past) it, the discovery.
    snapshot = body(HOST, [device()])
    hash_only(api, HOST, snapshot["hash"], observed_generation=generations[HOST] - 1)
    shown = api.get(f"/v2/discoveries/{answer['uuid']}", version=V2_7).json
    assert shown["received"] == 0
    changed = body(HOST, [device(), device(SECOND)], observed_generation=generations[HOST])
    assert api.put(f"/agent/v1/hosts/{HOST}/inventory", changed).status_code == 200
    shown = api.get(f"/v2/discoveries/{answer['uuid']}", version=V2_7).json
    received = {h["hostname"]: h["received_at"] for h in shown["hosts"]}
    assert received[HOST] is not None and received[OTHER] is None
    assert desired(api)["discovery"] is None
    assert desired(api, OTHER)["discovery"] is not None

    hash_only(api, OTHER, body(OTHER, [])["hash"], observed_generation=generations[OTHER] + 5)
    shown = api.get(f"/v2/discoveries/{answer['uuid']}", version=V2_7).json
    assert (shown["received"], shown["complete"]) == (2, True)
    assert shown["last_received_at"] is not None

    one = _post(api, "/v2/discoveries", {"hostnames": [OTHER]})
    assert [h["hostname"] for h in one["hosts"]] == [OTHER]
    listed = api.get("/v2/discoveries", version=V2_7).json["discoveries"]
    assert [d["uuid"] for d in listed] == [one["uuid"], answer["uuid"]]
    assert "hosts" not in listed[0]


def test_bad_discoveries(api):
    report(api, HOST)
    assert (
        api.post("/v2/discoveries", {"hostnames": [HOST, "nowhere"]}, version=V2_7).status_code
        == 404
    )
    assert api.get("/v2/discoveries", version=V2_7).json["discoveries"] == []
    assert desired(api)["discovery"] is None
    missing = "00000000-0000-4000-8000-000000000000"
    for path in (f"/v2/discoveries/{missing}", "/v2/discoveries/nope"):
        r = api.get(path, version=V2_7)
        assert r.status_code == 404 and _code(r) == "exosuit.discovery.not_found"
