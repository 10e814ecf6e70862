"""GET /v2/permissions (microversion 2.11): every rule of the API, judged for the caller.

The story of the personas is tests/gabbits/permissions.yaml; here: that the answer names
exactly the API's own rules, agrees with the enforcer for every rule and persona, and
follows an operator's policy file as the API's checks do.
"""

from __future__ import annotations

import os
import time

from oslo_policy import policy

from exosuit.api.deploy import loadapp
from exosuit.api.policies import base, list_rules, make_enforcer, permission_rules
from exosuit.conf import make_conf
from exosuit.context import RequestContext
from tests.conftest import PERSONAS, ApiClient

V2_11 = "2.11"


def _permissions(client: ApiClient, headers: dict[str, str] | None = None) -> dict:
    r = client.get("/v2/permissions", headers=headers or {}, version=V2_11)
    assert r.status_code == 200, r.text
    return r.json


def test_the_answer_names_every_rule_of_the_api_and_no_base_check_string(sqlite_api):
    permissions = _permissions(sqlite_api)["permissions"]
    assert list(permissions) == permission_rules()
    documented = {r.name for r in list_rules() if isinstance(r, policy.DocumentedRuleDefault)}
    assert set(permissions) == documented
    assert not {r.name for r in base.list_rules()} & set(permissions)
    assert all(value is True for value in permissions.values())  # noauth's admin


def test_every_answer_is_the_enforcers_for_every_persona(sqlite_api):
    enforcer = make_enforcer(make_conf([]))
    for name, headers in PERSONAS.items():
        answer = _permissions(sqlite_api, headers)
        context = RequestContext(
            user_id=headers["X-User-Id"],
            project_id=headers["X-Project-Id"],
            roles=headers["X-Roles"].split(","),
            service_roles=headers.get("X-Service-Roles", "").split(",")
            if "X-Service-Roles" in headers
            else [],
        )
        target = {"project_id": context.project_id, "user_id": context.user_id}
        expected = {
            rule: enforcer.authorize(rule, target, context, do_raise=False)
            for rule in permission_rules()
        }
        assert answer["permissions"] == expected, name
        assert (answer["user_id"], answer["project_id"]) == (
            headers["X-User-Id"],
            headers["X-Project-Id"],
        )
        assert answer["roles"] == sorted(headers["X-Roles"].split(","))


def _touch_newer(path) -> None:
    """Make the file visibly newer (oslo.policy re-reads a file whose mtime changed)."""
    stat = os.stat(path)
    os.utime(path, (stat.st_atime, stat.st_mtime + 10))


def test_the_answer_follows_the_operators_policy_file(tmp_path, sqlite_database):
    rule = "exosuit:device:drain"
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(f'"{rule}": "role:reader"\n')
    conf_file = tmp_path / "exosuit.conf"
    conf_file.write_text(f"[oslo_policy]\npolicy_file = {policy_file}\n")
    api = ApiClient(loadapp(make_conf([str(conf_file)]), sqlite_database))
    reader = PERSONAS["reader"]
    assert _permissions(api, reader)["permissions"][rule] is True

    policy_file.write_text(f'"{rule}": "!"\n')
    _touch_newer(policy_file)
    # The API re-reads the file within a second or so: wait for it, generously.
    deadline = time.monotonic() + 60
    while _permissions(api, reader)["permissions"][rule] is not False:
        assert time.monotonic() < deadline, "the policy file's edit was never read"
        time.sleep(0.2)
    # The admin is refused too: "!" passes nobody, and the answer says so.
    assert _permissions(api, PERSONAS["admin"])["permissions"][rule] is False


def test_below_2_11_there_is_no_such_path(sqlite_api):
    r = sqlite_api.get("/v2/permissions", version="2.10")
    assert r.status_code == 404, r.text
