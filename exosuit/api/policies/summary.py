"""Summary rule (microversion 2.5): the fleet's counts, read like devices."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

GET = "exosuit:summary:get"

_rules = [
    policy.DocumentedRuleDefault(
        GET,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show the counts of hosts, devices, attach handles, accelerator requests and jobs.",
        [{"path": "/v2/summary", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
