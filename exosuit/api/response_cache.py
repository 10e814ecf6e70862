"""Response bodies kept between requests while the data they show is unchanged.

An entry is a body and the version of the data it was made from: a counter in the
database that every committed change of that data makes grow, whichever process
made it (exosuit/db/changes.py). A request reads the current version (one small
query, with the caller's other reads) and gets the entry's body only when it was
made from that very version; otherwise it reads the data, and its body replaces
the entry. So an answer from here is never older than the database was at the
request.

An entry is also forgotten after ``max_age`` seconds: a change no counter counts (SQL
typed by hand, which marks nothing: exosuit/db/changes.py) then shows within that
time. Memory is bounded: at most ``max_entries`` entries and ``max_bytes`` of bodies
(the Host header is part of a key: a client sending many of them only makes entries
go sooner).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import NamedTuple

__all__ = ["Entry", "ResponseCache"]


class Entry(NamedTuple):
    version: int
    body: bytes
    made: float  # when (the cache's clock)


class ResponseCache:
    def __init__(
        self,
        *,
        max_age: float = 30.0,
        max_entries: int = 64,
        max_bytes: int = 32 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_age = max_age
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self._entries: dict[Hashable, Entry] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Entry | None:
        """The entry of ``key`` unless it is too old. Compare its version with the
        data's before using its body."""
        entry = self._entries.get(key)
        if entry is None or self.clock() - entry.made > self.max_age:
            return None
        return entry

    def put(self, key: Hashable, version: int, body: bytes) -> None:
        """Keep ``body``, made from the data at ``version``."""
        if len(body) > self.max_bytes:
            return
        with self._lock:
            # (Of two requests that read different versions, the last to put wins: if
            # that is the older one, the next request reads the data again.)
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old.body)
            if len(self._entries) >= self.max_entries or self._bytes + len(body) > self.max_bytes:
                self._entries.clear()
                self._bytes = 0
            self._entries[key] = Entry(version, body, self.clock())
            self._bytes += len(body)
