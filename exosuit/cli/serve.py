"""``exosuit serve``: the embedded default (API, conductor and a simulated host in one
process; SQLite; noauth). Options and behaviour are those of exosuit/serve.py."""

from __future__ import annotations

import argparse
import os

from cliff.command import Command

from exosuit.logs import setup_logging
from exosuit.port_check import DEFAULT_HOST, DEFAULT_PORT
from exosuit.stopping import stop_while_starting

# [inventory] ready_drivers of exosuit serve: the simulated plug-in, whose devices (its
# FPGA reported with Cyborg's fake driver's name, its GPUs) are there for the demo.
SERVE_READY_DRIVERS = ["simulated"]

__all__ = ["Serve"]


def add_config_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-file",
        action="append",
        default=[],
        metavar="PATH",
        help="INI configuration file (may be repeated; later files win). Accepted before "
        "the command too: exosuit --config-file PATH serve.",
    )


class Serve(Command):
    """Run the embedded default: API + simulated host, SQLite, noauth.

    API, conductor and a simulated host in one process; SQLite under --data-dir; no
    authentication (identity from X-* headers, admin by default). Ctrl-C stops it."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", default=DEFAULT_HOST, help="Address to listen on.")
        parser.add_argument(
            "--port", type=int, default=DEFAULT_PORT, help="Port to listen on (0: any)."
        )
        parser.add_argument(
            "--data-dir",
            default=".exosuit",
            help="Directory for the SQLite database and local state (default ./.exosuit).",
        )
        parser.add_argument(
            "--placement-url",
            metavar="URL",
            help="Keep this Placement equal to the simulated host's devices "
            "(standalone: the compute node provider is created; without a "
            "[placement] auth_type, the token of a noauth2 Placement's admin).",
        )
        add_config_file(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        with stop_while_starting():  # until the server's own handlers take over
            return self._serve(parsed_args)

    def _serve(self, parsed_args: argparse.Namespace) -> int:
        # Imported here: the server's modules are not needed by the other commands.
        from exosuit.conf import DefaultSettings, make_conf
        from exosuit.serve import serve

        # The global --config-file (before or after `serve`) comes first, then any
        # this parser saw: later files win.
        files = [*(getattr(self.app_args, "config_file", None) or []), *parsed_args.config_file]
        # NOTE: [api] auth_strategy is the configuration's (noauth unless a file says
        # keystone): a file asking for Keystone gets it, never a silent admin.
        conf = make_conf(files, state_path=os.path.abspath(parsed_args.data_dir))
        # The simulated devices are offered at once, so that the demo works (a file may say
        # otherwise). Devices of the other drivers (this host's real PCI devices) start as
        # [inventory] new_device_activation says (doc/devices.md).
        conf.set_default("ready_drivers", SERVE_READY_DRIVERS, group="inventory")
        if parsed_args.placement_url:
            from exosuit.placement.client import use_placement_url

            use_placement_url(conf, parsed_args.placement_url)
        debug = DefaultSettings.from_conf(conf).debug
        setup_logging(debug or bool(getattr(self.app_args, "debug", False)))
        serve(conf, host=parsed_args.host, port=parsed_args.port)
        return 0
