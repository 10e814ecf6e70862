"""``exosuit permission list`` (API 2.11) against a real ``exosuit serve`` (noauth: the
caller is an admin and passes every rule); a Keystone reader's are in test_keystone.py."""

from __future__ import annotations

import pytest

from exosuit.api.policies import permission_rules

pytestmark = pytest.mark.slow


def test_permission_list_shows_every_rule_and_whether_it_is_passed(cli, api):
    answer = api.get("/v2/permissions", "2.11")["permissions"]
    shown = cli.json("permission", "list")
    assert shown == [{"rule": rule, "allowed": answer[rule]} for rule in sorted(answer)]
    assert {row["rule"] for row in shown} == set(permission_rules())
    assert all(row["allowed"] is True for row in shown)  # noauth's admin

    claims = cli.json("permission", "list", "--rule", "exosuit:claim:")
    assert [row["rule"] for row in claims] == sorted(r for r in answer if "exosuit:claim:" in r)
    assert cli.json("permission", "list", "--allowed", "false") == []
    table = cli.run("permission", "list", "--allowed", "false").stdout
    assert table == "No rules.\n"
    wrong = cli.run("permission", "list", "--allowed", "maybe", check=False)
    assert wrong.returncode == 2 and "invalid choice: 'maybe'" in wrong.stderr
