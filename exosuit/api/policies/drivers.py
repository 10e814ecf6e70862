"""Driver rules (microversion 2.7): a project manager or an admin reads what each host's
agent runs (as devices); only an admin installs, updates or uninstalls a driver."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "exosuit:driver:%s"
GET_ALL = PREFIX % "get_all"
INSTALL = PREFIX % "install"
UPDATE = PREFIX % "update"
UNINSTALL = PREFIX % "uninstall"

_PATH = "/v2/drivers"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_MANAGER_OR_ADMIN,
        "List each host's driver plug-ins: what the agent reports and what was asked.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        INSTALL,
        base.ADMIN,
        "Enable a driver on hosts (with options overriding the agents' files).",
        [{"path": _PATH + "/{name}/install", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        UPDATE,
        base.ADMIN,
        "Change a driver's options on hosts.",
        [{"path": _PATH + "/{name}/update", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        UNINSTALL,
        base.ADMIN,
        "Disable a driver on hosts; its free devices there become inactive.",
        [{"path": _PATH + "/{name}/uninstall", "method": "POST"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
