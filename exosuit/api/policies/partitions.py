"""Partition rules (microversion 2.9): read like devices (a project manager or an admin),
set by an admin, as the device's other maintenance."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

GET = "exosuit:device:partitions:get"
SET = "exosuit:device:partitions:set"

_PATH = "/v2/devices/{uuid}/partitions"

_rules = [
    policy.DocumentedRuleDefault(
        GET,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show a device's partition layout, how its agent applied it, and its slices.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        SET,
        base.ADMIN,
        "Set a device's partition layout (vGPU mdevs, MIG instances, SR-IOV VFs); refused "
        "when it would remove a slice in use.",
        [{"path": _PATH, "method": "PUT"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
