"""bench/api_inprocess.py --count counts what each API operation sends to the database.

On SQLite (no server needed): the profile cycle is two write transactions of two
statements each (insert and audit record; delete and audit record), the ARQ cycle three
(create, bind, delete), and Nova's cycle one statement more (its poll). A change that adds
a statement or a commit to either path fails here (issue 25's counts, doc/benchmarks.md).
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
        [sys.executable, str(ROOT / "bench" / "api_inprocess.py"), "--db", "sqlite"]
        + ["--count", "--ops", "3", "--warmup", "1", "--rounds", "1"]
        + ["--scenarios", "profile,arq,arq_nowait"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    counts = {
        name: (int(statements), int(commits))
        for name, statements, commits in re.findall(
            r"^  (\w+) +per op: \d+ requests, (\d+) statements, (\d+) commits", result.stdout, re.M
        )
    }
    assert counts == {"profile": (4, 2), "arq_nowait": (14, 3), "arq": (15, 3)}, result.stdout
