"""The policy decision cache answers exactly as oslo.policy does, only faster."""

from __future__ import annotations

import os

import pytest
from oslo_policy import policy

from exosuit.api.policies import make_enforcer
from exosuit.api.policies.cache import DecisionCache
from exosuit.conf import make_conf
from exosuit.context import RequestContext

RULE = "cyborg:device:get_all"  # admin only by default


class CountingEnforcer(policy.Enforcer):
    """A real enforcer that counts the questions it is asked."""

    calls = 0

    def authorize(self, *args, **kwargs):
        self.calls += 1
        return super().authorize(*args, **kwargs)


def _enforcer(tmp_path, policy_text: str | None = None) -> CountingEnforcer:
    lines = []
    if policy_text is not None:
        path = tmp_path / "policy.yaml"
        path.write_text(policy_text)
        lines = ["[oslo_policy]", f"policy_file = {path}"]
    conf_file = tmp_path / "exosuit.conf"
    conf_file.write_text("\n".join(lines) + "\n")
    enforcer = make_enforcer(make_conf([str(conf_file)]))
    enforcer.__class__ = CountingEnforcer
    return enforcer


def _context(*roles: str, project: str = "p1") -> RequestContext:
    return RequestContext(user_id="u1", project_id=project, roles=list(roles))


def _target(context) -> dict:
    return {"project_id": context.project_id, "user_id": context.user_id}


def test_an_allowed_question_is_answered_from_memory(tmp_path):
    enforcer = _enforcer(tmp_path)
    cache = DecisionCache(enforcer)
    admin = _context("admin", "member", "reader")
    for _ in range(3):
        cache.authorize(RULE, _target(admin), admin)
    assert enforcer.calls == 1
    # Another caller (other roles or project) is a different question.
    other = _context("admin", project="p2")
    cache.authorize(RULE, _target(other), other)
    assert enforcer.calls == 2


def test_a_denied_question_is_asked_every_time(tmp_path):
    enforcer = _enforcer(tmp_path)
    cache = DecisionCache(enforcer)
    member = _context("member", "reader")
    for _ in range(2):
        with pytest.raises(policy.PolicyNotAuthorized):
            cache.authorize(RULE, _target(member), member)
    assert enforcer.calls == 2


def test_a_policy_file_edit_takes_effect(tmp_path):
    enforcer = _enforcer(tmp_path, f'"{RULE}": "role:member"\n')
    cache = DecisionCache(enforcer, recheck=0)
    member = _context("member")
    cache.authorize(RULE, _target(member), member)
    path = tmp_path / "policy.yaml"
    path.write_text(f'"{RULE}": "role:admin"\n')
    stat = os.stat(path)
    os.utime(path, (stat.st_atime, stat.st_mtime + 10))  # a visibly newer file
    with pytest.raises(policy.PolicyNotAuthorized):
        cache.authorize(RULE, _target(member), member)


def test_a_policy_file_made_invalid_while_running_keeps_the_rules_and_says_so(tmp_path, caplog):
    """Regression (issue 14): one 500, then the old rules stayed in force silently."""
    enforcer = _enforcer(tmp_path, f'"{RULE}": "role:member"\n')
    cache = DecisionCache(enforcer, recheck=0)
    member, reader = _context("member"), _context("reader")
    cache.authorize(RULE, _target(member), member)
    path = tmp_path / "policy.yaml"
    path.write_text(f'"{RULE}": [unclosed\n')
    stat = os.stat(path)
    os.utime(path, (stat.st_atime, stat.st_mtime + 10))
    for _ in range(2):  # no exception but the policy's own answers, asked twice
        cache.authorize(RULE, _target(member), member)
        with pytest.raises(policy.PolicyNotAuthorized):
            cache.authorize(RULE, _target(reader), reader)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert errors and "policy file is invalid" in errors[0].getMessage()
    # Mended: the new rules take effect.
    path.write_text(f'"{RULE}": "role:reader"\n')
    os.utime(path, (stat.st_atime, stat.st_mtime + 20))
    cache.authorize(RULE, _target(reader), reader)


def test_rules_with_remote_checks_are_not_remembered(tmp_path):
    # An http: check asks another server, whose answer may change: never cached.
    enforcer = _enforcer(tmp_path, f'"{RULE}": "role:member or http://127.0.0.1:9/x"\n')
    cache = DecisionCache(enforcer)
    member = _context("member")
    cache.authorize(RULE, _target(member), member)
    cache.authorize(RULE, _target(member), member)
    assert enforcer.calls == 2


def test_allowed_answers_true_or_false_where_authorize_would_pass_or_raise(tmp_path):
    cache = DecisionCache(_enforcer(tmp_path))
    manager = _context("manager", "member", "reader")
    member = _context("member", "reader")
    assert cache.allowed(RULE, _target(manager), manager) is True
    assert cache.allowed(RULE, _target(member), member) is False
    # A system-scoped token fails a project-scoped rule's scope (enforced): False too.
    system = RequestContext(user_id="u1", system_scope="all", roles=["admin"])
    with pytest.raises(policy.InvalidScope):
        cache.authorize(RULE, {"project_id": None, "user_id": "u1"}, system)
    assert cache.allowed(RULE, {"project_id": None, "user_id": "u1"}, system) is False
