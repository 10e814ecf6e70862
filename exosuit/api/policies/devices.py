"""Device rules."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "cyborg:device:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"
ENABLE = PREFIX % "enable"
DISABLE = PREFIX % "disable"
# Exosuit's own (microversion 2.7): mark devices ready or inactive (doc/devices.md).
ACTIVATE = "exosuit:device:activate"
# Microversion 2.9: drain a device for maintenance, and undrain it (doc/devices.md).
DRAIN = "exosuit:device:drain"
UNDRAIN = "exosuit:device:undrain"
# Microversion 2.9: clear a device's health (offered again) or hold it back by hand.
HEALTH = "exosuit:device:health"
# Microversion 2.10: delete a lost device; set or remove devices' labels.
DELETE = "exosuit:device:delete"
LABEL = "exosuit:device:label"

_PATH = "/v2/devices"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_MANAGER_OR_ADMIN,
        "List devices.",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_MANAGER_OR_ADMIN,
        "Show a device.",
        [{"path": _PATH + "/{uuid}", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        ENABLE,
        base.ADMIN,
        "Enable a device.",
        [{"path": _PATH + "/{uuid}/enable", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DISABLE,
        base.ADMIN,
        "Disable a device (maintenance).",
        [{"path": _PATH + "/{uuid}/disable", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        ACTIVATE,
        base.ADMIN,
        "Mark devices ready (offered, once their host's agent installed them) or inactive.",
        [{"path": "/v2/device_activations", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DRAIN,
        base.ADMIN,
        "Drain a device: no new workload is scheduled or claimed on it; what holds it keeps it.",
        [{"path": _PATH + "/{uuid}/drain", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        UNDRAIN,
        base.ADMIN,
        "Undrain a device: it takes new workload again.",
        [{"path": _PATH + "/{uuid}/undrain", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        HEALTH,
        base.ADMIN,
        "Clear a device held back as unhealthy (offered again now), or hold one back by hand.",
        [{"path": _PATH + "/{uuid}/health", "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DELETE,
        base.ADMIN,
        "Delete a lost device (gone from its host while held) that nothing holds any more.",
        [{"path": _PATH + "/{uuid}", "method": "DELETE"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        LABEL,
        base.ADMIN,
        "Set or remove labels on devices (selectable in device profiles as accel:label:).",
        [{"path": "/v2/device_labels", "method": "POST"}],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
