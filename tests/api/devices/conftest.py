"""The API as deployed: new devices start inactive ([inventory] new_device_activation's
default), unlike the other in-process tests (tests/conftest.py make_test_conf)."""

from __future__ import annotations

import pytest

from tests.conftest import make_test_conf


@pytest.fixture
def conf():
    return make_test_conf(**{"inventory.new_device_activation": "inactive"})
