"""``exosuit serve``: the embedded default in one process.

The API (cheroot, threaded), SQLite under the data directory, noauth, and
this host's agent in-process, named ``[DEFAULT] host``: the simulated driver
(so that every endpoint has something real to show) plus the enabled hardware
drivers, reporting through the agent API like any agent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, cast

from cheroot import wsgi as cheroot_wsgi
from oslo_config import cfg

from exosuit import port_check
from exosuit.agent.cache import AgentCache, CacheLocked
from exosuit.agent.clock import SystemClock
from exosuit.agent.main import build_reconcilers
from exosuit.agent.plugins import DriverSet
from exosuit.agent.reporter import Reporter, ReportOutcome
from exosuit.agent.service import Agent
from exosuit.agent.transport import WsgiSession
from exosuit.api.deploy import NoAuthMiddleware, loadapp, make_database
from exosuit.api.http_server import GuardedServer, Guards
from exosuit.conductor.worker import Conductor
from exosuit.conf import (
    AgentSettings,
    ApiSettings,
    CdiSettings,
    DatabaseSettings,
    DefaultSettings,
    PlacementSettings,
    ServeSettings,
)
from exosuit.db import migration
from exosuit.drivers.simulated import SimulatedDriver

# What the in-process agent calls: the application, or it behind NoAuthMiddleware.
WsgiApp = Any

LOG = logging.getLogger(__name__)

__all__ = ["LocalHost", "serve"]

# Where `exosuit device list` connects when given no --os-endpoint (exosuit/cli/client.py
# DEFAULT_URL; tests/cli holds the two equal).
CLIENT_DEFAULT_URL = "http://127.0.0.1:6666"


class LocalHost:
    """The agent of this host, in-process: the simulated driver plus the enabled hardware
    drivers (those that find nothing cost nothing), reporting straight to the app and
    running the programs of its desired state (the simulated FPGA loads images)."""

    def __init__(self, conf: cfg.ConfigOpts, app: WsgiApp) -> None:
        # CDI specs go under the data directory ($state_path/cdi: no root needed, and a
        # demo leaves nothing in the host's /var/run/cdi) unless a file sets [cdi]
        # spec_dir (doc/cdi.md).
        host = DefaultSettings.from_conf(conf)
        conf.set_default("spec_dir", os.path.join(host.state_path, "cdi"), group="cdi")
        agent = AgentSettings.from_conf(conf)
        names = list(dict.fromkeys(["simulated", *agent.enabled_drivers]))
        # A DriverSet: the operator's overrides enable, disable or reconfigure them.
        drivers = DriverSet.from_conf(conf, host.host, agent.sysfs_root, names)
        cache = AgentCache(os.path.abspath(agent.state_dir))
        cache.lock()  # CacheLocked: another exosuit serve uses this data directory
        session = WsgiSession(app)
        clock = SystemClock()
        reporter = Reporter(session, "http://exosuit.local", host.host, clock=clock)
        self.agent = Agent(
            host.host,
            drivers,
            reporter,
            cache,
            interval=ServeSettings.from_conf(conf).report_interval,
            jitter=0,
            removal_grace=agent.removal_grace,
            clock=clock,
            # The agent's host work: programs of the simulated FPGA (and of real ones:
            # doc/programming.md), install steps, partitions and slices, the CDI specs of
            # the claims for containers (doc/cdi.md).
            reconcilers=build_reconcilers(
                conf, host.host, drivers, session, reporter.endpoint, cache, clock
            ),
        )
        self._thread: threading.Thread | None = None

    @property
    def driver(self) -> SimulatedDriver:
        # The first of the names given to the DriverSet, always: see __init__.
        return cast(SimulatedDriver, self.agent.drivers[0])

    def report(self) -> ReportOutcome:
        outcome = self.agent.deliver(self.agent.snapshot())
        if outcome is None or outcome.kind != "ok":
            raise RuntimeError(f"inventory report failed: {outcome}")
        return outcome

    def start(self) -> None:
        """Report once (so the API has devices when it starts listening), then loop."""
        self.report()
        self._thread = threading.Thread(target=self.agent.run, name="local-host", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.agent.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.agent.cache.unlock()


def _exosuit_command() -> str:
    """How to run ``exosuit`` from here: its name when it is on PATH, else its path
    (``.venv/bin/exosuit`` after ``make run``)."""
    script = os.path.join(os.path.dirname(sys.executable), "exosuit")
    if not os.path.exists(script) or shutil.which("exosuit") == script:
        return "exosuit"
    relative = os.path.relpath(script)
    return script if relative.startswith("..") else relative


def serve(
    conf: cfg.ConfigOpts,
    *,
    host: str,
    port: int,
    ready: Callable[[cheroot_wsgi.Server], object] | None = None,
) -> None:
    """Run until SIGINT/SIGTERM. ``ready(server)`` is called once listening.

    Each piece started is stopped on the way out, in reverse order, by one ExitStack:
    whether the stop comes while serving or while starting (exosuit/stopping.py: a signal
    before the server's own handlers raises there), nothing is left behind."""
    with contextlib.ExitStack() as started:
        served: list[bool] = []
        # Said last, once everything below is stopped (callbacks run in reverse order).
        started.callback(lambda: served and print("Exosuit stopped.", flush=True))
        api = ApiSettings.from_conf(conf)
        # The port first: when it is taken, say so before migrating anything.
        server = _listen(host, port, api)
        started.callback(server.stop)
        db = make_database(conf)
        started.callback(db.dispose)
        migration.upgrade(db)
        app = loadapp(conf, db)
        server.wsgi_app = app
        # The in-process agent is trusted: it calls the application past the
        # authentication (as an admin with the service role), whatever [api]
        # auth_strategy requires of everyone else.
        agent_app = app if api.auth_strategy == "noauth" else NoAuthMiddleware(app.application)
        try:
            simulated = LocalHost(conf, agent_app)
        except CacheLocked as error:
            raise SystemExit(
                f"exosuit serve: {error}; stop it first, or use another --data-dir"
            ) from None
        started.callback(simulated.stop)
        simulated.start()
        # One conductor worker in-process runs the jobs (Placement sync, drift repair …).
        conductor = Conductor(conf, db, workers=1)
        # A job still running after this is claimed again when its lease expires.
        started.callback(conductor.stop, timeout=10)
        conductor.start()
        _banner(conf, server, simulated)
        served.append(True)
        _serve_until_stopped(server, ready)


def _listen(host: str, port: int, api: ApiSettings) -> cheroot_wsgi.Server:
    """A server bound to (host, port), its application set later; SystemExit naming the
    option that picks another port when that one is taken."""
    server = GuardedServer(
        (host, port),
        None,
        numthreads=max(4, api.threads),
        server_name="exosuit",
        # cheroot's default backlog is 5: a burst of clients got connection resets.
        request_queue_size=api.backlog,
        shutdown_timeout=api.shutdown_timeout,
        # Slow clients hold no thread while their headers trickle in, and a body
        # that trickles holds one body_timeout at most (exosuit/api/http_server.py).
        guards=Guards(
            header_timeout=api.header_timeout,
            body_timeout=api.body_timeout,
            max_connections=api.max_connections,
            max_client_connections=api.max_client_connections,
            read_ahead=api.max_body_size,
        ),
    )
    error = port_check.taken(host, port)
    if error is not None:
        raise SystemExit(port_check.hint(host, port, error))
    try:
        server.prepare()
    except OSError as refused:  # taken since (or refused for another reason)
        raise SystemExit(port_check.hint(host, port, refused)) from None
    return server


def _banner(conf: cfg.ConfigOpts, server: cheroot_wsgi.Server, simulated: LocalHost) -> None:
    """Where it listens and what to do next: the command line, the dashboard, OpenStack's
    client."""
    api = ApiSettings.from_conf(conf)
    bound_host, bound_port = server.bind_addr[:2]
    url = f"http://{bound_host}:{bound_port}"
    database = DatabaseSettings.from_conf(conf).connection
    if database.startswith("sqlite:///"):
        database = os.path.abspath(database[len("sqlite:///") :])
    hostname = DefaultSettings.from_conf(conf).host
    placement = PlacementSettings.from_conf(conf)
    print(f"Exosuit {hostname!r} serving Cyborg's v2 API at {url}/v2", flush=True)
    print(f"  database: {database}", flush=True)
    print(f"  authentication: {api.auth_strategy}", flush=True)
    print(f"  CDI specs: {os.path.abspath(CdiSettings.from_conf(conf).spec_dir)}", flush=True)
    if placement.auth_type:
        print(f"  placement: {placement.endpoint_override or 'from the catalog'}", flush=True)
    print(
        f"  simulated host {hostname!r}: "
        + ", ".join(f"{n} x {s}" for s, n in sorted(simulated.driver.shapes.items())),
        flush=True,
    )
    endpoint = "" if url == CLIENT_DEFAULT_URL else f" --os-endpoint {url}"
    print(f"  in another terminal: {_exosuit_command()}{endpoint} device list", flush=True)
    print(f"  dashboard: {url}/dashboard", flush=True)
    print(
        "  OpenStack's client: openstack --os-auth-type none --os-endpoint "
        f"{url}/v2 accelerator device list",
        flush=True,
    )
    print("  Ctrl-C stops.", flush=True)


def _serve_until_stopped(
    server: cheroot_wsgi.Server, ready: Callable[[cheroot_wsgi.Server], object] | None
) -> None:
    """Serve until SIGINT or SIGTERM (then the caller stops the rest)."""
    stopper: list[threading.Thread] = []

    def _stop(signum: int, frame: FrameType | None) -> None:
        # NOTE: signal handlers run in the main thread, inside server.serve(), which may
        # hold cheroot's locks: calling server.stop() there deadlocks, and raising
        # KeyboardInterrupt there sometimes left a worker thread waiting forever. Stop
        # from another thread, as cheroot expects; serve() then returns.
        if not stopper:
            stopper.append(threading.Thread(target=server.stop, name="exosuit-stop"))
            stopper[0].start()

    previous = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    if ready is not None:
        ready(server)
    try:
        server.serve()
    except KeyboardInterrupt:
        pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for thread in stopper:
            thread.join()
