"""[health]: device health, one group for both sides (``exosuit serve`` runs both): the
server's recovery of devices held back as unhealthy, and the thresholds the agent hands
its drivers (``exosuit.drivers.health.OPTIONS``, read there as
``exosuit.drivers.health.HealthSettings``; the agent registers those alone)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from oslo_config import cfg

if TYPE_CHECKING:
    from exosuit.drivers.health import HealthSettings

__all__ = ["GROUP", "OPTIONS", "HealthGroupSettings", "options"]

GROUP = "health"

OPTIONS: list[cfg.Opt] = [
    cfg.IntOpt(
        "recover_after",
        default=600,
        min=0,
        help="Seconds a device reported unhealthy must then be reported healthy (ok or "
        "warning, without a change of health) before it is offered again; the conductor's "
        "health_recovery job looks every [conductor] health_sweep_interval. 0: offered "
        "again at that job's first run after a healthy report. An operator may clear it at "
        "once "
        "(POST /v2/devices/{uuid}/health, doc/devices.md, Health).",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group: the server's and the drivers' thresholds."""
    # Imported here: listing the options of the server imports no driver code before
    # it is asked for.
    from exosuit.drivers import health as driver_health

    return list(OPTIONS) + list(driver_health.OPTIONS)


@dataclasses.dataclass(frozen=True)
class HealthGroupSettings:
    """The ``[health]`` options: ``recover_after`` (the server's) and ``thresholds`` (the
    drivers', as they read them)."""

    recover_after: int
    thresholds: HealthSettings

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> HealthGroupSettings:
        """The group's values in ``conf`` (a configuration that registered it whole)."""
        from exosuit.drivers import health as driver_health

        group = conf.health
        return cls(
            recover_after=int(group.recover_after),
            thresholds=driver_health.HealthSettings.from_mapping(
                {opt.dest: group[opt.dest] for opt in driver_health.OPTIONS}
            ),
        )
