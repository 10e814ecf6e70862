"""Deployable rules."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "cyborg:deployable:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"
PROGRAM = PREFIX % "program"
# Exosuit's (microversion 2.6): a deployable's latest program.
GET_PROGRAM = "exosuit:deployable:get_program"

_PATH = "/v2/deployables"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_MANAGER_OR_ADMIN,
        "List deployables.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show a deployable.",
        [{"path": _PATH + "/{uuid}", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        PROGRAM,
        base.ADMIN,
        "Program a deployable (FPGA image).",
        [{"path": _PATH + "/{uuid}/program", "method": "PATCH"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_PROGRAM,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show a deployable's latest program (microversion 2.6).",
        [{"path": _PATH + "/{uuid}/program", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
