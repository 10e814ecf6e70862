"""What an unchanged agent report is answered from, kept between reports.

An unchanged report (its hash only) is answered from the host's last snapshot hash,
report time, observed generation and desired generation (exosuit/db/inventory.py,
``HostReport``). This process keeps them per host with the version of the counter
``HOST_REPORTS`` they were read at: every committed transaction that changes a host's
snapshot hash or desired generation, in any API process or the conductor, makes that
counter grow (exosuit/db/changes.py). An entry is used only when the counter still has
its version, read *after* the report arrived; so an answer from here is never older
than the database was when the report came in.

The counter is read once for many reports: ``Version.current`` hands a report the
value of a read that started after the report arrived, and while one read is running,
the reports that arrive wait for the next one, which one of them starts as it ends.
With many reports at once (a fleet reporting every minute), one small read answers
all that arrived meanwhile, and a report whose entry is current costs no database
round trip of its own.

The report time and the observed generation of an entry may be older than the
database's (another process moved them): that costs a compare-and-set that finds
nothing to do, never a wrong answer, since both only grow. Memory is bounded:
``max_entries`` entries, the oldest dropped first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["ReportCache", "Version"]

T = TypeVar("T")


class _Batch:
    """Callers that came while a read was running: the next read serves them all."""

    __slots__ = ("done", "value", "waiters")

    def __init__(self, waiters: list[threading.Lock] | None = None) -> None:
        self.waiters = waiters or []  # one held lock each, released to wake its caller
        self.done = False
        self.value = 0


class Version:
    """A database counter's value, read after the caller asked, shared by callers.

    A caller that finds no read running reads. One that comes while a read runs joins
    the batch of callers that the next read serves, and sleeps until that read's value
    is there, or until it is woken to run that read itself (the first of the batch, as
    the running read ends): each caller is woken once, never to find that the read it
    woke for started before it came. A failed read's callers join the next batch."""

    def __init__(self, read: Callable[[], int]) -> None:
        self.read = read  # the counter's read (exosuit/db/changes.py: CounterReader)
        self._lock = threading.Lock()
        self._reading = False  # a read is running
        self._next: _Batch | None = None  # who came while it runs

    @property
    def waiting(self) -> int:
        """Callers waiting for the next read."""
        batch = self._next
        return len(batch.waiters) if batch is not None else 0

    def current(self) -> int:
        """The counter's value from a read that started after this call: one running
        read at a time, its value shared by every caller that came before it started."""
        with self._lock:
            if not self._reading:
                self._reading = True
                batch = None
            else:
                batch = self._next
                if batch is None:
                    batch = self._next = _Batch()
                waiter = threading.Lock()
                waiter.acquire()
                batch.waiters.append(waiter)
        if batch is None:
            return self._run(None)
        waiter.acquire()  # released once: the value is there, or this caller reads it
        if batch.done:
            return batch.value
        return self._run(batch)

    def _run(self, batch: _Batch | None) -> int:
        """Read for ``batch`` (None: for this caller alone), then wake who it serves and
        hand the next batch to its first caller."""
        value: int | None = None
        try:
            value = self.read()
            return value
        finally:
            with self._lock:
                served = batch.waiters if batch is not None else []
                following = self._next
                if value is not None and batch is not None:
                    batch.value, batch.done = value, True
                elif value is None and served:  # failed: the next read serves them too
                    if following is None:
                        following = _Batch(served)
                    else:
                        following.waiters.extend(served)
                    served = []
                self._next = None
                leader = following.waiters.pop(0) if following is not None else None
                self._reading = leader is not None
            for waiter in served:
                waiter.release()
            if leader is not None:
                leader.release()


class ReportCache(Generic[T]):
    """host → (the version it was read at, what was read), at most ``max_entries``."""

    def __init__(self, version: Version, max_entries: int) -> None:
        self.version = version
        self.max_entries = max_entries
        self._entries: dict[str, tuple[int, T]] = {}
        self._lock = threading.Lock()

    def get(self, hostname: str) -> T | None:
        """What was read of ``hostname`` if nothing it shows has changed since; None
        when unknown here or possibly changed (read it again)."""
        entry = self._entries.get(hostname)
        if entry is None:
            return None
        if entry[0] != self.version.current():
            self.forget(hostname)
            return None
        return entry[1]

    def put(self, hostname: str, version: int, value: T) -> None:
        """Keep ``value``, read of ``hostname`` when the counter was at ``version``."""
        if self.max_entries <= 0:
            return
        with self._lock:
            self._entries.pop(hostname, None)
            while len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]  # the oldest
            self._entries[hostname] = (version, value)

    def replace(self, hostname: str, old: T, new: T) -> None:
        """Keep ``new`` for ``hostname`` at the version ``old`` was read at, if ``old``
        is still its entry (a write that changed nothing the version counts)."""
        with self._lock:
            entry = self._entries.get(hostname)
            if entry is not None and entry[1] is old:
                self._entries[hostname] = (entry[0], new)

    def forget(self, hostname: str) -> None:
        """Read the host's row again next time (this process wrote to it)."""
        with self._lock:
            self._entries.pop(hostname, None)

    def __len__(self) -> int:
        return len(self._entries)
