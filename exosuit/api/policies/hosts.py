"""Host rules (microversion 2.5): read like devices, by a project manager or an admin."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "exosuit:host:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"
# Microversion 2.9: drain a whole host for maintenance, and undrain it (doc/devices.md).
DRAIN = PREFIX % "drain"
UNDRAIN = PREFIX % "undrain"

_PATH = "/v2/hosts"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_MANAGER_OR_ADMIN,
        "List the hosts whose agents report, with their counts and Placement state.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show a host.",
        [{"path": _PATH + "/{hostname}", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DRAIN,
        base.ADMIN,
        "Drain a host: none of its devices (those it reports later included) takes new "
        "workload; what holds them keeps them.",
        [{"path": _PATH + "/{hostname}/drain", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        UNDRAIN,
        base.ADMIN,
        "Undrain a host: its devices take new workload again (but those Exosuit disabled itself).",
        [{"path": _PATH + "/{hostname}/undrain", "method": "POST"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
