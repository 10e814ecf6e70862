"""The package as pip builds it from pyproject.toml: no warnings, and every file it needs at
run time (the dashboard, the migrations, the schemas) inside."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_the_wheel_builds_without_warnings_and_holds_the_package_data(tmp_path):
    # Without build isolation: the virtualenv's setuptools (pyproject's build requires),
    # no index needed.
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v"]
        + ["--wheel-dir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    output = (done.stdout + done.stderr).splitlines()
    warnings = [line.strip() for line in output if "Warning:" in line]
    assert warnings == []
    [wheel] = tmp_path.glob("exosuit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "exosuit/api/dashboard/static/app.js",
        "exosuit/api/dashboard/templates/index.html",
        "exosuit/db/migrations/script.py.mako",
        "exosuit/db/migrations/versions/0001_initial_schema.py",
        "exosuit/schemas/inventory-v1.json",
    ):
        assert needed in names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "doc/"))]


def _scripts(extra: str) -> set[str]:
    """The commands a virtualenv made with Exosuit's ``extra`` has: its own, Exosuit's
    console scripts and those of the extra's packages."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    scripts = {"python", "pip"} | set(project["scripts"])
    for requirement in project["optional-dependencies"][extra]:
        name = re.split(r"[<>=!\[ ]", requirement, maxsplit=1)[0]
        scripts |= {
            e.name for e in metadata.distribution(name).entry_points if e.group == "console_scripts"
        }
    return scripts


def test_every_command_the_readme_runs_from_the_virtualenv_is_one_make_installs():
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install --quiet -e '.[client]'" in makefile  # make run's install
    assert "pip install --quiet -e '.[test]'" in makefile  # make test's install
    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"\.venv/bin/([A-Za-z0-9_-]+)", readme))
    assert "openstack" in named and "openstack" in _scripts("client")
    assert named <= _scripts("client") | _scripts("test")
