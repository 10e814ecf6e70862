"""The real Placement of tests/placement (its fixtures, shared with test_placement.py)."""

from tests.placement.conftest import hostname, placement_api  # noqa: F401
