"""Discovery rules (microversion 2.7): only an admin asks hosts to discover now; a
project manager or an admin follows a discovery (as devices are read)."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "exosuit:discovery:%s"
CREATE = PREFIX % "create"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"

_PATH = "/v2/discoveries"

_rules = [
    policy.DocumentedRuleDefault(
        CREATE,
        base.ADMIN,
        "Ask hosts to discover their devices now.",
        [{"path": _PATH, "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_MANAGER_OR_ADMIN,
        "List discoveries.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show a discovery: each host asked and when its new inventory arrived.",
        [{"path": _PATH + "/{uuid}", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
