"""Device profile rules."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "cyborg:device_profile:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"
CREATE = PREFIX % "create"
DELETE = PREFIX % "delete"

_PATH = "/v2/device_profiles"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_READER_OR_ADMIN,
        "List device profiles.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_READER_OR_ADMIN,
        "Show a device profile.",
        [{"path": _PATH + "/{uuid_or_name}", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        CREATE,
        base.ADMIN,
        "Create a device profile.",
        [{"path": _PATH, "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DELETE,
        base.ADMIN,
        "Delete device profiles.",
        [
            {"path": _PATH + "/{uuid}", "method": "DELETE"},
            {"path": _PATH + "?value={names}", "method": "DELETE"},
        ],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
