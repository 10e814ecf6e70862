"""A database made by Cyborg itself, for the import tests.

``cyborg_source`` and ``cyborg_source_unmappable_held`` (module scope): each a new
MariaDB database (this machine's server, as the other MariaDB tests use it), its schema
made by ``cyborg-dbsync upgrade`` of PyPI's ``openstack-cyborg`` and its rows written by
Cyborg's object layer (a scenario of tests/db/fill_cyborg.py), both run with
the python of ``.venv-cyborg/`` (tests/helpers/venvs.py builds it once). Cyborg's
migrations need MariaDB/MySQL or PostgreSQL: on SQLite they stop at an ``ALTER COLUMN``.

Without MariaDB, or when the venv cannot be built (no package index), the tests skip
with the reason, except under CI=true.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require
from tests.helpers import venvs

FILL = Path(__file__).with_name("fill_cyborg.py")


class CyborgSource:
    def __init__(self, url: str, filled: dict) -> None:
        self.url = url
        self.filled = filled


def _build(db_servers, tmp_path_factory, scenario: str) -> CyborgSource:
    server = db_servers["mariadb"]
    require(server.engine is not None, server.error or "")
    try:
        venv = venvs.ensure("cyborg")
    except RuntimeError as error:
        require(False, f"cannot build .venv-cyborg: {error}")
    url = server.create()
    workdir = tmp_path_factory.mktemp("cyborg")
    conf = workdir / "cyborg.conf"
    conf.write_text(f"[DEFAULT]\ntransport_url = fake:/\n[database]\nconnection = {url}\n")
    sync = subprocess.run(
        [str(venv.bin("cyborg-dbsync")), "--config-file", str(conf), "upgrade"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert sync.returncode == 0, sync.stderr[-3000:]
    fill = subprocess.run(
        [str(venv.python), str(FILL), str(conf), scenario],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert fill.returncode == 0, fill.stderr[-3000:]
    return CyborgSource(url, json.loads(fill.stdout))


@pytest.fixture(scope="module")
def cyborg_source(db_servers, tmp_path_factory) -> CyborgSource:
    """Scenario ``cut-over`` of fill_cyborg.py: two hosts, every ARQ state."""
    return _build(db_servers, tmp_path_factory, "cut-over")


@pytest.fixture(scope="module")
def cyborg_source_unmappable_held(db_servers, tmp_path_factory) -> CyborgSource:
    """Scenario ``unmappable-held``: a server holds a device Exosuit cannot key."""
    return _build(db_servers, tmp_path_factory, "unmappable-held")
