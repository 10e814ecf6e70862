"""A process of Exosuit stops cleanly on SIGTERM or SIGINT at any moment of its start.

Each long-running console script (exosuit-api, exosuit-conductor, exosuit-agent run,
exosuit serve, exosuit-kubelet-plugin) runs its ``main()`` inside
``with stop_while_starting():``, entered before it reads its configuration or reaches its
database. From then on, until it hands the signals to its running loop
(``signal.signal`` with the loop's own handler), either signal ends the start by raising
``StoppedWhileStarting``: a ``SystemExit`` with status 0. The ``finally`` blocks it
unwinds through release what the start took (a database pool, the agent cache's lock,
threads already started), and the process exits 0, as a stop of its running loop does.

Python's own default is worse at both: SIGTERM kills the process where it stands (exit
-15: a service manager reports a failure, and a supervisor that stops a process still
waiting for its database sees it crash), and SIGINT raises KeyboardInterrupt with a
traceback.

``SystemExit`` is not an ``Exception``: the start's ``except Exception`` handlers let it
through, as they let a real interpreter exit through.

When the block ends, the handlers from before it are back (a test that calls ``main()``
in-process keeps its own). Off the main thread, where Python allows no handler, the block
does nothing.

What this cannot cover is the interpreter's own start and the imports of the console
script's module, before ``main()`` runs: the console modules import little at module
level (the configuration's options; their work is imported inside ``main()``), so that
window is a fraction of a second.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["StoppedWhileStarting", "signals_held", "stop_while_starting"]

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StoppedWhileStarting(SystemExit):
    """A stop signal came before the process's running loop took over its signals."""

    def __init__(self, signum: int) -> None:
        super().__init__(0)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by signal {self.signum} while starting"


def _raise(signum: int, _frame: FrameType | None) -> None:
    # NOTE: nothing is written here: the main thread may be inside a write to the same
    # stream, and a reentrant write raises RuntimeError instead of this stop.
    raise StoppedWhileStarting(signum)


@contextmanager
def stop_while_starting() -> Iterator[None]:
    """In the block, until the caller installs its running loop's handlers, SIGTERM and
    SIGINT raise ``StoppedWhileStarting`` (exit status 0); after it, the handlers from
    before it are back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def signals_held() -> Iterator[None]:
    """In the block, a SIGTERM or SIGINT is held, then delivered again once the block
    ends (to the handler in place before it: raising ``StoppedWhileStarting`` during a
    start). For a step a raise in its middle would leave half done and loud: a database
    pool closing its connections logs every close it is interrupted in, with a traceback.
    Off the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def _hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    previous = {signum: signal.signal(signum, _hold) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if held:
            signal.raise_signal(held[0])
