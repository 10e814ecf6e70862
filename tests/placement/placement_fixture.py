"""The one real Placement of a test run (registered by tests/conftest.py only).

A session fixture defined in (or imported into) more than one conftest or module is a
separate fixture for each, and each would start its own server: so it lives here, and
only the root conftest imports it.
"""

from __future__ import annotations

import pytest

from tests.conftest import require
from tests.placement.conftest import PlacementServer, _placement_manage


@pytest.fixture(scope="session", name="placement")
def placement_fixture(tmp_path_factory):
    manage = _placement_manage()
    try:
        import placement.wsgi  # noqa: F401
    except ImportError:
        manage = None
    require(manage is not None, "openstack-placement is not installed (pip install -e '.[test]')")
    server = PlacementServer(tmp_path_factory.mktemp("placement"))
    server.sync_db(manage)
    server.start()
    yield server
    server.stop()
