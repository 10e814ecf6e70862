"""Attach handle rules (microversion 2.5): read like devices, by a project manager or
an admin."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "exosuit:attach_handle:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"

_PATH = "/v2/attach_handles"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_MANAGER_OR_ADMIN,
        "List attach handles and the accelerator requests holding them.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show an attach handle.",
        [{"path": _PATH + "/{uuid}", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
