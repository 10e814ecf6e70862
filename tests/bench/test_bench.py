"""bench/api.py runs end to end (briefly) and cleans up after itself."""

from __future__ import annotations

import json
import os
import pathlib
import pstats
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_api_benchmark_runs_every_scenario_on_sqlite(tmp_path):
    out = tmp_path / "bench.json"
    # Its own temporary folder: other tests running beside it (pytest-xdist) make theirs.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "api.py"),
            "--db",
            "sqlite",
            "--workers",
            "1",
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
            "--concurrency",
            "1,2",
            "--scenarios",
            "version,deployables,profile,arq",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["db"] == "sqlite"
    assert report["api_workers"] == 1
    runs = {(r["scenario"], r["clients"]): r for r in report["results"]}
    assert set(runs) == {
        (s, c) for s in ("version", "deployables", "profile", "arq") for c in (1, 2)
    }
    for run in runs.values():
        assert run["ops"] > 0
        assert run["p50_ms"] <= run["p95_ms"]
    # One ARQ cycle is four requests (create, bind, one GET until resolved, delete:
    # Nova's); a profile cycle two.
    assert runs[("arq", 1)]["requests"] == 4 * runs[("arq", 1)]["ops"]
    assert runs[("profile", 2)]["requests"] == 2 * runs[("profile", 2)]["ops"]
    assert "GET /v2/deployables" in result.stdout
    # The temporary folder (database, configuration, server log) is gone.
    assert list(tmp.glob("exosuit-bench-api-*")) == []


def test_the_in_process_benchmark_measures_and_profiles_every_scenario(tmp_path):
    profile = tmp_path / "profile"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "api_inprocess.py"),
            "--db",
            "sqlite",
            "--ops",
            "5",
            "--warmup",
            "2",
            "--rounds",
            "2",
            "--profile",
            str(profile),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("version", "deployables", "profile", "arq"):
        assert re.search(rf"^\s+{name}\s+\d+\.\d+ ms CPU/op \(", result.stdout, re.M), result.stdout
        stats = pstats.Stats(str(tmp_path / f"profile.{name}.pstats"))
        assert stats.total_calls > 0
