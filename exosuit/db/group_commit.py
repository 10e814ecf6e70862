"""Group commit: the writes of several requests waiting in one API process applied in one
transaction, each in a SAVEPOINT of its own.

A boot storm or a power cut brings thousands of hosts' reports at once, each a small
transaction: its commit, its round trips and the database's work per transaction cost
as much as a host's rows. Here a request that has a write to make puts it in this
process's queue. A request that finds a free admission slot (exosuit/api/admission.py:
``[api] inventory_concurrency`` per process) becomes a leader: it takes what is queued
(up to ``max_batch`` writes, its own among them), runs each write's ``prepare`` (the
checks that need no database: a failure there is that request's answer alone), then
applies the writes in one transaction, each in its own SAVEPOINT, so that one write's
failure (a snapshot the database refuses, an integrity error) rolls back that write only
and is that request's answer; the others commit together. Every waiting request is
answered only after the commit: nothing is acknowledged that a crash could lose. A
failure of the transaction itself (the connection lost, the commit refused) is every
write's answer in it; a deadlock or a lost connection before the commit runs the whole
batch again (``Database.write``'s retry: each write sees a fresh transaction, as there).

A write queued for longer than the admission's ``wait`` without a leader taking it is
withdrawn and answered 429 with Retry-After, as a request that found no slot was before:
the database sees at most ``inventory_concurrency`` such transactions per process.
A lone write (nothing else queued) runs in a transaction of its own, without a savepoint,
as before.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy import exc
from sqlalchemy.engine import Connection

from exosuit.db import api as db_api
from exosuit.db.api import Database

__all__ = ["GroupCommit", "Slots"]

T = TypeVar("T")

# The most writes one transaction applies: enough to share a commit among the requests
# one process's threads hold, few enough that a batch's locks are held briefly.
MAX_BATCH = 32

# How often a write taken into a batch looks whether its leader is gone (it never should
# be: a leader answers every write it took, however it ends).
_POLL = 1.0
# How often a queued write looks for a free slot when nothing woke it (a slot freed by
# someone other than a leader: a test holding one).
_LOOK = 0.05


class Slots(Protocol):
    """The admission control whose slots leaders hold (exosuit/api/admission.py)."""

    @property
    def wait(self) -> float:
        """Seconds a write may wait for a leader before its refusal."""
        ...

    def try_acquire(self) -> bool: ...

    def release(self) -> None: ...

    def refusal(self) -> Exception:
        """What a write that waited too long raises (a 429 with Retry-After)."""
        ...


@dataclasses.dataclass(eq=False)
class _Write(Generic[T]):
    key: str
    apply: Callable[[Connection], T]
    prepare: Callable[[], None] | None
    # The request's context (the actor its audit records name: exosuit/db/audit.py), in
    # which its leader, maybe another request's thread, runs it.
    context: contextvars.Context = dataclasses.field(default_factory=contextvars.copy_context)
    wake: threading.Event = dataclasses.field(default_factory=threading.Event)
    taken: bool = False
    finished: bool = False
    result: Any = None
    error: BaseException | None = None

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.finished = result, error, True
        self.wake.set()


class GroupCommit:
    """This process's queue of writes, applied by whichever waiting request holds an
    admission slot (``admission``), several in one transaction of ``db``."""

    def __init__(self, db: Database, admission: Slots, *, max_batch: int = MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError(f"a batch holds at least one write: {max_batch}")
        self.db = db
        self.admission = admission
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: collections.deque[_Write[Any]] = collections.deque()
        # What was done, for tests and benchmarks: transactions, writes in them.
        self.transactions = 0
        self.writes = 0

    @property
    def queued(self) -> int:
        """Writes waiting for a leader to take them."""
        with self._lock:
            return len(self._queue)

    def run(
        self,
        key: str,
        apply: Callable[[Connection], T],
        *,
        prepare: Callable[[], None] | None = None,
        refuse: bool = True,
    ) -> T:
        """``apply(conn)``'s result once committed (with other writes, maybe), after
        ``prepare()`` (no database) passed; what either raised, raised here; 429 (the
        admission's ``ApiError``) when no leader took it within the admission's wait.
        ``key``: the order in which a batch applies its writes (a host name: batches
        lock hosts' rows in one order). ``refuse=False``: a write that must not be refused
        (an unchanged report's report time): not taken within the wait, it runs in a
        transaction of its own instead of a 429."""
        write: _Write[T] = _Write(key, apply, prepare)
        with self._lock:
            self._queue.append(write)
        deadline = time.monotonic() + self.admission.wait
        while True:
            write.wake.clear()
            if write.finished:
                break
            if not write.taken:
                if self.admission.try_acquire():
                    self._lead(write)
                    continue
                if time.monotonic() >= deadline and self._withdraw(write):
                    if refuse:
                        raise self.admission.refusal()
                    if prepare is not None:
                        prepare()
                    return self.db.write(apply)
            # Woken by the leader that frees a slot; looked again now and then anyway.
            timeout = _POLL if write.taken else min(_LOOK, max(0.0, deadline - time.monotonic()))
            write.wake.wait(timeout)
        if write.error is not None:
            raise write.error
        result: T = write.result
        return result

    def _withdraw(self, write: _Write[Any]) -> bool:
        """Take ``write`` out of the queue unless a leader took it meanwhile."""
        with self._lock:
            if write.taken:
                return False
            self._queue.remove(write)
            return True

    def _lead(self, own: _Write[Any]) -> None:
        """Holding an admission slot: apply batches until ``own`` is done (or taken by
        another leader), then free the slot and wake the next queued write, which may
        lead next."""
        try:
            while not own.finished:
                with self._lock:
                    batch: list[_Write[Any]] = []
                    while self._queue and len(batch) < self.max_batch:
                        write = self._queue.popleft()
                        write.taken = True
                        batch.append(write)
                if not batch:
                    break  # another leader took ``own``: it answers it
                self._apply(batch)
        finally:
            self.admission.release()
            with self._lock:
                following = self._queue[0] if self._queue else None
            if following is not None:
                following.wake.set()

    def _apply(self, batch: list[_Write[Any]]) -> None:
        """Prepare each write, apply those that passed in one transaction, answer each."""
        try:
            ready = []
            for write in batch:
                try:
                    if write.prepare is not None:
                        write.context.run(write.prepare)
                except Exception as error:  # noqa: BLE001 - that request's own answer
                    write.finish(error=error)
                else:
                    ready.append(write)
            ready.sort(key=lambda w: w.key)
            if len(ready) == 1:
                self._alone(ready[0])
            elif ready:
                self._together(ready)
        finally:
            for write in batch:  # however the batch ended (even a BaseException)
                if not write.finished:
                    write.finish(error=RuntimeError("the batch ended without an answer"))

    def _alone(self, write: _Write[Any]) -> None:
        try:
            result = self.db.write(lambda conn: write.context.run(write.apply, conn))
        except Exception as error:  # noqa: BLE001 - the request's answer
            write.finish(error=error)
        else:
            self._count(1)
            write.finish(result)

    def _together(self, ready: list[_Write[Any]]) -> None:
        def apply(conn: Connection) -> list[tuple[Any, BaseException | None]]:
            outcomes: list[tuple[Any, BaseException | None]] = []
            for write in ready:
                savepoint = conn.begin_nested()
                try:
                    result = write.context.run(write.apply, conn)
                except exc.DBAPIError as error:
                    # A deadlock or a lost connection is the transaction's, not the
                    # write's: MariaDB (Galera too) has rolled the whole transaction
                    # back, savepoint included. Run the batch again (Database.write),
                    # or fail it all; never roll back to a savepoint that is gone.
                    if _whole_batch(error):
                        raise
                    savepoint.rollback()
                    outcomes.append((None, error))
                except Exception as error:  # noqa: BLE001 - that request's answer
                    savepoint.rollback()
                    outcomes.append((None, error))
                else:
                    savepoint.commit()
                    outcomes.append((result, None))
            return outcomes

        try:
            outcomes = self.db.write(apply)
        except Exception as error:  # noqa: BLE001 - nothing committed (or unknown): all fail
            for write in ready:
                write.finish(error=error)
            return
        self._count(len(ready))
        for write, (result, failure) in zip(ready, outcomes, strict=True):
            write.finish(result, failure)

    def _count(self, writes: int) -> None:
        with self._lock:
            self.transactions += 1
            self.writes += writes


def _whole_batch(error: exc.DBAPIError) -> bool:
    """Whether ``error`` within one write's savepoint is the transaction's (a deadlock,
    a serialization failure, the connection lost): the batch is run again or fails as a
    whole, never committed without that write."""
    return db_api._is_retryable(error) or bool(error.connection_invalidated)
