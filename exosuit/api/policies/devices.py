"""Device rules."""

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "cyborg:device:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"
ENABLE = PREFIX % "enable"
DISABLE = PREFIX % "disable"

_PATH = "/v2/devices"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL, base.PROJECT_MANAGER_OR_ADMIN, "List devices.",
        [{"path": _PATH, "method": "GET"}], scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE, base.PROJECT_MANAGER_OR_ADMIN, "Show a device.",
        [{"path": _PATH + "/{uuid}", "method": "GET"}], scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        ENABLE, base.ADMIN, "Enable a device.",
        [{"path": _PATH + "/{uuid}/enable", "method": "POST"}], scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DISABLE, base.ADMIN, "Disable a device (maintenance).",
        [{"path": _PATH + "/{uuid}/disable", "method": "POST"}], scope_types=["project"],
    ),
]


def list_rules():
    return _rules
