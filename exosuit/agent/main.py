"""Assemble and run the agent from configuration (``exosuit-agent run``)."""

from __future__ import annotations

import logging
import os
import signal
import time

from keystoneauth1 import exceptions as ksa_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from exosuit.agent.cache import AgentCache, CacheLocked, CacheTooNew
from exosuit.agent.events import UeventWatcher
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import Agent, backoff_delay
from exosuit.conf import driver_settings
from exosuit.drivers import DriverContext, load_driver
from exosuit.drivers.runner import RecordedRunner, SubprocessRunner

LOG = logging.getLogger(__name__)

__all__ = ["build_agent", "load_drivers", "make_session", "run_agent"]

GROUP = "agent"


def make_session(conf: cfg.ConfigOpts):
    """A keystoneauth session from [agent] (registered with the rest of the options, see
    exosuit/conf.py): authenticated if [agent] auth_type is set, else plain."""
    auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
    return ks_loading.load_session_from_conf_options(conf, GROUP, auth=auth)


def api_endpoint(conf: cfg.ConfigOpts, session, *, sleep=time.sleep) -> str:
    """[agent] api_url, else the ``accelerator`` endpoint of the Keystone catalog.

    Keystone unreachable (or answering 5xx) at start is waited out with exponential
    backoff and one log line, as the API is later; credentials Keystone refuses, or a
    catalog without the service, stop the agent with the reason.
    """
    if conf.agent.api_url:
        return conf.agent.api_url
    if session.auth is None:
        raise SystemExit("exosuit-agent: [agent] api_url is empty and no [agent] auth_type "
                         "is set: without Keystone there is no catalog to find the API in")
    attempt = 0
    while True:
        try:
            url = session.get_endpoint(service_type="accelerator", interface="internal")
            break
        except (ksa_exc.ConnectionError, ksa_exc.HttpError) as error:
            status = getattr(error, "http_status", None)
            if status is not None and status < 500:
                raise SystemExit(f"exosuit-agent: Keystone refused the agent's [agent] "
                                 f"credentials: {error}") from None
            if attempt == 0:
                LOG.warning("Keystone unreachable while looking up the API in the catalog "
                            "(%s); retrying with exponential backoff", error)
            sleep(backoff_delay(attempt, conf.agent.max_backoff))
            attempt += 1
        except ksa_exc.CatalogException as error:
            raise SystemExit(f"exosuit-agent: no [agent] api_url and no accelerator "
                             f"endpoint in the catalog ({error})") from None
    if attempt:
        LOG.warning("Keystone reachable again; the API is at %s", url)
    if not url:
        raise SystemExit("exosuit-agent: no [agent] api_url and no accelerator endpoint in "
                         "the catalog")
    url = url.rstrip("/")
    return url[: -len("/v2")] if url.endswith("/v2") else url


def load_drivers(conf: cfg.ConfigOpts, hostname: str, sysfs_root: str,
                 names: list[str] | None = None) -> list:
    # A recorded tree's tools answer from its commands.json (as in `discover`), never
    # this machine's tools: the agent reports what `discover` prints.
    runner = (SubprocessRunner() if os.path.abspath(sysfs_root) == "/"
              else RecordedRunner.from_file(os.path.join(sysfs_root, "commands.json")))
    drivers = []
    for name in names if names is not None else conf.agent.enabled_drivers:
        context = DriverContext(hostname=hostname, sysfs_root=sysfs_root, runner=runner,
                                settings=driver_settings(conf, name))
        drivers.append(load_driver(name, context))
    return drivers


def build_agent(conf: cfg.ConfigOpts, session=None, lock: bool = False) -> Agent:
    """The agent ``conf`` describes; ``lock``: take the state directory (run_agent)."""
    hostname = conf.host
    session = session if session is not None else make_session(conf)
    reporter = Reporter(session, api_endpoint(conf, session), hostname,
                        timeout=conf.agent.timeout)
    drivers = load_drivers(conf, hostname, conf.agent.sysfs_root)
    cache = AgentCache(os.path.abspath(conf.agent.state_dir))
    if lock:
        cache.lock()
    return Agent(
        hostname, drivers, reporter, cache,
        interval=conf.agent.report_interval,
        jitter=conf.agent.report_jitter,
        removal_grace=conf.agent.removal_grace,
        max_backoff=conf.agent.max_backoff,
    )


def run_agent(conf: cfg.ConfigOpts) -> int:
    try:
        agent = build_agent(conf, lock=True)
    except CacheTooNew as error:
        raise SystemExit(f"exosuit-agent: {error}; upgrade this agent, or move the cache "
                         "aside to start from nothing") from None
    except CacheLocked as error:
        raise SystemExit(f"exosuit-agent: {error}; stop it first, or give this agent "
                         "its own [agent] state_dir") from None
    LOG.info("exosuit-agent for host %s: drivers %s, reporting to %s every %d s, cache %s",
             agent.hostname, ", ".join(d.name for d in agent.drivers), agent.reporter.url,
             agent.interval, agent.cache.path)
    watcher = None
    if conf.agent.uevents:
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
    LOG.info("exosuit-agent stopped")
    return 0
