"""A driver's small JSON files in its state folder (``DriverContext.state_dir``): what an
install step must remember to undo itself after a restart. Not part of the driver SDK.

Files are written atomically (exosuit/files.py: temporary file, fsync, rename, fsync of
the folder): a crash leaves the old or the new content, never a torn one. A missing
file, or no state folder, reads as {}.
"""

from __future__ import annotations

import json
import os
from typing import Any

from exosuit.files import atomic_write

__all__ = ["read_state", "write_state"]


def read_state(state_dir: str | None, name: str) -> dict[str, Any]:
    """The JSON object in ``<state_dir>/<name>``; {} when absent or without a folder."""
    if state_dir is None:
        return {}
    try:
        with open(os.path.join(state_dir, name)) as f:
            data: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return {}
    return data


def write_state(state_dir: str | None, name: str, data: dict[str, Any]) -> None:
    """Replace ``<state_dir>/<name>`` with ``data``; nothing when there is no folder."""
    if state_dir is None:
        return
    atomic_write(os.path.join(state_dir, name), json.dumps(data, sort_keys=True))
