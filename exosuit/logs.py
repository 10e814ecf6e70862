"""Logging set-up, the same for every Exosuit process."""

from __future__ import annotations

import logging

__all__ = ["setup_logging"]


def setup_logging(debug: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
