"""Service rules (microversion 2.7): read like devices, whose services they are, by a
project manager or an admin (Cyborg's persona for the fleet's hardware)."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

GET_ALL = "exosuit:service:get_all"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_MANAGER_OR_ADMIN,
        "List the services devices offer now or could offer (doc/devices.md).",
        [{"path": "/v2/services", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
