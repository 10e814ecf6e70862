"""Declarative HTTP tests: every YAML story in tests/gabbits/, on every database backend.

Each YAML file is one ordered story on a fresh database (see gabbi_fixtures).
The same stories run on SQLite, PostgreSQL and MariaDB; a backend whose server
is absent is skipped with the reason (a failure under CI=true). After each test, no
write transaction of the story may have changed what the API caches without marking
it (exosuit/db/changes.py; the watch is tests/helpers/change_marks.py).

Run one file on one backend with, for example:
``pytest tests/api/test_gabbits.py -k "sqlite and arqs"``. A test
selected alone first runs the tests before it in its file.

NOTE: gabbi's own pytest integration (``py_test_generator``) registers a
collection hook that treats every collected test id containing ``:`` as a
gabbi test, and crashes the whole session on other modules' ids (such as PCI
addresses). So the tests are parametrized here, and each file's fixtures are
started and stopped by ``_Stories``, the way gabbi's suite would.
"""

from __future__ import annotations

import os
import unittest

import pytest
from gabbi import driver, reporter

from tests.api import gabbi_fixtures
from tests.conftest import BACKENDS
from tests.helpers import change_marks

GABBITS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "gabbits")


def _cases():
    """(file suite, test case, id) for every YAML test, on every backend, in order."""
    for backend in BACKENDS:
        top = driver.build_tests(
            GABBITS,
            unittest.TestLoader(),
            intercept=lambda backend=backend: gabbi_fixtures.LazyApp(backend),
            test_loader_name=f"gabbits.{backend}",
            fixture_module=gabbi_fixtures.fixtures_for(backend),
        )
        for story in top:
            for case in story:
                yield story, case, f"{backend}/{type(case).__name__}"


class _Stories:
    """Keeps the fixtures of one YAML file (a story) running while its tests run."""

    def __init__(self) -> None:
        self.story = None
        self.fixtures: list = []
        self.error: BaseException | None = None

    def enter(self, story, case) -> None:
        if story is not self.story:
            self.close()
            self.story = story
            try:
                for fixture_class in case.fixtures:
                    fixture = fixture_class()
                    fixture.__enter__()
                    self.fixtures.append(fixture)
            except BaseException as error:  # SkipTest, or a fixture that failed
                self.error = error
        if isinstance(self.error, unittest.SkipTest):
            pytest.skip(str(self.error))
        if self.error is not None:
            pytest.fail(f"fixture of {type(case).__name__} failed: {self.error!r}")

    def close(self) -> None:
        while self.fixtures:
            self.fixtures.pop().__exit__(None, None, None)
        self.story = None
        self.error = None


_STORIES = _Stories()
_CASES = list(_cases())


@pytest.fixture(scope="module", autouse=True)
def _stories():
    yield _STORIES
    _STORIES.close()
    gabbi_fixtures.drop_databases()


@pytest.mark.parametrize(("story", "case"), [c[:2] for c in _CASES], ids=[c[2] for c in _CASES])
def test_gabbi(story, case):
    _STORIES.enter(story, case)
    case.run(reporter.PyTestResult())
    # No write of the story changed what the API caches without saying so
    # (exosuit/db/changes.py: mark; tests/helpers/change_marks.py).
    missed = change_marks.all_missed()
    assert not missed, "a change not marked:\n" + "\n".join(map(str, missed))
