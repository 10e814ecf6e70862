"""[serve]: the simulated host of ``exosuit serve``."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

__all__ = ["GROUP", "OPTIONS", "ServeSettings", "options"]

GROUP = "serve"

OPTIONS: list[cfg.Opt] = [
    cfg.IntOpt(
        "report_interval",
        default=60,
        min=1,
        help="Seconds between inventory reports of the simulated host of `exosuit serve`.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """The ``[serve]`` options."""

    report_interval: int

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> ServeSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.serve
        return cls(
            report_interval=int(group.report_interval),
        )
