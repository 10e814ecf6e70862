"""Job rules (microversion 2.5): a project manager or an admin reads the job table;
only an admin makes a failed job run again."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "exosuit:job:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"
RETRY = PREFIX % "retry"

_PATH = "/v2/jobs"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_MANAGER_OR_ADMIN,
        "List the conductor's jobs.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show a job.",
        [{"path": _PATH + "/{id}", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        RETRY,
        base.ADMIN,
        "Make a failed job pending again, due now, with its attempts reset.",
        [{"path": _PATH + "/{id}/retry", "method": "POST"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
