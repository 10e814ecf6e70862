"""``exosuit audit list|show`` (API 2.9) against a real ``exosuit serve``: the records
of the changes this test makes (profiles created and deleted through the command
line), filtered and paged (the server's pages hold PAGE items), in every format."""

from __future__ import annotations

import pytest

from exosuit.cli.audit import AuditList
from tests.cli.conftest import PAGE, pick

pytestmark = pytest.mark.slow

V = "2.9"


def test_audit_list_shows_every_page_of_what_was_done_newest_first(cli, api):
    names = [f"audit-cli-{i}" for i in range(PAGE + 2)]
    for name in names:
        cli.run("profile", "create", name, "--group", "resources:FPGA=1")
    cli.run("profile", "delete", names[0])
    expected = api.list("/v2/audit_events", "audit_events", V, object_type="device_profile")
    assert len(expected) == len(names) + 1 > PAGE  # more than one page
    shown = cli.json("audit", "list", "--object-type", "device_profile")
    assert shown == pick(expected, AuditList.columns)
    assert [e["action"] for e in shown] == ["delete"] + ["create"] * len(names)
    # noauth's default caller is an admin that also carries the service role.
    assert shown[0]["actor"] == "service:admin"

    (deleted,) = cli.json("audit", "list", "--action", "delete", "--long")
    assert deleted["before"] == {"name": names[0]} and deleted["after"] is None
    assert deleted["request_id"].startswith("req-")

    assert len(cli.json("audit", "list", "--object-type", "device_profile", "--limit", "2")) == 2
    assert cli.json("audit", "list", "--since", "2999-01-01T00:00:00Z") == []
    oldest = cli.json("audit", "list", "--object-type", "device_profile", "--sort", "id:asc")
    assert [e["id"] for e in oldest] == sorted(e["id"] for e in shown)


def test_audit_show_prints_one_record_and_refuses_a_bad_time(cli, api):
    cli.run("profile", "create", "audit-cli-show", "--group", "resources:FPGA=1")
    (event,) = api.get(
        "/v2/audit_events", V, action="create", object_type="device_profile", limit=1
    )["audit_events"]
    shown = cli.json("audit", "show", str(event["id"]))
    assert shown["id"] == event["id"] and shown["after"] == event["after"]
    assert "links" not in shown
    missing = cli.run("audit", "show", "999999999", check=False)
    assert missing.returncode == 1 and "could not be found" in missing.stderr
    bad = cli.run("audit", "list", "--since", "yesterday", check=False)
    assert bad.returncode == 1 and "ISO 8601" in bad.stderr
