"""Attribute rules."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "cyborg:attribute:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"
CREATE = PREFIX % "create"
DELETE = PREFIX % "delete"

_PATH = "/v2/attributes"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_MANAGER_OR_ADMIN,
        "List attributes.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show an attribute.",
        [{"path": _PATH + "/{uuid}", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        CREATE,
        base.ADMIN,
        "Create an attribute.",
        [{"path": _PATH, "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DELETE,
        base.ADMIN,
        "Delete an attribute.",
        [{"path": _PATH + "/{uuid}", "method": "DELETE"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
