"""Metrics rule: who sees the series that name tenants (doc/metrics.md, "Who sees what")."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

DETAIL = "exosuit:metrics:detail"

_rules = [
    policy.DocumentedRuleDefault(
        DETAIL,
        base.ADMIN,
        "See the per-device series of GET /metrics (host names, PCI addresses, the ARQ, "
        "instance, claim and project holding each device, each host's report age). A "
        "caller without credentials, or one this rule refuses, gets the fleet's series "
        "only.",
        [{"path": "/metrics", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
