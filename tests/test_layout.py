"""The layout's rules that lint-imports cannot see (CONTRIBUTING.md, "Where things are"):

* no string outside ``exosuit/db/`` is an SQL statement (lint-imports keeps SQLAlchemy
  out; this keeps hand-written SQL out), and the SQL contract of ``pyproject.toml``
  names every package and module of ``exosuit`` but ``exosuit.db``;
* every handler the route table holds is at most ``MAX_HANDLER_LINES`` lines long,
  counted from its ``def`` to its last line without its docstring;
* ``tests/`` has one axis, the package under test (CONTRIBUTING.md, "Where a test goes"),
  and every test file's name is unique in it.
"""

from __future__ import annotations

import ast
import inspect
import pkgutil
import re
import textwrap
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import exosuit
from exosuit.api import router

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "exosuit"
MAX_HANDLER_LINES = 40

# Statements, not words: "DELETE" alone is an HTTP method, "select" a verb of prose.
_SQL_ANYWHERE = re.compile(
    r"\bSELECT\b.+?\bFROM\b|\bINSERT\s+INTO\b|\bUPDATE\s+[\w.\"`{}]+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\b(CREATE|DROP|ALTER|TRUNCATE)\s+(TABLE|INDEX|DATABASE|SCHEMA|VIEW|SEQUENCE)\b"
    r"|\bSET\s+TRANSACTION\b|\bBEGIN\s+(IMMEDIATE|EXCLUSIVE|DEFERRED|TRANSACTION)\b",
    re.IGNORECASE | re.DOTALL,
)
_SQL_OPENING = re.compile(r"^\s*(SELECT\s+\S|PRAGMA\s+\w)")  # "SELECT 1", "PRAGMA foo"


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.add(id(first.value))
    return found


def string_literals(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal of ``source`` but docstrings; an f-string
    is one text, with ``{}`` for each of its fields."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):  # breadth first: an f-string comes before its parts
        if isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in node.values)
            text = "".join(
                part.value if isinstance(part, ast.Constant) else "{}" for part in node.values
            )
            yield node.lineno, text
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in skip:
                yield node.lineno, node.value


def sql_statements(source: str) -> list[tuple[int, str]]:
    """(line, statement) of each string literal of ``source`` that is SQL."""
    return [
        (line, text)
        for line, text in string_literals(source)
        if _SQL_ANYWHERE.search(text) or _SQL_OPENING.search(text)
    ]


@pytest.mark.parametrize(
    "source",
    [
        'conn.exec_driver_sql("SELECT id FROM hosts WHERE hostname = %s", (name,))',
        'q = "select count(*)\\n  from devices"',
        'Q = ("INSERT INTO jobs (kind) "\n     "VALUES (:kind)")',
        'sql = f"UPDATE {table} SET state = :state"',
        "conn.execute(text('DELETE FROM attach_handles'))",
        'conn.exec_driver_sql("SELECT 1")',
        'conn.exec_driver_sql("PRAGMA journal_mode=WAL")',
        'conn.exec_driver_sql("BEGIN IMMEDIATE")',
        'DDL = "CREATE TABLE hosts (id INTEGER)"',
        'def f():\n    """Docstring."""\n    return "DELETE FROM hosts"',
    ],
)
def test_the_sql_detector_finds_statements(source):
    assert sql_statements(source), source


@pytest.mark.parametrize(
    "source",
    [
        '"""Module docstring: SELECT uuid FROM devices is what it reads."""',
        'def f():\n    """Runs UPDATE devices SET status in one transaction."""',
        'class C:\n    """DELETE FROM hosts, eventually."""',
        'ROUTE = {"DELETE": delete_arq, "PATCH": patch_arq}',
        'HELP = "Select the devices to list."',
        'MSG = "Deleted from the catalogue; update the settings."',
        'BEGIN = "<!-- BEGIN REFERENCE -->"',
    ],
)
def test_the_sql_detector_leaves_docstrings_and_prose_alone(source):
    assert sql_statements(source) == []


def test_the_sql_detector_finds_the_sql_of_exosuit_db():
    """It finds what is there: exosuit/db/api.py's own statements."""
    found = {text for _, text in sql_statements((PACKAGE / "db" / "api.py").read_text())}
    assert {"SELECT 1", "BEGIN IMMEDIATE"} <= found


def test_no_sql_outside_exosuit_db():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if PACKAGE / "db" not in path.parents
        for line, text in sql_statements(path.read_text())
    ]
    assert offenders == [], "SQL belongs in exosuit/db/:\n" + "\n".join(offenders)


