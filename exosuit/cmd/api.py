"""``exosuit-api``: the API under granian (default) or gunicorn: worker processes,
threads per worker ([api] server, workers, threads).

Any WSGI server can run ``exosuit.wsgi:application`` instead
(``EXOSUIT_CONFIG_FILE`` names the configuration file there).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from exosuit.cmd import add_config_argument, setup_logging
from exosuit.conf import ApiSettings, DatabaseSettings, DefaultSettings, make_conf
from exosuit.stopping import signals_held, stop_while_starting

if TYPE_CHECKING:
    from oslo_config import cfg


def main(argv: list[str] | None = None) -> int:
    with stop_while_starting():  # until the server's own handlers take over
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="exosuit-api", description=__doc__)
    add_config_argument(parser)
    parser.add_argument("--host", help="Address to listen on ([api] host_ip).")
    parser.add_argument("--port", type=int, help="Port to listen on ([api] port).")
    parser.add_argument("--workers", type=int, help="Worker processes ([api] workers).")
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {}
    if args.host:
        overrides["api.host_ip"] = args.host
    if args.port is not None:
        overrides["api.port"] = args.port
    if args.workers is not None:
        overrides["api.workers"] = args.workers
    conf = make_conf(args.config_file, **overrides)
    setup_logging(DefaultSettings.from_conf(conf).debug)
    _check_schema(conf)
    api = ApiSettings.from_conf(conf)
    workers = api.workers or os.cpu_count() or 1
    metrics_dir = _multiprocess_metrics(workers)
    owner = os.getpid()
    print(
        f"exosuit-api listening on http://{api.host_ip}:{api.port}/v2 with "
        f"{workers} {api.server} worker(s)",
        flush=True,
    )
    try:
        _serve(conf, args.config_file, workers)
    finally:
        # Only by the process that made it: a gunicorn worker is a fork of this one, and
        # its exit (SystemExit) unwinds through here too while its siblings still write
        # their files there.
        if metrics_dir is not None and os.getpid() == owner:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


def _multiprocess_metrics(workers: int) -> str | None:
    """With several workers on one address, a scrape of /metrics reaches any one of them:
    prometheus-client's multiprocess mode has each keep its request latency in a file of
    a folder that every worker's /metrics sums (doc/metrics.md). The folder is made here,
    new and empty, before anything imports prometheus-client (it reads the variable once,
    at import; the workers inherit it), and removed at exit. An operator's own
    PROMETHEUS_MULTIPROC_DIR is kept as given (it must be emptied before each start)."""
    if workers < 2 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before its multiprocess folder was set")
    path = tempfile.mkdtemp(prefix="exosuit-api-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def _serve(conf: cfg.ConfigOpts, config_files: list[str], workers: int) -> None:
    api = ApiSettings.from_conf(conf)
    if api.server == "granian":
        _run_granian(api, config_files, workers)
        return
    options = {
        "bind": f"{api.host_ip}:{api.port}",
        "workers": workers,
        "threads": api.threads,
        "worker_class": "gthread",
        "keepalive": 30,
        "backlog": api.backlog,
        "graceful_timeout": api.shutdown_timeout,
        "accesslog": None,
        "preload_app": False,
        "proc_name": "exosuit-api",
    }
    from gunicorn.app.base import BaseApplication

    class _Gunicorn(BaseApplication):
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)

        # Callable[..., …]: gunicorn's stubs describe the WSGI callable with looser
        # argument types than wsgiref.types (which the app is written against); gunicorn
        # calls it as PEP 3333 says.
        def load(self) -> Callable[..., Iterable[bytes]]:
            # Each worker builds its own app (and database pool) after the fork.
            from exosuit.api.deploy import loadapp

            return loadapp(conf)

    _Gunicorn().run()


def _run_granian(api: ApiSettings, config_files: list[str], workers: int) -> None:
    """Granian's workers import exosuit.wsgi, which reads EXOSUIT_CONFIG_FILE."""
    from granian import Granian
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings

    os.environ["EXOSUIT_CONFIG_FILE"] = os.pathsep.join(os.path.abspath(f) for f in config_files)
    asgi = api.granian_interface == "asgi"
    Granian(
        # NOTE: the ASGI interface, not granian's WSGI one: there a request held one of
        # the worker's threads while its body trickled in (issue 24). Through the bridge
        # the worker's event loop reads the body, within [api] body_timeout, and then one
        # of [api] threads runs the application (exosuit/api/asgi_bridge.py).
        # [api] granian_interface = wsgi keeps granian's WSGI interface (behind a proxy
        # that buffers requests).
        "exosuit.wsgi:asgi_application" if asgi else "exosuit.wsgi:application",
        address=api.host_ip,
        port=api.port,
        interface=Interfaces.ASGI if asgi else Interfaces.WSGI,
        workers=workers,
        # Under ASGI, [api] threads are the bridge's (granian allows itself one there).
        blocking_threads=1 if asgi else api.threads,
        # Headers must arrive within [api] header_timeout (granian reads them without a
        # thread; this bounds how long a connection may take).
        http1_settings=HTTP1Settings(header_read_timeout=int(api.header_timeout * 1000)),
        websockets=False,
        respawn_failed_workers=True,
        log_access=False,
        backlog=api.backlog,
        workers_kill_timeout=api.shutdown_timeout,
    ).serve()


def _check_schema(conf: cfg.ConfigOpts) -> None:
    from exosuit.db import migration
    from exosuit.db.api import Database

    db = Database.from_conf(conf)
    try:
        problem = migration.start_problem(db, wait=DatabaseSettings.from_conf(conf).startup_wait)
    finally:
        with signals_held():  # a stop comes after the pool has closed its connections
            db.dispose()
    if problem is not None:
        raise SystemExit(f"exosuit-api: {problem}")


if __name__ == "__main__":
    sys.exit(main())
