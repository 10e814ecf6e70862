"""The agent's local cache: what survives a restart, a crash or a control-plane outage.

One JSON file in the state directory, versioned and written atomically (temp
file, fsync, rename, fsync of the directory): a crash leaves either the old
file or the new one, never half of one. It holds only what cannot be
recomputed:

- the last snapshot the API acknowledged (its hash, content and time);
- the last desired state the API sent;
- what the agent prepared on the host (mdevs, programmed images …);
- when each device was last seen, so a device missing from one discovery is
  kept for ``[agent] removal_grace`` seconds before it is dropped.

Compatibility: a newer agent reads every older version (``_MIGRATIONS``); an
older agent refuses a newer file instead of guessing (nothing is overwritten).
A missing file reads as empty.

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
import os
import tempfile

__all__ = ["CACHE_VERSION", "AgentCache", "AgentState", "CacheLocked", "CacheTooNew"]

CACHE_VERSION = 1
FILE_NAME = "agent-cache.json"


class CacheTooNew(RuntimeError):
    """The cache was written by a newer agent."""


class CacheLocked(RuntimeError):
    """Another process holds the state directory."""


@dataclasses.dataclass
class AgentState:
    acknowledged_hash: str | None = None
    acknowledged_snapshot: dict | None = None
    acknowledged_at: float | None = None
    desired_state: dict = dataclasses.field(default_factory=dict)
    prepared: dict = dataclasses.field(default_factory=dict)
    # device identity → {"last_seen": epoch seconds, "device": its snapshot dict}
    devices: dict = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return {"version": CACHE_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> AgentState:
        version = data.get("version", 0)
        if version > CACHE_VERSION:
            raise CacheTooNew(
                f"the agent cache is version {version}, written by a newer agent; this "
                f"agent reads versions up to {CACHE_VERSION}"
            )
        for migrate in _MIGRATIONS[version:]:
            data = migrate(data)
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


def _from_v0(data: dict) -> dict:
    """Version 0 (never released) had no version field and no device ages."""
    data = dict(data)
    data.setdefault("devices", {})
    data["version"] = 1
    return data


# _MIGRATIONS[n] turns version n into n + 1.
_MIGRATIONS = [_from_v0]
assert len(_MIGRATIONS) == CACHE_VERSION


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
                f"state directory {self.state_dir}") from None
        self._lock_fd = fd
        self._remove_leftovers()

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def load(self) -> AgentState:
        """Read the cache; safe while the agent writes (it only ever renames)."""
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return AgentState()
        return AgentState.from_json(data)

    def _remove_leftovers(self) -> None:
        """Temporary files of a write interrupted by a crash (kill -9): never the cache."""
        try:
            names = os.listdir(self.state_dir)
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith(".agent-cache."):
                try:
                    os.unlink(os.path.join(self.state_dir, name))
                except OSError:
                    pass

    def save(self, state: AgentState) -> None:
        os.makedirs(self.state_dir, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".agent-cache.", dir=self.state_dir)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(state.to_json(), f, sort_keys=True, separators=(",", ":"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, self.path)
        except BaseException:
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass
            raise
        dir_fd = os.open(self.state_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
