"""``--wait`` for the commands of API 2.7 (doc/devices.md): poll until every host or
device asked has got there, with a progress line, a ``--timeout`` and Ctrl-C that stops
the waiting only (what was asked goes on on the server)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from exosuit.cli.client import CLIError
from exosuit.cli.progress import Progress, WaitTimeout, wait

__all__ = ["add_wait_options", "wait_for"]


def add_wait_options(parser: argparse.ArgumentParser, until: str) -> None:
    parser.add_argument("--wait", action="store_true", help=f"Wait until {until}.")
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="With --wait: give up waiting after SECONDS (what was asked goes on).",
    )


def wait_for(
    command: Any,
    parsed_args: argparse.Namespace,
    poll: Callable[[], Any],
    done: Callable[[Any], bool],
    describe: Callable[[Any], str],
    *,
    first: Any = None,
    interval: float = 1.0,
) -> tuple[Any, bool]:
    """(the last poll, whether the waiting was interrupted). A timeout is a CLIError
    saying what was still missing; Ctrl-C sets the command's exit code 130."""
    stderr = command.app.stderr
    latest = [first]

    def remember() -> Any:
        latest[0] = poll()
        return latest[0]

    try:
        found = wait(
            remember,
            done,
            describe,
            Progress(stderr),
            interval=interval,
            timeout=parsed_args.timeout,
            first=first,
        )
    except WaitTimeout as timeout:
        raise CLIError(
            f"gave up waiting after {parsed_args.timeout:g} s: {describe(timeout.last)} "
            "(it goes on on the server)"
        ) from None
    except KeyboardInterrupt:
        stderr.write("stopped waiting: what was asked goes on on the server\n")
        command.exit_code = 130
        return latest[0], True
    return found, False
