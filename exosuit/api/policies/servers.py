"""Server attach and detach rules (microversion 2.10, doc/standalone.md "Servers"): an
attachment is a claim of the caller's project, so the defaults are the claims': a
project member attaches and detaches, an admin anything."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "exosuit:server:%s"
ATTACH = PREFIX % "attach"
DETACH = PREFIX % "detach"

_PATH = "/v2/servers/{server}"

_rules = [
    policy.DocumentedRuleDefault(
        ATTACH,
        base.PROJECT_MEMBER_OR_ADMIN,
        "Attach a device profile's devices to a server (a claim with the server as its "
        "consumer; refused for a server Nova manages).",
        [{"path": _PATH + "/attach", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DETACH,
        base.PROJECT_MEMBER_OR_ADMIN,
        "Detach a server's devices (its claims released).",
        [{"path": _PATH + "/detach", "method": "POST"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
