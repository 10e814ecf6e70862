"""``exosuit profile …`` and ``exosuit arq …`` against a real ``exosuit serve``:
create, show, list and delete round trips, checked against the API."""

from __future__ import annotations

import uuid

import pytest
import requests

from exosuit.cli.arqs import ArqList
from exosuit.cli.client import CLIENT_MAX_VERSION
from exosuit.cli.profiles import ProfileList
from tests.cli.conftest import pick

pytestmark = pytest.mark.slow

FPGA_GROUP = "resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required"


def _profile_by_name(api, name):
    return next(
        (p for p in api.list("/v2/device_profiles", "device_profiles") if p["name"] == name),
        None,
    )


def test_profile_create_show_list_delete_round_trip(cli, api):
    created = cli.json(
        "profile",
        "create",
        "cli-fpga",
        "--group",
        FPGA_GROUP,
        "--group",
        "resources:GPU=1",
        "--description",
        "made by the CLI",
    )

    stored = _profile_by_name(api, "cli-fpga")
    assert created == {k: v for k, v in stored.items() if k != "links"}
    assert stored["groups"] == [
        {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"},
        {"resources:GPU": "1"},
    ]
    assert stored["description"] == "made by the CLI"
    assert cli.json("profile", "show", "cli-fpga") == created  # by name (2.2)
    assert cli.json("profile", "show", created["uuid"]) == created
    listed = cli.json("profile", "list", "--name", "cli-fpga")
    assert listed == pick([stored], ProfileList.columns)

    deleted = cli.json("profile", "delete", "cli-fpga")

    assert deleted == [{"uuid": created["uuid"], "name": "cli-fpga"}]
    assert _profile_by_name(api, "cli-fpga") is None
    gone = cli.run("profile", "show", "cli-fpga", check=False)
    assert gone.returncode == 1
    assert gone.stderr.count("\n") == 1 and "(HTTP 404" in gone.stderr


def test_profile_delete_of_several_is_all_or_nothing(cli, api):
    for name in ("cli-a", "cli-b"):
        cli.run("profile", "create", name, "--group", FPGA_GROUP, "-f", "value", "-c", "uuid")
    b = _profile_by_name(api, "cli-b")
    api.post("/v2/accelerator_requests", {"device_profile_name": "cli-b"})  # b is in use

    refused = cli.run("profile", "delete", "cli-a", b["uuid"], check=False)

    assert refused.returncode == 1
    assert refused.stdout == ""
    assert "is used by 1 accelerator request" in refused.stderr
    assert "(HTTP 409, exosuit.device_profile.in_use)" in refused.stderr
    assert _profile_by_name(api, "cli-a") is not None  # neither was deleted


def test_profile_create_refusals_are_one_line_with_the_api_message(cli):
    bad = cli.run("profile", "create", "cli-bad", "--group", "resources:NOPE=1", check=False)
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: ")
    assert bad.stderr.count("\n") == 1
    assert "(HTTP 400, exosuit.device_profile.invalid)" in bad.stderr

    usage = cli.run("profile", "create", "cli-bad", "--group", "no-equals-sign", check=False)
    assert usage.returncode == 2
    assert "is not KEY=VALUE" in usage.stderr
    missing = cli.run("profile", "create", "cli-bad", check=False)
    assert missing.returncode == 2
    assert "--group" in missing.stderr


def test_arq_list_show_delete(cli, api):
    cli.run("profile", "create", "cli-arq", "--group", FPGA_GROUP)
    # At the command line's version: what `arq show` shows (2.8: claim_uuid too).
    body = {"device_profile_name": "cli-arq"}
    arqs = api.post("/v2/accelerator_requests", body, version=CLIENT_MAX_VERSION)["arqs"]
    (arq,) = arqs
    every = api.list("/v2/accelerator_requests", "arqs")

    assert cli.json("arq", "list") == pick(every, ArqList.columns)
    assert cli.json("arq", "list", "--long") == pick(every, ArqList.columns + ArqList.long_columns)
    shown = cli.json("arq", "show", arq["uuid"])
    assert shown == {k: v for k, v in arq.items() if k != "links"}
    assert shown["state"] == "Initial"
    assert shown["attach_handle_info"] == {}  # an object, not a string

    by_profile = cli.json("arq", "list", "--profile", "cli-arq")
    assert [a["uuid"] for a in by_profile] == [arq["uuid"]]
    initial = cli.json("arq", "list", "--state", "Initial,Bound")
    expected = api.list("/v2/accelerator_requests", "arqs", state="Initial,Bound")
    assert [a["uuid"] for a in initial] == [a["uuid"] for a in expected]
    assert cli.json("arq", "list", "--state", "Bound", "--profile", "cli-arq") == []
    mine = cli.json("arq", "list", "--project", arq["project_id"], "--profile", "cli-arq")
    assert [a["uuid"] for a in mine] == [arq["uuid"]]
    assert cli.json("arq", "list", "--project", "someone-else") == []

    deleted = cli.json("arq", "delete", arq["uuid"])

    assert deleted == [{"uuid": arq["uuid"]}]
    r = requests.get(f"{api.url}/v2/accelerator_requests/{arq['uuid']}", timeout=10)
    assert r.status_code == 404
    again = cli.run("arq", "delete", arq["uuid"], check=False)
    assert again.returncode == 1
    assert "(HTTP 404, exosuit.arq.not_found)" in again.stderr


def test_arq_delete_of_several_is_one_request(cli, api):
    cli.run("profile", "create", "cli-two", "--group", "resources:FPGA=2")
    arqs = api.post("/v2/accelerator_requests", {"device_profile_name": "cli-two"})["arqs"]
    assert len(arqs) == 2

    result = cli.run("--debug", "arq", "delete", *(a["uuid"] for a in arqs), "-f", "json")

    deletes = [line for line in result.stderr.splitlines() if line.startswith("REQ: curl")]
    assert len([d for d in deletes if "-X DELETE" in d]) == 1
    remaining = {a["uuid"] for a in api.list("/v2/accelerator_requests", "arqs")}
    assert not remaining & {a["uuid"] for a in arqs}


def test_arq_state_filter_checks_the_states(cli):
    bad = cli.run("arq", "list", "--state", "Sleeping", check=False)
    assert bad.returncode == 1
    assert "Unknown ARQ state(s): Sleeping. (HTTP 400, exosuit.arq.state)" in bad.stderr


def test_arq_show_of_an_unknown_uuid(cli):
    missing = str(uuid.uuid4())
    result = cli.run("arq", "show", missing, check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    assert missing in result.stderr and "(HTTP 404" in result.stderr
