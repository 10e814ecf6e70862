"""The one way drivers run vendor tools (nvidia-smi, fpgaconf, xbmgmt …).

Tests replace ``SubprocessRunner`` with ``RecordedRunner``, which answers from
recorded output instead of running anything.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CommandFailed",
    "CommandNotRecorded",
    "CommandResult",
    "CommandRunner",
    "RecordedRunner",
    "SubprocessRunner",
]


@dataclasses.dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str = ""

    def check(self) -> CommandResult:
        """Raise CommandFailed unless the command exited 0."""
        if self.returncode != 0:
            raise CommandFailed(self)
        return self


class CommandFailed(RuntimeError):
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        detail = (result.stderr or result.stdout).strip().splitlines()
        super().__init__(
            f"{shlex.join(result.argv)} exited {result.returncode}"
            + (f": {detail[-1]}" if detail else "")
        )


class CommandNotRecorded(FileNotFoundError):
    """A RecordedRunner was asked for a command it has no recording of."""


@runtime_checkable
class CommandRunner(Protocol):
    def run(self, argv: Sequence[str], *, timeout: float = 30.0) -> CommandResult: ...


class SubprocessRunner:
    """Runs the command for real. A missing tool raises FileNotFoundError."""

    def run(self, argv: Sequence[str], *, timeout: float = 30.0) -> CommandResult:
        completed = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
        return CommandResult(tuple(argv), completed.returncode, completed.stdout, completed.stderr)


class RecordedRunner:
    """Answers from recordings: ``{"<shlex-joined argv>": {"returncode", "stdout", "stderr"}}``.

    ``RecordedRunner.from_file(path)`` reads such a mapping from a JSON file. A
    command without a recording raises CommandNotRecorded (as a missing tool
    raises FileNotFoundError), so drivers see what they would see on a host
    without the tool. A word ``*`` in a recording's command stands for any one
    argument (a file the agent names at run time, such as an image to load); an exact
    recording wins over one with ``*``.
    """

    def __init__(self, recordings: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.recordings = dict(recordings or {})
        self.calls: list[tuple[str, ...]] = []

    @classmethod
    def from_file(cls, path: str) -> RecordedRunner:
        if not os.path.exists(path):
            return cls({})
        with open(path) as f:
            return cls(json.load(f))

    def run(self, argv: Sequence[str], *, timeout: float = 30.0) -> CommandResult:
        argv = tuple(argv)
        self.calls.append(argv)
        recording = self.recordings.get(shlex.join(argv))
        if recording is None:
            recording = self._matching(argv)
        if recording is None:
            raise CommandNotRecorded(f"no recording of {shlex.join(argv)}")
        return CommandResult(
            argv,
            int(recording.get("returncode", 0)),
            recording.get("stdout", ""),
            recording.get("stderr", ""),
        )

    def _matching(self, argv: tuple[str, ...]) -> Mapping[str, Any] | None:
        for command, recording in self.recordings.items():
            if "*" not in command:
                continue
            words = shlex.split(command)
            if len(words) == len(argv) and all(
                w in ("*", a) for w, a in zip(words, argv, strict=True)
            ):
                return recording
        return None
