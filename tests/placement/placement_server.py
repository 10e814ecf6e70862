"""Serve real OpenStack Placement (the openstack-placement package) for the tests.

    python tests/placement/placement_server.py CONFIG_DIR [--port N] [--port-file PATH]

CONFIG_DIR holds ``placement.conf`` (its database already synced with
``placement-manage db sync``). Placement's WSGI application
(``placement.wsgi.api:application``) is served by cheroot's threaded server in this
one process: with SQLite Placement must run a single worker. The bound port is
written to ``--port-file`` once the server listens. SIGTERM/SIGINT stop it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config_dir")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args(argv)
    # Placement reads $OS_PLACEMENT_CONFIG_DIR/placement.conf when the module loads.
    os.environ["OS_PLACEMENT_CONFIG_DIR"] = os.path.abspath(args.config_dir)

    from cheroot import wsgi as cheroot_wsgi
    from placement.wsgi.api import application

    server = cheroot_wsgi.Server(
        ("127.0.0.1", args.port), application, numthreads=args.threads, server_name="placement"
    )
    server.prepare()
    port = server.bind_addr[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)

    def _stop(signum, frame):
        # cheroot must be stopped from another thread than the one in serve().
        threading.Thread(target=server.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        server.serve()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
