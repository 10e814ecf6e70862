"""``exosuit``: the command line for users and operators."""

from __future__ import annotations

import argparse
import os
import sys

from exosuit import __version__
from exosuit.cmd import add_config_argument, setup_logging
from exosuit.conf import make_conf


def _serve(args) -> int:
    from exosuit.serve import serve

    overrides = {"state_path": os.path.abspath(args.data_dir), "api.auth_strategy": "noauth"}
    conf = make_conf(args.config_file, **overrides)
    if args.placement_url:
        from exosuit.placement.client import use_placement_url

        use_placement_url(conf, args.placement_url)
    setup_logging(conf.debug)
    serve(conf, host=args.host, port=args.port)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="exosuit", description=__doc__)
    parser.add_argument("--version", action="version", version=f"exosuit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="Run the embedded default: API + simulated host, SQLite, noauth.",
        description="API, conductor and a simulated host in one process; SQLite under "
        "--data-dir; no authentication (identity from X-* headers, admin by default).",
    )
    serve.add_argument("--host", default="127.0.0.1", help="Address to listen on.")
    serve.add_argument("--port", type=int, default=6666, help="Port to listen on (0: any).")
    serve.add_argument("--data-dir", default=".exosuit", help="Directory for the SQLite "
                       "database and local state (default ./.exosuit).")
    serve.add_argument("--placement-url", metavar="URL",
                       help="Keep this Placement equal to the simulated host's devices "
                       "(standalone: the compute node provider is created; without a "
                       "[placement] auth_type, the token of a noauth2 Placement's admin).")
    add_config_argument(serve)
    serve.set_defaults(func=_serve)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
