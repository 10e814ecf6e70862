"""[dashboard]: the console's charts: the usage and allocation history the API keeps, or
the Prometheus it reads instead (doc/dashboard.md, "Charts")."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

__all__ = ["GROUP", "OPTIONS", "DashboardSettings", "options"]

GROUP = "dashboard"

OPTIONS: list[cfg.Opt] = [
    cfg.IntOpt(
        "history_resolution",
        default=300,
        min=0,
        help="Seconds between two samples of the recent history: the conductor's "
        "usage_history job records every device's usage (as its host last reported it) "
        "and the attach handles held and free by device model once per bucket of this "
        "width (it runs every half of it); 0 records nothing.",
    ),
    cfg.IntOpt(
        "history_recent",
        default=21600,
        min=0,
        help="Seconds the samples are kept at history_resolution (6 hours by default); "
        "older ones are averaged into buckets of history_coarse_resolution.",
    ),
    cfg.IntOpt(
        "history_coarse_resolution",
        default=3600,
        min=1,
        help="Seconds of one bucket of the older history (an average of the samples in it).",
    ),
    cfg.IntOpt(
        "history_retention",
        default=172800,
        min=60,
        help="Seconds the history is kept at all (2 days by default); older buckets are "
        "deleted by the usage_history job. At most history_recent / history_resolution + "
        "history_retention / history_coarse_resolution + a few rows are kept per device "
        "(and per device model for the allocation history).",
    ),
    cfg.StrOpt(
        "prometheus_url",
        default="",
        help="The base URL of a Prometheus that scrapes this API's /metrics (e.g. "
        "http://prometheus:9090): when set, GET /v2/devices/{uuid}/usage_history and GET "
        "/v2/allocation_history (microversion 2.11) answer from its query_range API "
        "instead of the database (the history is still recorded unless "
        "history_resolution is 0).",
    ),
    cfg.FloatOpt(
        "prometheus_timeout",
        default=10.0,
        min=0.1,
        help="Seconds a query to prometheus_url may take before the API answers 503.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class DashboardSettings:
    """The ``[dashboard]`` options."""

    history_resolution: int
    history_recent: int
    history_coarse_resolution: int
    history_retention: int
    prometheus_url: str
    prometheus_timeout: float

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> DashboardSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.dashboard
        return cls(
            history_resolution=int(group.history_resolution),
            history_recent=int(group.history_recent),
            history_coarse_resolution=int(group.history_coarse_resolution),
            history_retention=int(group.history_retention),
            prometheus_url=str(group.prometheus_url or "").strip().rstrip("/"),
            prometheus_timeout=float(group.prometheus_timeout),
        )
