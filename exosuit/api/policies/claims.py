"""Standalone claim rules (microversion 2.8, doc/standalone.md): as accelerator requests,
a claim belongs to its project: a project member makes, releases and renews its claims,
a project reader sees them, an admin everything. Ownership is checked against the claim
itself (another project's claim is not found)."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "exosuit:claim:%s"
CREATE = PREFIX % "create"
GET = PREFIX % "get"
GET_ALL = PREFIX % "get_all"
DELETE = PREFIX % "delete"
RENEW = PREFIX % "renew"

_PATH = "/v2/claims"

_rules = [
    policy.DocumentedRuleDefault(
        CREATE,
        base.PROJECT_MEMBER_OR_ADMIN,
        "Claim devices (bound by Exosuit, without Nova).",
        [{"path": _PATH, "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_READER_OR_ADMIN,
        "List the project's claims (an admin: every project's).",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET,
        base.PROJECT_READER_OR_ADMIN,
        "Show a claim.",
        [{"path": _PATH + "/{uuid}", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DELETE,
        base.PROJECT_MEMBER_OR_ADMIN,
        "Release a claim (its devices are freed).",
        [{"path": _PATH + "/{uuid}", "method": "DELETE"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        RENEW,
        base.PROJECT_MEMBER_OR_ADMIN,
        "Move a claim's expiry.",
        [{"path": _PATH + "/{uuid}/renew", "method": "POST"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
