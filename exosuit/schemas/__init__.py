"""Wire formats shared by the agent and the API (JSON Schema files)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any, TypeAlias

__all__ = [
    "JSONObject",
    "canonical_json",
    "device_identity",
    "inventory_schema",
    "snapshot_errors",
    "snapshot_hash",
]

# A JSON object as it travels on the wire (a request or response body, a snapshot, what a
# client reads back). Its shape is the JSON Schema's or the API reference's, checked where
# it is received, not by mypy: so its values stay Any. Rows read from the database that
# cross into the API are typed (TypedDicts beside their queries in exosuit/db/) instead.
JSONObject: TypeAlias = dict[str, Any]

_DIR = os.path.dirname(__file__)


@functools.cache
def inventory_schema() -> dict[str, Any]:
    with open(os.path.join(_DIR, "inventory-v1.json")) as f:
        schema: dict[str, Any] = json.load(f)
    return schema


# One encoder for every call: json.dumps with options builds a new one each time.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(data: object) -> str:
    """Sorted keys, no spaces, UTF-8 kept: equal data, equal text."""
    return _CANONICAL.encode(data)


def device_identity(controlpath_id: Mapping[str, Any]) -> str:
    """A device's identity: the canonical JSON of its ``controlpath_id``.

    Agent and API key devices by it, and the database stores it in its rows: it must
    stay byte for byte what ``canonical_json(controlpath_id)`` gives.
    """
    if not isinstance(controlpath_id, dict):
        controlpath_id = dict(controlpath_id)  # the JSON encoder takes dicts only
    return canonical_json(controlpath_id)


def snapshot_hash(
    devices: list[dict[str, Any]],
    driver_errors: list[dict[str, Any]],
    drivers: list[dict[str, Any]] | None = None,
) -> str:
    """The content hash of a snapshot: what makes an unchanged report cheap.

    ``drivers`` (the snapshot's ``drivers`` list, when it carries one) is hashed with
    the rest; None hashes ``{"devices", "driver_errors"}`` only, as agents that do not
    report their drivers always did (their hashes stay what they were). A snapshot's
    ``observed_generation`` and ``usage`` are never hashed: they change without the
    inventory changing."""
    content: dict[str, Any] = {"devices": devices, "driver_errors": driver_errors}
    if drivers is not None:
        content["drivers"] = drivers
    body = canonical_json(content)
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def snapshot_errors(devices: list[dict[str, Any]]) -> list[str]:
    """What is wrong with a snapshot's devices beyond what its JSON Schema can say
    (the schema holds first): a deployable is known by its name within its device, so
    two deployables of one device must not share a name; an attribute by its key within
    its deployable, so two attributes of one deployable must not share a key (applied
    again, such a snapshot would change one with the other's value:
    tests/db/test_snapshot_properties.py)."""
    errors: list[str] = []
    for index, device in enumerate(devices):
        seen: set[str] = set()
        found = len(errors)
        for deployable in device.get("deployables", ()):
            name = deployable.get("name")
            if name in seen:
                errors.append(
                    f"two deployables are named {name!r}; "
                    "a deployable's name is unique within its device"
                )
            seen.add(name)
            keys: set[str] = set()
            twice: set[str] = set()
            for attribute in deployable.get("attributes", ()):
                (twice if attribute.get("key") in keys else keys).add(attribute.get("key"))
            for key in sorted(twice):
                errors.append(
                    f"deployable {name!r} has two attributes {key!r}; an attribute's key "
                    "is unique within its deployable"
                )
        if len(errors) > found:  # named once the device has errors (the common case: none)
            where = device.get("pci_address") or device_identity(device["controlpath_id"])
            errors[found:] = [f"devices/{index} ({where}): {e}" for e in errors[found:]]
    return errors