def test_the_sql_contract_names_everything_but_exosuit_db():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "sql"]
    everything = {f"exosuit.{m.name}" for m in pkgutil.iter_modules(exosuit.__path__)}
    assert set(contract["source_modules"]) == everything - {"exosuit.db"}


# -- handlers -----------------------------------------------------------------------------


def routed_handlers() -> dict[str, Callable]:
    """The functions of exosuit/api/handlers/ that the route table holds, by name."""
    found = {}
    for methods in router.ROUTES.values():
        for handler in methods.values():
            handler = inspect.unwrap(handler)
            if handler.__module__.startswith("exosuit.api.handlers."):
                found[f"{handler.__module__}.{handler.__qualname__}"] = handler
    return found


def handler_lines(source: str) -> int:
    """The lines of the function ``source`` holds, from its ``def`` (decorators are not
    counted) to its last line, less its docstring's."""
    function = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
    lines = function.end_lineno - function.lineno + 1
    docstrings = _docstrings(function)
    first = function.body[0]
    if isinstance(first, ast.Expr) and id(first.value) in docstrings:
        lines -= first.end_lineno - first.lineno + 1
    return lines


def test_handler_lines_counts_from_def_to_the_end_without_the_docstring():
    source = '''
@decorator
def handler(req):
    """Two lines
    of docstring."""
    a = 1
    return a
'''
    assert handler_lines(source) == 3
    assert handler_lines("def handler(req):\n    return 'a docstring-free body'\n") == 2


def test_the_route_table_holds_the_handlers():
    handlers = routed_handlers()
    assert "exosuit.api.handlers.arqs.patch_arqs" in handlers
    assert len(handlers) > 40


def test_every_routed_handler_is_at_most_40_lines():
    too_long = {
        name: lines
        for name, handler in routed_handlers().items()
        if (lines := handler_lines(inspect.getsource(handler))) > MAX_HANDLER_LINES
    }
    assert too_long == {}, (
        f"handlers over {MAX_HANDLER_LINES} lines (move logic into named pieces): {too_long}"
    )


def test_every_module_of_exosuit_api_handlers_holds_a_routed_handler():
    """exosuit/api/handlers/ holds handler modules only: what several handlers share, or
    a saga a handler calls, is a module of exosuit/api/ (programs.py, claim_saga.py)."""
    package = PACKAGE / "api" / "handlers"
    routed = {name.rsplit(".", 1)[0] for name in routed_handlers()}
    modules = {f"exosuit.api.handlers.{m.name}" for m in pkgutil.iter_modules([str(package)])}
    assert modules - routed == set(), "modules of exosuit/api/handlers/ without a handler"


# -- tests/ -------------------------------------------------------------------------------

TESTS = ROOT / "tests"
# The folders of tests/ that hold no package's tests: data and shared helpers.
DATA_AND_HELPERS = {"fixtures", "gabbits", "helpers"}
# The repository's folders beside exosuit/ whose tests have a folder of the same name.
BESIDE = {"bench", "deploy"}


def _test_files() -> list[Path]:
    return sorted(
        path
        for path in TESTS.rglob("test_*.py")
        if not {"fixtures", "gabbits"} & set(path.relative_to(TESTS).parts)
    )


def test_every_test_file_name_is_unique_in_tests():
    by_name: dict[str, list[str]] = {}
    for path in _test_files():
        by_name.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    twice = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert twice == {}, "name each after what it tests (CONTRIBUTING.md, Where a test goes)"


def test_the_folders_of_tests_are_the_packages_under_test():
    packages = {m.name for m in pkgutil.iter_modules(exosuit.__path__) if m.ispkg}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name[0] not in "._"}
    others = folders - packages - BESIDE - DATA_AND_HELPERS
    assert others == set(), "a folder of tests/ is named after the package its tests test"
    tested = {t.relative_to(TESTS).parts[0] for t in _test_files()}
    assert tested & DATA_AND_HELPERS == set(), "tests/helpers/ and the data folders hold no test"


def test_a_sub_folder_of_tests_mirrors_a_sub_package_or_has_a_conftest_of_its_own():
    strays = sorted(
        str(folder.relative_to(ROOT))
        for folder in {t.parent for t in _test_files()}
        if len(folder.relative_to(TESTS).parts) > 1
        and not (PACKAGE / folder.relative_to(TESTS)).is_dir()
        and not (folder / "conftest.py").is_file()
    )
    assert strays == [], "a sub-folder mirrors a sub-package, or has a conftest.py of its own"
