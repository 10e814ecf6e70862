"""Admission control: bound how many costly requests one API process runs at once.

A boot storm of thousands of agents must queue briefly in the API, not pile up
on the database. ``Admission.slot()`` lets ``concurrency`` requests of a kind run
at once in this process; another waits up to ``wait`` seconds for its turn and
then gets 429 with ``Retry-After`` (a random 1–3 s, so refused clients do not
come back together).
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator

from exosuit.api import wsgi

__all__ = ["Admission", "retry_after"]

# The bounds of the Retry-After of a refused request, in whole seconds (RFC 9110's form).
RETRY_AFTER_MIN = 1
RETRY_AFTER_MAX = 3


def retry_after(rng: random.Random | None = None) -> str:
    """The ``Retry-After`` value of a refusal: a whole number of seconds drawn from
    ``RETRY_AFTER_MIN``–``RETRY_AFTER_MAX`` with ``rng`` (default: the ``random``
    module's), so that the clients refused together spread their retries."""
    randint = rng.randint if rng is not None else random.randint
    return str(randint(RETRY_AFTER_MIN, RETRY_AFTER_MAX))


class Admission:
    """``concurrency`` slots for one kind of request in this process. ``message`` and
    ``code`` are those of the 429; ``rng`` draws its Retry-After (default: the
    ``random`` module's)."""

    def __init__(
        self,
        concurrency: int,
        wait: float,
        *,
        message: str,
        code: str,
        rng: random.Random | None = None,
    ) -> None:
        if concurrency < 1 or wait < 0:
            raise ValueError(f"admission needs a slot and a wait ≥ 0: {concurrency}, {wait}")
        self._slots = threading.BoundedSemaphore(concurrency)
        self.wait = wait
        self.message = message
        self.code = code
        self.rng = rng

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot for the block (released however it ends); 429 with
        ``Retry-After`` when none came free within ``wait`` seconds."""
        if not self._slots.acquire(timeout=self.wait):
            raise self.refusal()
        try:
            yield
        finally:
            self._slots.release()

    def try_acquire(self) -> bool:
        """Take a slot if one is free now (``release`` it); whether one was taken. For
        a caller that waits its own way (exosuit/db/group_commit.py)."""
        return self._slots.acquire(blocking=False)

    def release(self) -> None:
        """Free a slot ``try_acquire`` took."""
        self._slots.release()

    def refusal(self) -> wsgi.ApiError:
        """The 429 of a request that found no slot in time, with its Retry-After."""
        return wsgi.ApiError(
            429, self.message, self.code, headers=[("Retry-After", retry_after(self.rng))]
        )
