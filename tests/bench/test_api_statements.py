"""bench/api_statements.py counts what each API operation sends to the database.

On SQLite (no server needed): the profile cycle is two transactions of two statements
each (insert and audit record; delete and audit record) after its ``BEGIN IMMEDIATE``,
and the ARQ cycle three transactions (issue 25's counts, doc/benchmarks.md). A change
that adds a statement to either path fails here and says what it sent (``--sql``).
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_statements_and_commits_per_operation_on_sqlite():
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "api_statements.py"),
            "--db",
            "sqlite",
            "--ops",
            "3",
            "--scenarios",
            "profile,arq,arq_wait",
            "--sql",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    counts = {
        name: dict(part.split(" ") for part in rest.split(", "))
        for name, rest in re.findall(r"^  (\w+) +(commits [^;]*);", result.stdout, re.M)
    }
    assert set(counts) == {"profile", "arq", "arq_wait"}, result.stdout
    assert counts["profile"] == {"commits": "2", "statements": "6"}, result.stdout
    assert counts["arq"] == {"commits": "3", "statements": "17"}, result.stdout
    # Nova's poll: one read transaction (SQLite's BEGIN, the list, its commit).
    assert counts["arq_wait"] == {"commits": "4", "statements": "19"}, result.stdout
