"""Console scripts: exosuit, exosuit-api, exosuit-conductor, exosuit-agent, exosuit-manage."""

from __future__ import annotations

import argparse
import logging

__all__ = ["add_config_argument", "setup_logging"]


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-file",
        action="append",
        default=[],
        metavar="PATH",
        help="INI configuration file (may be repeated; later files win).",
    )


def setup_logging(debug: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
