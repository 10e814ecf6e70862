"""Accelerator request rules. Ownership (project) is checked against the ARQ itself."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "cyborg:arq:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"
CREATE = PREFIX % "create"
UPDATE = PREFIX % "update"
DELETE = PREFIX % "delete"

_PATH = "/v2/accelerator_requests"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_READER_OR_ADMIN,
        "List accelerator requests of the project.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_READER_OR_ADMIN,
        "Show an accelerator request.",
        [{"path": _PATH + "/{uuid}", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        CREATE,
        base.PROJECT_MEMBER_OR_SERVICE,
        "Create accelerator requests.",
        [{"path": _PATH, "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        UPDATE,
        base.PROJECT_MEMBER_OR_SERVICE,
        "Bind or unbind accelerator requests (also requires a service token).",
        [{"path": _PATH, "method": "PATCH"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DELETE,
        base.PROJECT_MEMBER_OR_SERVICE,
        "Delete accelerator requests (bound ones and by instance also require a service token).",
        [
            {"path": _PATH + "?arqs={uuids}", "method": "DELETE"},
            {"path": _PATH + "?instance={uuid}", "method": "DELETE"},
            {"path": _PATH + "/{uuid}", "method": "DELETE"},
        ],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
