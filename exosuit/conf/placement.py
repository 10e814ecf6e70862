"""[placement]: how Exosuit keeps Placement equal to its inventory, and keystoneauth's
options to reach it."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from exosuit.conf import _keystoneauth
from exosuit.conf._values import optional_text

__all__ = ["GROUP", "OPTIONS", "PlacementSettings", "options"]

GROUP = "placement"

OPTIONS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "manage_compute_providers",
        default=False,
        help="Standalone mode: create each host's compute node provider (named after the "
        "host) when it is missing. False (a cloud): nova-compute creates it and the sync of "
        "a host waits until it exists. `exosuit serve --placement-url` sets it.",
    ),
    cfg.IntOpt(
        "retry_interval",
        default=10,
        min=1,
        help="Seconds before a host's Placement sync that could not finish (Placement "
        "unreachable, compute node provider not there yet, removal waiting for "
        "allocations to go) runs again; doubled at each further try.",
    ),
    cfg.IntOpt(
        "max_retry_interval",
        default=300,
        min=1,
        help="Longest wait between two tries of a host's Placement sync.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group: Exosuit's and keystoneauth's (imports keystoneauth)."""
    return list(OPTIONS) + _keystoneauth.adapter_session_and_auth_opts("placement")


@dataclasses.dataclass(frozen=True)
class PlacementSettings:
    """The ``[placement]`` options, with the two of keystoneauth Exosuit reads itself
    (``auth_type``: None without credentials; ``endpoint_override``)."""

    manage_compute_providers: bool
    retry_interval: int
    max_retry_interval: int
    auth_type: str | None
    endpoint_override: str | None

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> PlacementSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.placement
        return cls(
            manage_compute_providers=bool(group.manage_compute_providers),
            retry_interval=int(group.retry_interval),
            max_retry_interval=int(group.max_retry_interval),
            auth_type=optional_text(group.auth_type),
            endpoint_override=optional_text(group.endpoint_override),
        )
