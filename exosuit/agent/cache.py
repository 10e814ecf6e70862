"""The agent's local cache: what survives a restart, a crash or a control-plane outage.

One JSON file in the state directory, versioned and written atomically (temp
file, fsync, rename, fsync of the directory): a crash leaves either the old
file or the new one, never half of one. It holds only what cannot be
recomputed:

- the hash of the last snapshot the API acknowledged, and when it did;
- the last desired state the API sent;
- when each device was last seen (and what it was), so a device missing from one
  discovery is kept for ``[agent] removal_grace`` seconds before it is dropped;
- the programs the agent finished (done or failed) and whether the API has heard so,
  so that a restart never loads an image twice nor loses a final report
  (agent/programs.py), and the ids of the images it loaded (to check a rollback);
- likewise the install and uninstall steps it ended (agent/activations.py), and the
  desired-state generation it has applied (its reports' ``observed_generation``);
- the partition layouts it applied (agent/partitions.py), with the outcome until the API
  acknowledges it;
- the CDI spec files it wrote for the claims handed to containers (agent/cdi.py): their
  names (recorded before a file is written, so that only files it wrote are ever
  removed) and digests, and the outcome until the API acknowledges it.

Compatibility: a newer agent reads every older version (``_MIGRATIONS``); an
older agent refuses a newer file instead of guessing (nothing is overwritten).
A missing file reads as empty. A file it cannot read (empty, cut short, not JSON, not an
object, a field of the wrong type: ``CacheCorrupt``) is set aside by the lock holder
(``load_or_set_aside``: renamed ``agent-cache.json.corrupt-<time>``, kept for
inspection) and the agent starts from nothing: its next report is a whole snapshot.

One writer: the agent process takes ``lock()`` (an exclusive ``flock`` on the state
directory itself, released by the kernel when the process dies, even by kill -9)
before it writes, so a second agent on the same state directory refuses to start
instead of interleaving its writes. Only the lock holder removes the temporary
files of an interrupted write; ``load()`` only reads, so anything (a status
command, a test) may read the cache while the agent runs.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

from exosuit import files

LOG = logging.getLogger(__name__)

__all__ = [
    "CACHE_VERSION",
    "AgentCache",
    "AgentState",
    "CacheCorrupt",
    "CacheLocked",
    "CacheTooNew",
    "ContainerSpecs",
    "FinishedActivation",
    "FinishedPartition",
    "FinishedProgram",
    "Outcome",
    "SeenDevice",
]

CACHE_VERSION = 6
FILE_NAME = "agent-cache.json"


class CacheTooNew(RuntimeError):
    """The cache was written by a newer agent."""


class CacheCorrupt(ValueError):
    """The cache file is not one this agent can read: the message says why."""


class CacheLocked(RuntimeError):
    """Another process holds the state directory."""


class SeenDevice(TypedDict):
    """A device as last discovered: when (epoch seconds), its snapshot dict, and the
    driver that found it (version 4; a device of a driver disabled on purpose is
    dropped at once)."""

    last_seen: float
    device: dict[str, Any]
    found_by: NotRequired[str]


class Outcome(TypedDict):
    """What every reconciler keeps per item (agent/reconciler.py): the outcome's body
    (None: none yet) and whether the API acknowledged it."""

    report: dict[str, Any] | None
    acknowledged: bool


class FinishedProgram(Outcome):
    """A program the agent ended: the final report's body (``state`` done or failed …)
    and whether the API acknowledged it (then it is kept only while the desired state
    still names the program)."""


class FinishedActivation(Outcome):
    """An install or uninstall step the agent ended (agent/activations.py): the desired
    state's ``action`` and ``generation`` it answers, the outcome's body (``state``
    done or failed, ``reason``) and whether the API acknowledged it (then it is kept
    only while the desired state still asks for that step)."""

    action: str
    generation: int


class FinishedPartition(Outcome):
    """A partition layout the agent applied or failed to (agent/partitions.py): the
    desired state's ``generation`` it answers, the outcome's body (``state`` applied or
    failed, ``reason``) and whether the API acknowledged it (then it is kept only while
    the desired state still lists that layout)."""

    generation: int


class ContainerSpecs(Outcome):
    """The CDI spec files of one claim handed to containers (agent/cdi.py): the digest
    of the desired state's entry they were written for, each file's name and the
    SHA-256 of what was written (``files``; a name is recorded before its file is
    written, with None), ``state`` (``pending``, ``written``, ``failed`` or ``gone``:
    the API no longer knows the claim), the report's body and whether the API
    acknowledged it."""

    digest: str
    files: dict[str, str | None]
    state: str


@dataclasses.dataclass
class AgentState:
    acknowledged_hash: str | None = None
    acknowledged_at: float | None = None
    desired_state: dict[str, Any] = dataclasses.field(default_factory=dict)
    # device identity (schemas.device_identity) → when it was last seen, and what it was
    devices: dict[str, SeenDevice] = dataclasses.field(default_factory=dict)
    # program uuid → its final report, and whether the API has it
    programs: dict[str, FinishedProgram] = dataclasses.field(default_factory=dict)
    # image SHA-256 → the ids it was loaded with ({"function_id", "interface_id"}), to
    # check a rollback to it; the most recent last
    image_ids: dict[str, dict[str, str | None]] = dataclasses.field(default_factory=dict)
    # the desired-state generation whose driver overrides (and discovery) the agent has
    # applied: sent as the reports' observed_generation
    observed_generation: int | None = None
    # device uuid → the install or uninstall step ended, and whether the API has it
    activations: dict[str, FinishedActivation] = dataclasses.field(default_factory=dict)
    # claim uuid → the CDI spec files written for it, and whether the API has the outcome
    containers: dict[str, ContainerSpecs] = dataclasses.field(default_factory=dict)
    # device uuid → the partition layout applied, and whether the API has the outcome
    partitions: dict[str, FinishedPartition] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"version": CACHE_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: object) -> AgentState:
        """The state a cache file's JSON holds (any older version, converted).
        CacheTooNew for a newer version; CacheCorrupt for anything not a cache."""
        if not isinstance(data, dict):
            raise CacheCorrupt(f"it holds a JSON {type(data).__name__}, not an object")
        version = data.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise CacheCorrupt(f"its version is {version!r}, not a whole number")
        if version > CACHE_VERSION:
            raise CacheTooNew(
                f"the agent cache is version {version}, written by a newer agent; this "
                f"agent reads versions up to {CACHE_VERSION}"
            )
        for migrate in _MIGRATIONS[version:]:
            data = migrate(data)
        problem = _problem(data, SCHEMA, "")
        if problem is not None:
            raise CacheCorrupt(problem)
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


def _from_v0(data: dict[str, Any]) -> dict[str, Any]:
    """Version 0 (never released) had no version field and no device ages."""
    data = dict(data)
    data.setdefault("devices", {})
    data["version"] = 1
    return data


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 also kept the acknowledged snapshot's content, which nothing read, and a
    ``prepared`` map, which nothing wrote."""
    data = {k: v for k, v in data.items() if k not in ("acknowledged_snapshot", "prepared")}
    data["version"] = 2
    return data


