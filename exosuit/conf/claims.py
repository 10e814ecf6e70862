"""[claims]: standalone claims (doc/standalone.md)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

__all__ = ["ClaimsSettings", "GROUP", "OPTIONS", "options"]

GROUP = "claims"

OPTIONS: list[cfg.Opt] = [
    cfg.IntOpt(
        "retention",
        default=86400,
        min=0,
        help="Seconds a released standalone claim is still shown (GET /v2/claims/{uuid}, "
        "DELETE again answers 204) before the conductor's claim_expiry job deletes it; 0 "
        "deletes it at the next sweep.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class ClaimsSettings:
    """The ``[claims]`` options."""

    retention: int

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> ClaimsSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.claims
        return cls(
            retention=int(group.retention),
        )
