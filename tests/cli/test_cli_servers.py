"""``exosuit server attach|detach`` (API 2.10, doc/standalone.md "Servers") against a real
``exosuit serve`` (no Nova: every server is a standalone consumer): the attachment is
the server's claim, given back when attached again, refused for another profile,
released by detach; each refusal one line naming its code."""

from __future__ import annotations

from tests.cli.conftest import HOST

V = "2.10"


def _held(api) -> int:
    handles = api.list("/v2/attach_handles", "attach_handles", version=V, hostname=HOST)
    return sum(h["in_use"] for h in handles)


def test_attach_claims_for_the_server_and_detach_releases(cli, api):
    cli.run("profile", "create", "srv-fpga", "--group", "resources:FPGA=1")
    cli.run("profile", "create", "srv-gpu", "--group", "resources:PGPU=1")
    held = _held(api)
    claim = cli.json("server", "attach", "vm-1", "--profile", "srv-fpga", "--wait")
    assert (claim["consumer"], claim["state"], claim["hostname"]) == ("vm-1", "bound", HOST)
    assert claim["device_profile_name"] == "srv-fpga"
    assert claim == {
        k: v for k, v in api.get(f"/v2/claims/{claim['uuid']}", V).items() if k != "links"
    }
    assert _held(api) == held + 1
    # Again: the same claim.
    assert cli.json("server", "attach", "vm-1", "--profile", "srv-fpga")["uuid"] == claim["uuid"]
    table = cli.run("server", "attach", "vm-1", "--profile", "srv-fpga", "--host", HOST).stdout
    assert claim["uuid"] in table

    other = cli.run("server", "attach", "vm-1", "--profile", "srv-gpu", check=False)
    assert other.returncode == 1
    assert "(HTTP 409, exosuit.server.attached)" in other.stderr
    assert claim["uuid"] in other.stderr
    wrong = cli.run("server", "detach", "vm-1", "--profile", "srv-gpu", check=False)
    assert wrong.returncode == 1 and "(HTTP 404, exosuit.server.not_attached)" in wrong.stderr

    [row] = cli.json("server", "detach", "vm-1", "--profile", "srv-fpga")
    assert (row["uuid"], row["state"], row["device_profile_name"]) == (
        claim["uuid"],
        "released",
        "srv-fpga",
    )
    assert row["released_at"] is not None
    assert _held(api) == held
    again = cli.run("server", "detach", "vm-1", check=False)
    assert again.returncode == 1 and "exosuit.server.not_attached" in again.stderr
    assert "Server vm-1 has nothing attached" in again.stderr


def test_usage_errors_and_an_unknown_profile(cli):
    missing = cli.run("server", "attach", "vm-2", check=False)
    assert missing.returncode == 2 and "--profile" in missing.stderr
    unknown = cli.run("server", "attach", "vm-2", "--profile", "nope", check=False)
    assert unknown.returncode == 1 and "exosuit.device_profile.not_found" in unknown.stderr