def _from_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 had no programs: none was finished, no image loaded."""
    data = dict(data)
    data["programs"] = {}
    data["image_ids"] = {}
    data["version"] = 3
    return data


def _from_v3(data: dict[str, Any]) -> dict[str, Any]:
    """Version 3 had no activations and observed no generation (nor knew which driver
    found a device: such a device keeps its removal grace)."""
    data = dict(data)
    data["observed_generation"] = None
    data["activations"] = {}
    data["version"] = 4
    return data


def _from_v4(data: dict[str, Any]) -> dict[str, Any]:
    """Version 4 wrote no CDI spec files."""
    data = dict(data)
    data["containers"] = {}
    data["version"] = 5
    return data


def _from_v5(data: dict[str, Any]) -> dict[str, Any]:
    """Version 5 applied no partition layout."""
    data = dict(data)
    data["partitions"] = {}
    data["version"] = 6
    return data


# _MIGRATIONS[n] turns version n into n + 1.
_MIGRATIONS: list[Callable[[dict[str, Any]], dict[str, Any]]] = [
    _from_v0,
    _from_v1,
    _from_v2,
    _from_v3,
    _from_v4,
    _from_v5,
]
assert len(_MIGRATIONS) == CACHE_VERSION


def _map_of(value: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": value}


_REPORT = {"type": ["object", "null"]}
_OUTCOME = {"report": _REPORT, "acknowledged": {"type": "boolean"}}
_NUMBER = {"type": "number"}
_INTEGER = {"type": "integer"}


def _record(required: tuple[str, ...], **fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {**_OUTCOME, **fields},
        "required": [*required, "report", "acknowledged"],
    }


# What a cache of the current version holds, field by field (after migration): what the
# agent's code reads without checking again. A field left out takes its default. Written
# as JSON Schema (type, const, properties, required, additionalProperties: a test checks
# it with jsonschema too), read by ``_problem``: the agent does not load jsonschema.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "version": {"const": CACHE_VERSION},
        "acknowledged_hash": {"type": ["string", "null"]},
        "acknowledged_at": {"type": ["number", "null"]},
        "desired_state": {"type": "object"},
        "devices": _map_of(
            {
                "type": "object",
                "properties": {
                    "last_seen": _NUMBER,
                    "device": {"type": "object"},
                    "found_by": {"type": "string"},
                },
                "required": ["last_seen", "device"],
            }
        ),
        "programs": _map_of(_record(())),
        "image_ids": _map_of(_map_of({"type": ["string", "null"]})),
        "observed_generation": {"type": ["integer", "null"]},
        "activations": _map_of(
            _record(("action", "generation"), action={"type": "string"}, generation=_INTEGER)
        ),
        "containers": _map_of(
            _record(
                ("digest", "files", "state"),
                digest={"type": "string"},
                files=_map_of({"type": ["string", "null"]}),
                state={"type": "string"},
            )
        ),
        "partitions": _map_of(_record(("generation",), generation=_INTEGER)),
    },
}


def _is(value: object, kind: str) -> bool:
    if kind in ("number", "integer") and isinstance(value, bool):
        return False
    return isinstance(value, _KINDS[kind])


_KINDS: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "string": str,
    "boolean": bool,
    "null": type(None),
    "number": (int, float),
    "integer": int,
}


def _problem(value: object, schema: dict[str, Any], where: str) -> str | None:
    """What is wrong with ``value`` for ``schema`` (the subset ``SCHEMA`` uses), or
    None; ``where`` is the path to it."""
    at = f"at {where or '/'}"
    if "const" in schema and (type(value) is not type(schema["const"]) or value != schema["const"]):
        return f"{at}: {value!r:.60} is not {schema['const']!r}"
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, kind) for kind in kinds):
            return f"{at}: {value!r:.60} is not of type {' or '.join(kinds)}"
    if isinstance(value, dict):
        for name in schema.get("required", ()):
            if name not in value:
                return f"{at}: {name!r} is missing"
        properties = schema.get("properties", {})
        others = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key, others)
            if isinstance(sub, dict):
                found = _problem(item, sub, f"{where}/{key}")
                if found is not None:
                    return found
    return None


class AgentCache:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, FILE_NAME)
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Become the only writer of this state directory (until ``unlock`` or exit),
        then remove what an interrupted write left behind. Raises CacheLocked."""
        if self._lock_fd is not None:
            return
        os.makedirs(self.state_dir, exist_ok=True)
        fd = os.open(self.state_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CacheLocked(
                f"another process (an exosuit-agent, or exosuit serve) already uses the "
                f"state directory {self.state_dir}"
            ) from None
        self._lock_fd = fd
        self._remove_leftovers()

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def load(self) -> AgentState:
        """Read the cache; safe while the agent writes (it only ever renames). A missing
        file reads as empty; CacheCorrupt for one that is not a cache, CacheTooNew for one
        of a newer agent."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return AgentState()
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise CacheCorrupt("it is not UTF-8 text") from None
        except json.JSONDecodeError as error:
            what = "it is empty" if not raw.strip() else f"it is not JSON ({error})"
            raise CacheCorrupt(what) from None
        except RecursionError:
            raise CacheCorrupt("it is not JSON (nested too deep)") from None
        return AgentState.from_json(data)

    def load_or_set_aside(self) -> AgentState:
        """``load()``; a file it cannot read (CacheCorrupt) is renamed
        ``agent-cache.json.corrupt-<epoch seconds>`` (kept for inspection), one warning
        says so, and the state starts empty: the next report is a whole snapshot and the
        API matches the devices it knows by their identity. Only the lock holder renames;
        anyone else gets CacheCorrupt. CacheTooNew is raised as it is (never set aside:
        a newer agent's file is not corrupt)."""
        try:
            return self.load()
        except CacheCorrupt as error:
            if self._lock_fd is None:
                raise
            aside = f"{self.path}.corrupt-{int(time.time())}"
            while os.path.exists(aside):
                aside += "-1"
            os.rename(self.path, aside)
            files.sync_folder(self.state_dir)
            LOG.warning(
                "the agent cache %s is unreadable (%s): set aside as %s; starting from "
                "nothing, the next report is a whole snapshot",
                self.path,
                error,
                aside,
            )
            return AgentState()

    def _remove_leftovers(self) -> None:
        """Temporary files of a write interrupted by a crash (kill -9): never the cache."""
        try:
            names = os.listdir(self.state_dir)
        except FileNotFoundError:
            return
        for name in names:
            # ".agent-cache.json.<random>.tmp" (exosuit/files.py), or an older agent's
            # ".agent-cache.<random>"
            if name.startswith(".agent-cache."):
                try:
                    os.unlink(os.path.join(self.state_dir, name))
                except OSError:
                    pass

    def save(self, state: AgentState) -> None:
        """Replace the file with ``state`` (exosuit/files.py: whole or absent)."""
        data = json.dumps(state.to_json(), sort_keys=True, separators=(",", ":"))
        files.atomic_write(self.path, data)
