"""[audit]: how long the audit trail is kept (doc/audit.md)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

__all__ = ["AuditSettings", "GROUP", "OPTIONS", "options"]

GROUP = "audit"

OPTIONS: list[cfg.Opt] = [
    cfg.IntOpt(
        "retention",
        default=7776000,
        min=0,
        help="Seconds an audit record is kept (90 days by default) before the conductor's "
        "audit_sweep job deletes it (never one whose notification is still to be sent); "
        "0 keeps every record.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class AuditSettings:
    """The ``[audit]`` options."""

    retention: int

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> AuditSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.audit
        return cls(
            retention=int(group.retention),
        )
