"""``exosuit``: the command line for users and operators (exosuit/cli/)."""

from __future__ import annotations

import sys

from exosuit.cli.app import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
