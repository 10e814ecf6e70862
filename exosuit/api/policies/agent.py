"""Agent API rules (Exosuit's own)."""

from oslo_policy import policy

from exosuit.api.policies import base

REPORT = "exosuit:agent:report"

_rules = [
    policy.DocumentedRuleDefault(
        REPORT, base.ADMIN_OR_SERVICE,
        "Report a host's inventory snapshot and read its desired state, and the work "
        "binds wait for (the agent's credentials).",
        [{"path": "/agent/v1/hosts/{hostname}/inventory", "method": "PUT"},
         {"path": "/agent/v1/hosts/{hostname}/accelerator_requests/{uuid}",
          "method": "PUT"}],
        scope_types=["project"],
    ),
]


def list_rules():
    return _rules
