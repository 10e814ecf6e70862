"""Audit trail rules (microversion 2.9): only an admin reads who changed what."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "exosuit:audit_event:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"

_PATH = "/v2/audit_events"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.ADMIN,
        "List the audit trail's records (who changed what, when).",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.ADMIN,
        "Show an audit record.",
        [{"path": _PATH + "/{id}", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
