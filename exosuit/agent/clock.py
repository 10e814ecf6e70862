"""Time for the agent: what time it is, and waiting. Injected, so tests need not wait.

Every wait of the agent (the first report's jitter, the interval, the backoff while the
API is unreachable, ``Retry-After``, the coalescing of a uevent burst, the Keystone
catalog at start) goes through a ``Clock``. ``SystemClock`` is the real one;
``FakeClock`` runs virtual time, in which any wait is over at once.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """The time, in epoch seconds."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until ``event`` is set or ``seconds`` have passed; True if it is set
        (``threading.Event.wait``'s contract)."""
        ...


class SystemClock:
    """The real time (``time.time``) and real waits. Implements [Clock]."""

    def now(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


class FakeClock:
    """Virtual time for tests, for one thread. Implements [Clock].

    ``wait`` never blocks. If the event is set it returns True at once. Otherwise
    virtual time moves on to ``now + seconds``, running on the way each callback
    scheduled (``call_at``, ``call_later``) for that stretch, at its time and in
    order; it stops at the callback that sets the event and returns True, or at the
    end and returns False. ``waits`` lists every wait asked for, in order.
    """

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = start
        self.waits: list[float] = []
        self._due: list[tuple[float, int, Callable[[], object]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], object]) -> None:
        """Run ``callback`` when virtual time reaches ``when`` (in a wait or ``advance``)."""
        heapq.heappush(self._due, (when, next(self._order), callback))

    def call_later(self, delay: float, callback: Callable[[], object]) -> None:
        self.call_at(self._now + delay, callback)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, running the callbacks due."""
        self._run_until(self._now + max(0.0, seconds), None)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        self.waits.append(seconds)
        if event.is_set():
            return True
        return self._run_until(self._now + max(0.0, seconds), event)

    def _run_until(self, deadline: float, event: threading.Event | None) -> bool:
        while self._due and self._due[0][0] <= deadline:
            when, _, callback = heapq.heappop(self._due)
            self._now = max(self._now, when)
            callback()
            if event is not None and event.is_set():
                return True
        self._now = deadline
        return False
