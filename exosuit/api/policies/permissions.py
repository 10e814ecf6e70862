"""Permissions rule (microversion 2.11): the caller's own permissions, read by anyone."""

from collections.abc import Sequence

from oslo_policy import policy

GET = "exosuit:permission:get"

_rules = [
    policy.DocumentedRuleDefault(
        GET,
        # Any authenticated, project-scoped caller: what one may do is no secret to them.
        "@",
        "Show the caller's identity and which of the API's policy rules it passes.",
        [{"path": "/v2/permissions", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
