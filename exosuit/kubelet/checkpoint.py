"""The plugin's checkpoint: what it prepared, so that a restart answers the same.

One JSON file (``checkpoint.json`` in the plugin's directory) holding, per
ResourceClaim uid, the Exosuit claim that holds its devices and the answer given to
the kubelet (devices and CDI ids). An entry is written ``preparing`` before Exosuit is
asked for a claim (so that unprepare after a crash knows to look) and ``prepared``
once the answer is known; unprepare removes it.

Compatibility: the file says its ``version``. A newer plugin reads every older version
(``_UPGRADES`` converts each to the next); a file of a newer version than this plugin
knows is refused rather than guessed at (the plugin does not start: an older release
must not forget claims a newer one prepared). Version 1 is the first; its exact shape
is kept as a test fixture (tests/kubelet/data/checkpoint-v1.json) that every later
release must still read.

Written atomically (exosuit/files.py): a temporary file in the same directory
(``.checkpoint.json.tmp``, the leading dot keeps it apart), flushed and fsynced,
renamed over the old one, the directory fsynced. A missing file is an empty checkpoint.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from exosuit import files

__all__ = [
    "CURRENT_VERSION",
    "KIND",
    "Checkpoint",
    "CheckpointError",
    "ClaimEntry",
    "PreparedDevice",
    "dump",
    "parse",
    "read",
    "write",
]

KIND = "exosuit-kubelet-plugin-checkpoint"
CURRENT_VERSION = 1
PREPARING = "preparing"
PREPARED = "prepared"
STATES = (PREPARING, PREPARED)


class CheckpointError(Exception):
    """The checkpoint file cannot be read (corrupt, or of a newer version)."""


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a prepare's answer, as the kubelet gets it."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True)
class ClaimEntry:
    """What the plugin did for one ResourceClaim (by uid)."""

    namespace: str
    name: str
    state: str = PREPARING
    claim_uuid: str | None = None  # Exosuit's claim holding the devices, once made
    devices: tuple[PreparedDevice, ...] = field(default_factory=tuple)

    @property
    def prepared(self) -> bool:
        return self.state == PREPARED


# version N → a function turning a version-N document into a version-N+1 one.
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def dump(claims: dict[str, ClaimEntry]) -> dict[str, Any]:
    """The checkpoint document of ``claims`` (current version)."""
    return {
        "kind": KIND,
        "version": CURRENT_VERSION,
        "claims": {
            uid: {
                "namespace": e.namespace,
                "name": e.name,
                "state": e.state,
                "claim_uuid": e.claim_uuid,
                "devices": [
                    {
                        "request_names": list(d.request_names),
                        "pool_name": d.pool_name,
                        "device_name": d.device_name,
                        "cdi_device_ids": list(d.cdi_device_ids),
                    }
                    for d in e.devices
                ],
            }
            for uid, e in sorted(claims.items())
        },
    }


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"{what} is not a list of strings")
    return tuple(value)


def _text(entry: dict[str, Any], key: str, what: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str):
        raise CheckpointError(f"{what}.{key} is not a string")
    return value


def _entry(uid: str, raw: Any) -> ClaimEntry:
    what = f"claims[{uid!r}]"
    if not isinstance(raw, dict):
        raise CheckpointError(f"{what} is not an object")
    state = _text(raw, "state", what)
    if state not in STATES:
        raise CheckpointError(f"{what}.state is {state!r}, not one of {', '.join(STATES)}")
    claim_uuid = raw.get("claim_uuid")
    if claim_uuid is not None and not isinstance(claim_uuid, str):
        raise CheckpointError(f"{what}.claim_uuid is not a string")
    devices = []
    for index, device in enumerate(raw.get("devices") or []):
        where = f"{what}.devices[{index}]"
        if not isinstance(device, dict):
            raise CheckpointError(f"{where} is not an object")
        devices.append(
            PreparedDevice(
                request_names=_strings(device.get("request_names", []), f"{where}.request_names"),
                pool_name=_text(device, "pool_name", where),
                device_name=_text(device, "device_name", where),
                cdi_device_ids=_strings(device.get("cdi_device_ids"), f"{where}.cdi_device_ids"),
            )
        )
    return ClaimEntry(
        namespace=_text(raw, "namespace", what),
        name=_text(raw, "name", what),
        state=state,
        claim_uuid=claim_uuid,
        devices=tuple(devices),
    )


def parse(document: Any) -> dict[str, ClaimEntry]:
    """The claims of a checkpoint document of this version or an older one."""
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise CheckpointError(f"not a checkpoint of this plugin (kind is not {KIND!r})")
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CheckpointError(f"version {version!r} is not a version number")
    if version > CURRENT_VERSION:
        raise CheckpointError(
            f"version {version} is newer than this plugin's ({CURRENT_VERSION}): "
            "run the release that wrote it, or a newer one"
        )
    while version < CURRENT_VERSION:
        document = _UPGRADES[version](document)
        version += 1
    claims = document.get("claims")
    if not isinstance(claims, dict):
        raise CheckpointError("claims is not an object")
    return {str(uid): _entry(str(uid), raw) for uid, raw in claims.items()}


def read(path: Path) -> dict[str, ClaimEntry]:
    """The claims of the checkpoint at ``path``; none when there is no file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        document = json.loads(text)
    except ValueError as error:
        raise CheckpointError(f"{path}: not JSON ({error})") from error
    try:
        return parse(document)
    except CheckpointError as error:
        raise CheckpointError(f"{path}: {error}") from error


def write(path: Path, claims: dict[str, ClaimEntry]) -> None:
    """Replace the checkpoint at ``path`` with ``claims``, atomically and durably
    (exosuit/files.py; the next write replaces what a crash left)."""
    data = (json.dumps(dump(claims), indent=2, sort_keys=True) + "\n").encode()
    files.atomic_write(str(path), data, permissions=0o644, temporary=f".{path.name}.tmp")


class Checkpoint:
    """The checkpoint file and its contents in memory; every change is written before
    the call returns. Safe to use from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claims = read(path)

    def get(self, uid: str) -> ClaimEntry | None:
        with self._lock:
            return self._claims.get(uid)

    def uids(self) -> list[str]:
        with self._lock:
            return sorted(self._claims)

    def put(self, uid: str, entry: ClaimEntry) -> None:
        with self._lock:
            claims = {**self._claims, uid: entry}
            write(self.path, claims)
            self._claims = claims

    def update(self, uid: str, **changes: Any) -> ClaimEntry:
        """The entry of ``uid`` with ``changes``, written."""
        with self._lock:
            entry = replace(self._claims[uid], **changes)
            claims = {**self._claims, uid: entry}
            write(self.path, claims)
            self._claims = claims
            return entry

    def remove(self, uids: Iterable[str]) -> None:
        with self._lock:
            gone = set(uids) & set(self._claims)
            if not gone:
                return
            claims = {k: v for k, v in self._claims.items() if k not in gone}
            write(self.path, claims)
            self._claims = claims
