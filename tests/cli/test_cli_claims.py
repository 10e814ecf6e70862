"""``exosuit claim create|list|show|renew|release`` (API 2.8, doc/standalone.md) against a
real ``exosuit serve``, whose own agent writes the CDI spec of a container claim (into
``<data dir>/cdi``) and removes it once the claim is released: the commands of
doc/standalone.md's example, and nothing left behind."""

from __future__ import annotations

import json
import time
import uuid

from exosuit.cli.claims import ClaimList
from tests.cli.conftest import HOST, pick

V = "2.8"
DEADLINE = 60.0


def _eventually(check, what: str):
    deadline = time.monotonic() + DEADLINE
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {DEADLINE} s: {what}"
        time.sleep(0.2)


def _held(api) -> int:
    handles = api.list("/v2/attach_handles", "attach_handles", version=V, hostname=HOST)
    return sum(h["in_use"] for h in handles)


def _profile(cli, name: str, group: str) -> None:
    cli.run("profile", "create", name, "--group", group)


def test_a_container_claim_gets_its_cdi_spec_and_leaves_nothing_behind(cli, api, server):
    _profile(cli, "sim-fpga", "resources:FPGA=1")
    result = cli.run(
        "claim", "create", "--profile", "sim-fpga", "--container", "--consumer", "demo",
        "--expires-in", "3600", "--wait", "-f", "json",
    )  # fmt: skip
    claim = json.loads(result.stdout)
    assert (claim["state"], claim["cdi"]["state"], claim["hostname"]) == ("bound", "written", HOST)
    assert f"claim {claim['uuid']}: " in result.stderr  # the progress
    (device,) = claim["devices"]
    assert device["cdi_device"] == f"exosuit.dev/fpga={claim['uuid']}-0"
    spec = server.data_dir / "cdi" / f"exosuit.dev-fpga_{claim['uuid']}.json"
    written = json.loads(spec.read_text())
    assert written["kind"] == "exosuit.dev/fpga"
    assert [d["name"] for d in written["devices"]] == [f"{claim['uuid']}-0"]
    assert _held(api) == 1

    # The same consumer again: the same claim.
    again = cli.json("claim", "create", "--profile", "sim-fpga", "--consumer", "demo")
    assert again["uuid"] == claim["uuid"]

    table = cli.run("claim", "show", claim["uuid"]).stdout
    assert device["cdi_device"] in table and "written" in table
    shown = cli.json("claim", "show", claim["uuid"])
    assert shown == {
        k: v for k, v in api.get(f"/v2/claims/{claim['uuid']}", V).items() if k != "links"
    }
    renewed = cli.json("claim", "renew", claim["uuid"], "--expires-in", "7200")
    assert renewed["expires_at"] > claim["expires_at"]

    listed = cli.json("claim", "list", "--state", "bound")
    assert listed == pick(api.list("/v2/claims", "claims", V, state="bound"), ClaimList.columns)
    assert [c["uuid"] for c in listed] == [claim["uuid"]]
    assert cli.json("claim", "list", "--host", "nowhere") == []

    for _ in range(2):  # idempotent
        (row,) = cli.json("claim", "release", claim["uuid"])
        assert (row["uuid"], row["state"]) == (claim["uuid"], "released")
    _eventually(lambda: not spec.exists(), "the agent removes the CDI spec")
    assert _held(api) == 0
    assert api.list("/v2/accelerator_requests", "arqs", V) == []
    assert list((server.data_dir / "cdi").glob(f"*{claim['uuid']}*")) == []


def test_named_handles_and_the_refusals(cli, api):
    _profile(cli, "never", "resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=forbidden")
    free = [
        h
        for h in api.list("/v2/attach_handles", "attach_handles", version=V, hostname=HOST)
        if not h["in_use"] and h["attach_type"] == "TEST_PCI"
    ]
    claim = cli.json("claim", "create", "--handle", free[0]["uuid"], "--handle", free[1]["uuid"])
    assert [d["attach_handle_uuid"] for d in claim["devices"]] == [free[0]["uuid"], free[1]["uuid"]]
    held = cli.run("claim", "create", "--handle", free[1]["uuid"], check=False)
    assert held.returncode == 1 and f"held by claim {claim['uuid']}" in held.stderr
    assert "exosuit.claim.unsatisfiable" in held.stderr

    unsatisfiable = cli.run("claim", "create", "--profile", "never", check=False)
    assert unsatisfiable.returncode == 1 and "nothing is held" in unsatisfiable.stderr
    unknown = cli.run("claim", "create", "--profile", "no-such-profile", check=False)
    assert unknown.returncode == 1 and "exosuit.device_profile.not_found" in unknown.stderr
    missing = cli.run("claim", "show", str(uuid.uuid4()), check=False)
    assert missing.returncode == 1 and "exosuit.claim.not_found" in missing.stderr
    neither = cli.run("claim", "create", check=False)
    assert neither.returncode == 2 and "--profile" in neither.stderr
    bad = cli.run("claim", "create", "--profile", "never", "--expires-in", "0", check=False)
    assert bad.returncode == 2

    cli.run("claim", "release", claim["uuid"])
    assert _held(api) == 0


def test_a_dry_run_shows_the_choice_and_every_reason_and_claims_nothing(cli, api):
    _profile(cli, "dry-fpga", "resources:FPGA=1")
    _profile(cli, "dry-never", "resources:FPGA=1,trait:CUSTOM_NO_SUCH_TRAIT=required")
    before = api.list("/v2/claims", "claims", V)
    table = cli.run("claim", "create", "--profile", "dry-fpga", "--dry-run")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert any("HOST" in line and "VERDICT" in line and "REASON" in line for line in lines)
    assert any(HOST in line and "chosen" in line for line in lines)
    answer = cli.json("claim", "create", "--profile", "dry-fpga", "--dry-run")
    assert answer["dry_run"] is True and answer["hostname"] == HOST
    (taken,) = answer["devices"]
    verdicts = {d["device_uuid"]: d["verdict"] for h in answer["hosts"] for d in h["devices"]}
    assert verdicts[taken["device_uuid"]] == "chosen"
    assert "wrong_resource_class" in verdicts.values()  # the simulated host's GPUs, NICs …

    refused = cli.run("claim", "create", "--profile", "dry-never", "--dry-run", check=False)
    assert refused.returncode == 1
    assert "No device on any host can take the claim:" in refused.stdout
    assert "missing trait CUSTOM_NO_SUCH_TRAIT" in refused.stdout
    assert api.list("/v2/claims", "claims", V) == before  # nothing claimed
    with_handle = cli.run(
        "claim", "create", "--handle", str(uuid.uuid4()), "--dry-run", check=False
    )
    assert with_handle.returncode == 1 and "exosuit.claim.selection" in with_handle.stderr
    waiting = cli.run(
        "claim", "create", "--profile", "dry-fpga", "--dry-run", "--wait", check=False
    )
    assert waiting.returncode == 1 and "nothing to --wait for" in waiting.stderr
