"""[agent]: the agent's API, drivers, timing and cache, with keystoneauth's session and
auth options (its credentials and TLS; ``timeout`` bounds each inventory report).

An agent without Keystone registers only ``timeout`` of those (``AGENT_TIMEOUT``, as
keystoneauth declares it): exosuit.conf.make_agent_conf."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from exosuit.conf import _keystoneauth
from exosuit.conf._values import texts

__all__ = ["AGENT_TIMEOUT", "AgentSettings", "GROUP", "KEYSTONE_KEYS", "OPTIONS", "options"]

GROUP = "agent"

OPTIONS: list[cfg.Opt] = [
    # A StrOpt, not a URIOpt: the empty value (use the catalog) must be accepted.
    cfg.StrOpt(
        "api_url",
        default="http://127.0.0.1:6666",
        help="Base URL of exosuit-api (without /v2). Empty: the `accelerator` endpoint "
        "of the Keystone catalog (its /v2 suffix removed).",
    ),
    cfg.ListOpt(
        "enabled_drivers",
        default=[
            "pci",
            "nvidia_gpu",
            "intel_fpga",
            "xilinx_fpga",
            "intel_qat",
            "sriov_nic",
            "nvme",
        ],
        help="Drivers the agent runs (entry points of the exosuit.drivers group). "
        "`simulated` adds simulated devices.",
    ),
    cfg.IntOpt(
        "report_interval",
        default=60,
        min=1,
        help="Seconds between discoveries (and reports) when nothing changes.",
    ),
    cfg.IntOpt(
        "report_jitter",
        default=10,
        min=0,
        help="The first report waits a random time up to this many seconds, so a "
        "fleet that boots together does not report together.",
    ),
    cfg.IntOpt(
        "max_backoff",
        default=60,
        min=1,
        help="Longest wait between retries while the API is unreachable.",
    ),
    cfg.IntOpt(
        "removal_grace",
        default=120,
        min=0,
        help="Seconds a device missing from discovery is still reported (as "
        "missing) before it is dropped; 0 drops it at once.",
    ),
    cfg.StrOpt("state_dir", default="$state_path/agent", help="Directory of the agent's cache."),
    cfg.FloatOpt(
        "desired_state_interval",
        default=5.0,
        min=0.5,
        help="Seconds between two looks at the host's desired state (programs to run …): "
        "a conditional GET answered 304 while nothing changed.",
    ),
    cfg.IntOpt(
        "image_cache_size",
        default=2 * 1024**3,
        min=0,
        help="Bytes of images (bitstreams) the agent keeps, by hash, least recently used "
        "first out; the previous image of a device is kept for rollback.",
    ),
    cfg.StrOpt(
        "sysfs_root",
        default="/",
        help="Root under which the drivers read sys/ (a recorded tree in tests).",
    ),
    cfg.BoolOpt(
        "uevents", default=True, help="Discover at once on PCI add/remove/change uevents (pyudev)."
    ),
    cfg.PortOpt(
        "metrics_port",
        default=0,
        help="Port of the agent's own /metrics, for a node-local scrape of this host's "
        "devices and live figures (doc/metrics.md); 0: none.",
    ),
    cfg.StrOpt(
        "metrics_host",
        default="127.0.0.1",
        help="Address the agent's /metrics listens on (0.0.0.0 or :: for a Prometheus "
        "on another machine).",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group: Exosuit's and keystoneauth's (imports keystoneauth)."""
    return list(OPTIONS) + _keystoneauth.session_and_auth_opts()


# [agent] keys that need keystoneauth's options (Keystone, TLS); ``auth_plugin`` is
# auth_type's deprecated name.
KEYSTONE_KEYS = frozenset(
    {"auth_type", "auth_plugin", "auth_section", "cafile", "certfile", "keyfile", "insecure"}
)
# The one keystoneauth session option an agent without Keystone reads: each request's
# bound, as keystoneauth's (exosuit's default: 30 s).
AGENT_TIMEOUT = cfg.FloatOpt(
    "timeout", default=30, help="Timeout value for http requests to the API, in seconds."
)


@dataclasses.dataclass(frozen=True)
class AgentSettings:
    """The ``[agent]`` options the agent reads (an empty ``api_url``: the catalog's),
    with keystoneauth's ``timeout``, registered in every configuration of an agent."""

    api_url: str
    enabled_drivers: tuple[str, ...]
    report_interval: int
    report_jitter: int
    max_backoff: int
    removal_grace: int
    state_dir: str
    desired_state_interval: float
    image_cache_size: int
    sysfs_root: str
    uevents: bool
    metrics_port: int
    metrics_host: str
    timeout: float

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> AgentSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.agent
        return cls(
            api_url=str(group.api_url or ""),
            enabled_drivers=texts(group.enabled_drivers),
            report_interval=int(group.report_interval),
            report_jitter=int(group.report_jitter),
            max_backoff=int(group.max_backoff),
            removal_grace=int(group.removal_grace),
            state_dir=str(group.state_dir),
            desired_state_interval=float(group.desired_state_interval),
            image_cache_size=int(group.image_cache_size),
            sysfs_root=str(group.sysfs_root),
            uevents=bool(group.uevents),
            metrics_port=int(group.metrics_port),
            metrics_host=str(group.metrics_host),
            timeout=float(group.timeout),
        )
