"""Waiting for the server, visibly: a status line redrawn in place on a terminal,
one plain line per change otherwise (logs, CI, pipes). Used by every ``--wait``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["Progress", "WaitTimeout", "wait"]

_SPINNER = "|/-\\"
_FRAME_SECONDS = 0.1


class WaitTimeout(Exception):
    """The condition still did not hold at the deadline; ``last`` is what was seen."""

    def __init__(self, last: Any) -> None:
        super().__init__("timed out")
        self.last = last


def colour(text: str, code: str, stream: TextIO) -> str:
    """``text`` in an ANSI colour: only on a terminal, unless NO_COLOR is set or the
    terminal is dumb."""
    if not _is_terminal(stream) or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return text
    return f"\033[{code}m{text}\033[0m"


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """One status at a time on ``stream`` (stderr, so stdout stays the output)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.terminal = _is_terminal(stream)
        self._last = ""
        self._frame = 0
        self.shown = False  # whether a status was shown at all

    def show(self, text: str) -> None:
        self.shown = True
        if self.terminal:
            self._frame = (self._frame + 1) % len(_SPINNER)
            self.stream.write(f"\r\033[K{_SPINNER[self._frame]} {text}")
            self.stream.flush()
        elif text != self._last:
            self.stream.write(text + "\n")
            self.stream.flush()
        self._last = text

    def clear(self) -> None:
        """Erase the status line (a terminal); plain lines stay."""
        if self.terminal and self._last:
            self.stream.write("\r\033[K")
            self.stream.flush()
        self._last = ""


def wait(
    poll: Callable[[], Any],
    done: Callable[[Any], bool],
    describe: Callable[[Any], str],
    progress: Progress,
    *,
    interval: float = 1.0,
    timeout: float | None = None,
    first: Any = None,
) -> Any:
    """Call ``poll`` every ``interval`` seconds until ``done(result)``; show
    ``describe(result)`` meanwhile. Returns the last result; WaitTimeout after
    ``timeout`` seconds. Ctrl-C (KeyboardInterrupt) goes to the caller, line cleared.
    Off a terminal (a pipe, a log), one line per change and a last one for the state it
    ended in."""
    began = time.monotonic()
    current = poll() if first is None else first
    try:
        while not done(current):
            elapsed = time.monotonic() - began
            if timeout is not None and elapsed >= timeout:
                raise WaitTimeout(current)
            next_poll = time.monotonic() + interval
            while True:
                # On a terminal the spinner turns between polls; elsewhere one line per change.
                progress.show(
                    f"{describe(current)} ({time.monotonic() - began:.0f} s)"
                    if progress.terminal
                    else describe(current)
                )
                remaining = next_poll - time.monotonic()
                if remaining <= 0:
                    break
                time.sleep(min(remaining, _FRAME_SECONDS if progress.terminal else remaining))
            current = poll()
        # Off a terminal the lines stay: the last one says where it ended.
        if not progress.terminal and progress.shown:
            progress.show(describe(current))
    finally:
        progress.clear()
    return current
