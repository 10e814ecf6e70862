"""A driver's small JSON files in its state folder (``DriverContext.state_dir``): what an
install step must remember to undo itself after a restart. Not part of the driver SDK.

Files are written atomically (temporary file, fsync, rename): a crash leaves the old or
the new content, never a torn one. A missing file, or no state folder, reads as {}.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any

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
    os.makedirs(state_dir, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", dir=state_dir)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, os.path.join(state_dir, name))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
