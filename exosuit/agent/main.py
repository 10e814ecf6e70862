"""Assemble and run the agent from configuration (``exosuit-agent run``)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from oslo_config import cfg

from exosuit.agent.activations import ActivationReconciler
from exosuit.agent.cache import AgentCache, CacheLocked, CacheTooNew
from exosuit.agent.cdi import CdiReconciler
from exosuit.agent.clock import Clock, SystemClock
from exosuit.agent.events import UeventWatcher
from exosuit.agent.http import PlainSession
from exosuit.agent.partitions import PartitionReconciler
from exosuit.agent.plugins import DriverSet
from exosuit.agent.programs import ProgramReconciler, ProgramSession
from exosuit.agent.reconciler import Reconciler
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import Agent
from exosuit.agent.slices import SliceReconciler
from exosuit.backoff import backoff_delay
from exosuit.conf import AgentSettings, CdiSettings, DefaultSettings
from exosuit.drivers.base import Driver
from exosuit.images.store import ContentStore

if TYPE_CHECKING:
    from keystoneauth1 import session as ks_session

LOG = logging.getLogger(__name__)

__all__ = [
    "build_agent",
    "build_programs",
    "build_reconcilers",
    "load_drivers",
    "make_session",
    "run_agent",
]

GROUP = "agent"


# [agent] options that only a keystoneauth session honours.
_KEYSTONE_OPTIONS = ("auth_type", "auth_section", "cafile", "certfile", "keyfile", "insecure")


def needs_keystoneauth(conf: cfg.ConfigOpts) -> bool:
    """Whether the agent needs keystoneauth to reach its API: no plain ``http://``
    ``[agent] api_url`` (the catalog, or TLS), or a Keystone or TLS option set."""
    url = AgentSettings.from_conf(conf).api_url
    if not url.startswith("http://"):
        return True
    group = conf.agent
    return any(name in group and group[name] not in (None, False) for name in _KEYSTONE_OPTIONS)


def make_session(conf: cfg.ConfigOpts) -> Any:
    """The agent's HTTP session: its own plain one (agent/http.py) for a plain
    ``http://`` API without Keystone, else a keystoneauth session from [agent]
    (authenticated if [agent] auth_type is set)."""
    if not needs_keystoneauth(conf):
        return PlainSession(timeout=AgentSettings.from_conf(conf).timeout)
    # keystoneauth's [agent] options were registered with the configuration
    # (exosuit.conf.make_agent_conf registers them whenever this is reached).
    from keystoneauth1 import loading as ks_loading

    auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
    return ks_loading.load_session_from_conf_options(conf, GROUP, auth=auth)


def api_endpoint(conf: cfg.ConfigOpts, session: Any, *, clock: Clock | None = None) -> str:
    """[agent] api_url, else the ``accelerator`` endpoint of the Keystone catalog.

    Keystone unreachable (or answering 5xx) at start is waited out with exponential
    backoff and one log line, as the API is later; credentials Keystone refuses, or a
    catalog without the service, stop the agent with the reason.
    """
    settings = AgentSettings.from_conf(conf)
    if settings.api_url:
        return settings.api_url
    from keystoneauth1 import exceptions as ksa_exc

    if session.auth is None:
        raise SystemExit(
            "exosuit-agent: [agent] api_url is empty and no [agent] auth_type "
            "is set: without Keystone there is no catalog to find the API in"
        )
    clock = clock if clock is not None else SystemClock()
    never = threading.Event()  # nothing cuts this wait short: SIGTERM ends the process
    failures = 0
    while True:
        try:
            url = session.get_endpoint(service_type="accelerator", interface="internal")
            break
        except (ksa_exc.ConnectionError, ksa_exc.HttpError) as error:
            status = getattr(error, "http_status", None)
            if status is not None and status < 500:
                raise SystemExit(
                    f"exosuit-agent: Keystone refused the agent's [agent] credentials: {error}"
                ) from None
            if failures == 0:
                LOG.warning(
                    "Keystone unreachable while looking up the API in the catalog "
                    "(%s); retrying with exponential backoff",
                    error,
                )
            failures += 1
            clock.wait(never, backoff_delay(failures, 1.0, settings.max_backoff))
        except ksa_exc.CatalogException as error:
            raise SystemExit(
                f"exosuit-agent: no [agent] api_url and no accelerator "
                f"endpoint in the catalog ({error})"
            ) from None
    if failures:
        LOG.warning("Keystone reachable again; the API is at %s", url)
    if not url:
        raise SystemExit(
            "exosuit-agent: no [agent] api_url and no accelerator endpoint in the catalog"
        )
    url = str(url).rstrip("/")
    return url[: -len("/v2")] if url.endswith("/v2") else url


def load_drivers(
    conf: cfg.ConfigOpts, hostname: str, sysfs_root: str, names: list[str] | None = None
) -> list[Driver]:
    """The drivers ``names`` (default ``[agent] enabled_drivers``), each with its options
    and its own folder of the agent's state directory (``<state_dir>/drivers/<name>``),
    which ``discover`` reads as the agent would. The agent itself keeps them in a
    ``DriverSet`` (agent/plugins.py), which rebuilds them as the desired state's
    overrides change."""
    return DriverSet.from_conf(conf, hostname, sysfs_root, names).drivers


def build_agent(
    conf: cfg.ConfigOpts,
    session: ks_session.Session | None = None,
    lock: bool = False,
    *,
    clock: Clock | None = None,
) -> Agent:
    """The agent ``conf`` describes; ``lock``: take the state directory (run_agent);
    ``clock``: what it waits with (default: the real one)."""
    hostname = DefaultSettings.from_conf(conf).host
    settings = AgentSettings.from_conf(conf)
    session = session if session is not None else make_session(conf)
    clock = clock if clock is not None else SystemClock()
    reporter = Reporter(
        session,
        api_endpoint(conf, session, clock=clock),
        hostname,
        timeout=settings.timeout,
        clock=clock,
    )
    plugins = DriverSet.from_conf(conf, hostname, settings.sysfs_root)
    cache = AgentCache(os.path.abspath(settings.state_dir))
    if lock:
        cache.lock()
    return Agent(
        hostname,
        plugins,
        reporter,
        cache,
        interval=settings.report_interval,
        jitter=settings.report_jitter,
        removal_grace=settings.removal_grace,
        max_backoff=settings.max_backoff,
        clock=clock,
        reconcilers=build_reconcilers(
            conf, hostname, plugins, session, reporter.endpoint, cache, clock
        ),
    )


def build_reconcilers(
    conf: cfg.ConfigOpts,
    hostname: str,
    plugins: DriverSet,
    session: ProgramSession,
    endpoint: str,
    cache: AgentCache,
    clock: Clock,
) -> list[Reconciler[Any, Any]]:
    """The host work of an agent, in the order its loop runs it: the programs (which
    poll the desired state), the install and uninstall steps, the partition layouts, the
    on-demand slices, the CDI specs of containers (into ``[cdi] spec_dir``). Each
    outcome not taken is sent again with backoff up to ``[agent] max_backoff``."""
    settings, cdi = AgentSettings.from_conf(conf), CdiSettings.from_conf(conf)
    options: dict[str, Any] = {
        "timeout": settings.timeout,
        "clock": clock,
        "max_backoff": settings.max_backoff,
    }
    return [
        build_programs(conf, hostname, plugins, session, endpoint, cache, clock),
        ActivationReconciler(hostname, plugins, session, endpoint, cache, **options),
        PartitionReconciler(hostname, plugins, session, endpoint, cache, **options),
        SliceReconciler(hostname, plugins, session, endpoint, **options),
        CdiReconciler(hostname, plugins, session, endpoint, cache, cdi.spec_dir, **options),
    ]


def build_programs(
    conf: cfg.ConfigOpts,
    hostname: str,
    drivers: Sequence[Driver] | DriverSet,
    session: ProgramSession,
    endpoint: str,
    cache: AgentCache,
    clock: Clock,
) -> ProgramReconciler:
    """The reconciler of the host's programs: its image cache is ``<state_dir>/images``,
    bounded by ``[agent] image_cache_size``; it polls every ``desired_state_interval``."""
    settings = AgentSettings.from_conf(conf)
    store = ContentStore(
        os.path.join(os.path.abspath(settings.state_dir), "images"), settings.image_cache_size
    )
    return ProgramReconciler(
        hostname,
        drivers,
        session,
        endpoint,
        store,
        cache,
        clock=clock,
        interval=settings.desired_state_interval,
        timeout=settings.timeout,
        max_backoff=settings.max_backoff,
    )


def run_agent(conf: cfg.ConfigOpts) -> int:
    try:
        agent = build_agent(conf, lock=True)
    except CacheTooNew as error:
        raise SystemExit(
            f"exosuit-agent: {error}; upgrade this agent, or move the cache "
            "aside to start from nothing"
        ) from None
    except CacheLocked as error:
        raise SystemExit(
            f"exosuit-agent: {error}; stop it first, or give this agent its own [agent] state_dir"
        ) from None
    LOG.info(
        "exosuit-agent for host %s: drivers %s, reporting to %s every %d s, cache %s, "
        "desired state every %g s, CDI specs in %s",
        agent.hostname,
        ", ".join(d.name for d in agent.drivers),
        agent.reporter.url,
        agent.interval,
        agent.cache.path,
        next((r.interval for r in agent.reconcilers if isinstance(r, ProgramReconciler)), 0),
        next(
            (r.directory.path for r in agent.reconcilers if isinstance(r, CdiReconciler)),
            "(none)",
        ),
    )
    settings = AgentSettings.from_conf(conf)
    metrics = None
    if settings.metrics_port:
        from exosuit.agent.metrics import serve_metrics  # only then: its server costs memory

        metrics = serve_metrics(settings.metrics_host, settings.metrics_port, agent)
    watcher = None
    if settings.uevents:
        watcher = UeventWatcher(lambda action, path: agent.wake())
        watcher.start()
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    signal.signal(signal.SIGINT, lambda *_: agent.stop())
    signal.signal(signal.SIGHUP, agent.wake)
    try:
        agent.run()
    finally:
        if watcher is not None:
            watcher.stop()
        if metrics is not None:
            metrics.stop()
    LOG.info("exosuit-agent stopped")
    return 0
