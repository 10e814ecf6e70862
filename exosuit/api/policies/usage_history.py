"""History rules (microversion 2.11): a device's usage and the fleet's allocation over
time, read like devices (doc/dashboard.md, "Charts")."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

USAGE = "exosuit:device:usage_history"
ALLOCATION = "exosuit:allocation_history:get"

_rules = [
    policy.DocumentedRuleDefault(
        USAGE,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show a device's usage figures over time (its recorded history, or Prometheus's).",
        [{"path": "/v2/devices/{uuid}/usage_history", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        ALLOCATION,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show the attach handles held and free by device model over time.",
        [{"path": "/v2/allocation_history", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
