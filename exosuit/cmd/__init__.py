"""Console scripts: exosuit, exosuit-api, exosuit-conductor, exosuit-agent, exosuit-manage."""

from __future__ import annotations

import argparse

from exosuit.logs import setup_logging

__all__ = ["add_config_argument", "setup_logging"]


def add_config_argument(parser: argparse.ArgumentParser, *, subcommand: bool = False) -> None:
    """``--config-file PATH`` (repeatable). Give it to the top parser and, with
    ``subcommand=True``, to each subcommand's parser: then it is accepted before and
    after the subcommand (``exosuit-manage --config-file X db upgrade`` as the oslo
    tools accept it, and ``exosuit-manage db upgrade --config-file X``)."""
    parser.add_argument(
        "--config-file",
        action="append",
        # SUPPRESS: a subcommand without the option keeps what came before it.
        default=argparse.SUPPRESS if subcommand else [],
        metavar="PATH",
        help="INI configuration file (may be repeated; later files win).",
    )
