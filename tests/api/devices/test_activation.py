"""Device activation (doc/devices.md): a new device starts inactive, fully reserved and
never bindable; an operator marks it ready, the host's agent installs it and reports;
inactive is refused while it is held. Through the API, on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import json

from exosuit import schemas
from exosuit.db import placement as placement_db
from exosuit.placement import providers
from tests.conftest import make_test_conf
from tests.helpers.devices import (
    FIRST,
    HOST,
    OTHER,
    SECOND,
    V2_7,
    activate,
    bind,
    body,
    clear_jobs,
    desired,
    device,
    outcome,
    pending_syncs,
    report,
    rp_uuid,
    the_device,
    unbind,
)


def _reserved(database, hostname: str = HOST) -> dict[str, bool]:
    """Whether each of the host's providers is fully reserved, as the sync computes it."""
    rows = database.read(placement_db.deployable_rows, hostname)
    wanted = providers.desired_providers(hostname, "compute", rows)
    return {uuid: p.reserved == p.total for uuid, p in wanted.items()}


def _fault(response) -> tuple[str, str]:
    fault = json.loads(response.json["error_message"])
    return fault["code"], fault["faultstring"]


def _ready(api, database, address: str = FIRST, hostname: str = HOST) -> dict:
    """Mark the device ready and report its install done, as its agent would."""
    uuid = the_device(api, hostname, address)["uuid"]
    activate(api, "ready", uuids=[uuid])
    (step,) = [a for a in desired(api, hostname)["activations"] if a["device"] == uuid]
    done = {"action": "install", "generation": step["generation"], "state": "done"}
    assert outcome(api, uuid, hostname=hostname, **done) == {"activation": "ready"}
    return the_device(api, hostname, address)


def test_a_new_device_is_inactive_fully_reserved_and_not_bindable(api, database):
    report(api, HOST, [device()])
    found = the_device(api)
    assert (found["activation"], found["activation_reason"]) == ("inactive", None)
    assert _reserved(database) == {rp_uuid(): True}

    response, arq = bind(api, rp_uuid())
    assert response.status_code == 409, response.text
    assert arq["state"] == "BindFailed"
    assert f"device {found['uuid']} is not ready (activation inactive)" in _fault(response)[1]


def test_devices_of_ready_drivers_start_ready(database):
    """``ready_drivers`` names driver plug-ins: a device's ``plugin`` (the agent's driver
    that found it), or its ``driver_name`` when an older agent does not say."""
    from exosuit.api.deploy import loadapp
    from tests.conftest import ApiClient

    conf = make_test_conf(
        **{"inventory.new_device_activation": "inactive", "inventory.ready_drivers": ["sim"]}
    )
    api = ApiClient(loadapp(conf, database))
    third, fourth = "0000:0f:00.0", "0000:10:00.0"
    found = body(
        HOST,
        [device(FIRST), device(SECOND), device(third, driver="sim"), device(fourth, driver="sim")],
    )
    plugins = {FIRST: "fake", SECOND: "sim", third: "fake", fourth: None}
    for reported in found["devices"]:
        plugin = plugins[reported["pci_address"]]
        if plugin is None:
            del reported["plugin"]  # an agent from before plug-ins were reported
        else:
            reported["plugin"] = plugin
    found["hash"] = schemas.snapshot_hash(found["devices"], found["driver_errors"])
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", found)
    assert r.status_code == 200, r.text
    activation = {a: the_device(api, address=a)["activation"] for a in plugins}
    assert activation == {FIRST: "inactive", SECOND: "ready", third: "inactive", fourth: "ready"}


def test_ready_asks_the_agent_to_install_then_its_outcome_makes_it_bindable(api, database):
    report(api, HOST, [device()])
    uuid = the_device(api)["uuid"]
    before = desired(api)["generation"]
    clear_jobs(database)

    answer = activate(api, "ready", uuids=[uuid])
    assert answer == {
        "state": "ready",
        "devices": [
            {
                "uuid": uuid,
                "hostname": HOST,
                "activation": "activating",
                "outcome": "changed",
                "reason": None,
            }
        ],
    }
    assert pending_syncs(database, HOST) == 1
    state = desired(api)
    assert state["generation"] == before + 1
    assert state["activations"] == [
        {
            "device": uuid,
            "controlpath_id": {
                "cpid_type": "PCI",
                "cpid_info": {"domain": "0000", "bus": "0c", "device": "00", "function": "0"},
            },
            "driver": "fake",
            "action": "install",
            "generation": before + 1,
        }
    ]
    # Asked again while on its way: unchanged, nothing queued again.
    again = activate(api, "ready", uuids=[uuid])
    assert again["devices"][0]["outcome"] == "unchanged"
    assert desired(api)["generation"] == before + 1
    assert _reserved(database) == {rp_uuid(): True}  # activating: still not offered

    done = {"action": "install", "generation": before + 1, "state": "done", "reason": None}
    assert outcome(api, uuid, **done) == {"activation": "ready"}
    assert outcome(api, uuid, **done) == {"activation": "ready"}  # the same report again
    state = desired(api)
    assert state["activations"] == [] and state["generation"] == before + 2
    assert _reserved(database) == {rp_uuid(): False}
    response, arq = bind(api, rp_uuid())
    assert response.status_code == 202, response.text
    assert arq["state"] == "Bound"


