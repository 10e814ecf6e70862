"""Wire formats shared by the agent and the API (JSON Schema files)."""

from __future__ import annotations

import functools
import hashlib
import json
import os

__all__ = ["canonical_json", "inventory_schema", "snapshot_hash"]

_DIR = os.path.dirname(__file__)


@functools.cache
def inventory_schema() -> dict:
    with open(os.path.join(_DIR, "inventory-v1.json")) as f:
        return json.load(f)


# One encoder for every call: json.dumps with options builds a new one each time.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(data) -> str:
    return _CANONICAL.encode(data)


def snapshot_hash(devices: list, driver_errors: list) -> str:
    """The content hash of a snapshot: what makes an unchanged report cheap."""
    body = canonical_json({"devices": devices, "driver_errors": driver_errors})
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()
