"""Agent API rules (Exosuit's own)."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

REPORT = "exosuit:agent:report"
IMAGE_DATA = "exosuit:agent:image_data"

_rules = [
    policy.DocumentedRuleDefault(
        REPORT,
        base.ADMIN_OR_SERVICE,
        "Report a host's inventory snapshot and read its desired state, the work binds "
        "and programs wait for, the outcomes of devices' install steps, of claims' CDI "
        "specs and of partition layouts (the agent's credentials).",
        [
            {"path": "/agent/v1/hosts/{hostname}/inventory", "method": "PUT"},
            {"path": "/agent/v1/hosts/{hostname}/accelerator_requests/{uuid}", "method": "PUT"},
            {"path": "/agent/v1/hosts/{hostname}/desired_state", "method": "GET"},
            {"path": "/agent/v1/hosts/{hostname}/programs/{uuid}", "method": "PUT"},
            {"path": "/agent/v1/hosts/{hostname}/activations/{device_uuid}", "method": "PUT"},
            {"path": "/agent/v1/hosts/{hostname}/claims/{claim_uuid}", "method": "PUT"},
            {"path": "/agent/v1/hosts/{hostname}/partitions/{device_uuid}", "method": "PUT"},
        ],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        IMAGE_DATA,
        base.ADMIN_OR_SERVICE,
        "Download the data of any image a program loads (the agent's credentials).",
        [{"path": "/agent/v1/images/{image_uuid}/data", "method": "GET"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