def test_inactive_is_refused_while_held_and_undone_once_released(api, database):
    report(api, HOST, [device()])
    uuid = _ready(api, database)["uuid"]
    _, arq = bind(api, rp_uuid())
    assert arq["state"] == "Bound"

    r = api.post("/v2/device_activations", {"state": "inactive", "uuids": [uuid]}, version=V2_7)
    assert r.status_code == 409, r.text
    code, message = _fault(r)
    assert code == "exosuit.device.in_use"
    assert f"ARQ {arq['uuid']} of instance {arq['instance_uuid']}" in message
    assert the_device(api)["activation"] == "ready"

    unbind(api, arq["uuid"])
    answer = activate(api, "inactive", uuids=[uuid])
    assert answer["devices"][0]["activation"] == "deactivating"
    (step,) = desired(api)["activations"]
    assert step["action"] == "uninstall"
    assert _reserved(database) == {rp_uuid(): True}
    response, again = bind(api, rp_uuid())
    assert response.status_code == 409 and "activation deactivating" in _fault(response)[1]
    assert again["state"] == "BindFailed"

    done = {"action": "uninstall", "generation": step["generation"], "state": "done"}
    assert outcome(api, uuid, **done) == {"activation": "inactive"}
    assert the_device(api)["activation_reason"] is None


def test_a_failed_install_leaves_it_inactive_with_the_reason(api):
    report(api, HOST, [device()])
    uuid = the_device(api)["uuid"]
    activate(api, "ready", uuids=[uuid])
    (step,) = desired(api)["activations"]
    failed = {"action": "install", "generation": step["generation"], "state": "failed"}
    reason = "vfio-pci did not bind 0000:0c:00.0"
    assert outcome(api, uuid, reason=reason, **failed) == {"activation": "inactive"}
    found = the_device(api)
    assert (found["activation"], found["activation_reason"]) == ("inactive", reason)
    # Asked again, the reason goes while the agent tries.
    activate(api, "ready", uuids=[uuid])
    assert the_device(api)["activation_reason"] is None


def test_an_outcome_the_operator_changed_since_is_superseded(api):
    report(api, HOST, [device()])
    uuid = the_device(api)["uuid"]
    activate(api, "ready", uuids=[uuid])
    (install,) = desired(api)["activations"]
    activate(api, "inactive", uuids=[uuid])  # before the agent ended the install
    (uninstall,) = desired(api)["activations"]
    assert uninstall["action"] == "uninstall"
    assert uninstall["generation"] > install["generation"]

    r = api.put(
        f"/agent/v1/hosts/{HOST}/activations/{uuid}",
        {"action": "install", "generation": install["generation"], "state": "done"},
    )
    assert r.status_code == 409, r.text
    assert _fault(r)[0] == "exosuit.activation.superseded"
    assert the_device(api)["activation"] == "deactivating"

    failed = {"action": "uninstall", "generation": uninstall["generation"], "state": "failed"}
    assert outcome(api, uuid, reason="sysfs said EBUSY", **failed) == {"activation": "inactive"}
    assert the_device(api)["activation_reason"] == (
        "the host work could not be undone: sysfs said EBUSY"
    )


def test_a_selection_changes_each_device_it_can_and_says_why_not_the_others(api, database):
    report(api, HOST, [device(FIRST), device(SECOND)])
    report(api, OTHER, [device(FIRST)])
    first = _ready(api, database, FIRST)["uuid"]
    second = _ready(api, database, SECOND)["uuid"]
    _, arq = bind(api, rp_uuid(FIRST))

    answer = activate(api, "inactive", hostname=HOST)
    by_uuid = {d["uuid"]: d for d in answer["devices"]}
    assert by_uuid[first]["outcome"] == "refused"
    assert arq["uuid"] in by_uuid[first]["reason"]
    assert (by_uuid[second]["outcome"], by_uuid[second]["activation"]) == (
        "changed",
        "deactivating",
    )
    assert the_device(api, OTHER)["activation"] == "inactive"  # another host: untouched

    answer = activate(api, "ready", type="FPGA", driver="fake")
    assert {d["hostname"] for d in answer["devices"]} == {HOST, OTHER}
    assert the_device(api, OTHER)["activation"] == "activating"
    assert activate(api, "ready", hostname="nowhere") == {"state": "ready", "devices": []}


def test_bad_requests_change_nothing(api):
    report(api, HOST, [device()])
    uuid = the_device(api)["uuid"]
    for selection, status in (
        ({"uuids": [uuid], "hostname": HOST}, 400),
        ({}, 400),
        ({"uuids": ["00000000-0000-4000-8000-000000000000", uuid]}, 404),
        ({"uuids": ["not-a-uuid"]}, 400),
    ):
        r = api.post("/v2/device_activations", {"state": "ready", **selection}, version=V2_7)
        assert r.status_code == status, (selection, r.text)
    assert the_device(api)["activation"] == "inactive"
    r = api.post("/v2/device_activations", {"state": "ready", "uuids": [uuid]}, version="2.6")
    assert r.status_code == 404  # not in this microversion
    # An agent's outcome for a device of another host, or a bad one.
    bad = {"action": "install", "generation": 1, "state": "done"}
    assert api.put(f"/agent/v1/hosts/{OTHER}/activations/{uuid}", bad).status_code == 404
    assert api.put(f"/agent/v1/hosts/{HOST}/activations/x", bad).status_code == 404
    wrong = {**bad, "state": "maybe"}
    assert api.put(f"/agent/v1/hosts/{HOST}/activations/{uuid}", wrong).status_code == 400
