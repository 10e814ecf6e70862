"""Many rows of one table in one statement: ``INSERT … VALUES (…), (…) [RETURNING]``.

SQLAlchemy's own multi-row insert (``conn.execute(insert, rows)``, "insertmanyvalues")
builds each batch's parameters row by row through its compiler; with ordered
``RETURNING`` (``sort_by_parameter_order``) it also adds a sentinel and sorts. For a new
host's rows (8 devices: about 110 rows in six tables) that was about half of the API's
CPU for the whole report. ``insert_rows`` sends the same rows as one statement whose
text is built once per table, columns and row count, with the values converted by each
column type's bind processor for the dialect (what SQLAlchemy applies), positional in the
driver's own paramstyle, and the ids mapped back by each row's ``uuid`` (never by the
order of ``RETURNING``, which no database promises). It marks no change counter itself
(exosuit/db/changes.py): its caller, which knows what the rows are, marks what they
change, as exosuit/db/inventory.py does after inserting a new host's deployables.

Rows must have the same keys; a column left out gets its scalar default, as SQLAlchemy
would give it, or the database's server default. Rows are sent in pages of at most
``MAX_PARAMETERS`` values (SQLite's limit is 32,766; PostgreSQL's and MariaDB's 65,535).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

__all__ = ["MAX_PARAMETERS", "insert_rows"]

MAX_PARAMETERS = 30000

_PLACEHOLDER = {"qmark": "?", "format": "%s", "pyformat": "%s", "numeric": None, "named": None}


def insert_rows(
    conn: Connection,
    table: sa.Table,
    rows: Sequence[dict[str, Any]],
    *,
    ids: bool = False,
    max_parameters: int = MAX_PARAMETERS,
) -> list[int]:
    """Insert ``rows`` into ``table`` (statements of at most ``max_parameters`` values);
    with ``ids``, their ``id``s in the rows' order (each row needs a ``uuid``), else []."""
    if not rows:
        return []
    columns = tuple(rows[0])
    plan = _plan(conn.dialect, table, columns)
    if plan is None or any(len(row) != len(columns) for row in rows):
        return _fallback(conn, table, rows, ids=ids)
    names, processors, extra = plan
    returning = ids and conn.dialect.insert_returning
    per_page = max(1, max_parameters // len(names))
    found: dict[str, int] = {}
    for start in range(0, len(rows), per_page):
        page = rows[start : start + per_page]
        values: list[Any] = []
        for row in page:
            for name, process in zip(columns, processors, strict=True):
                value = row[name]
                values.append(process(value) if process is not None else value)
            values.extend(extra)
        sql = _statement(conn.dialect, table, names, len(page), returning)
        result = conn.exec_driver_sql(sql, tuple(values))
        if returning:
            found.update((uuid, id_) for id_, uuid in result)
    if not ids:
        return []
    uuids = [row["uuid"] for row in rows]
    if not returning:
        query = sa.select(table.c.uuid, table.c.id).where(table.c.uuid.in_(uuids))
        found = dict(conn.execute(query).all())
    return [found[uuid] for uuid in uuids]


def _fallback(
    conn: Connection, table: sa.Table, rows: Sequence[dict[str, Any]], *, ids: bool
) -> list[int]:
    """SQLAlchemy's own multi-row insert, for what ``_plan`` does not cover."""
    if not ids:
        conn.execute(sa.insert(table), list(rows))
        return []
    conn.execute(sa.insert(table), list(rows))
    uuids = [row["uuid"] for row in rows]
    query = sa.select(table.c.uuid, table.c.id).where(table.c.uuid.in_(uuids))
    found = dict(conn.execute(query).all())
    return [found[uuid] for uuid in uuids]


Processor = Callable[[Any], Any] | None


@functools.lru_cache(maxsize=256)
def _plan(
    dialect: Dialect, table: sa.Table, columns: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[Processor, ...], tuple[Any, ...]] | None:
    """The statement's column names (the rows' then the defaulted ones), the rows'
    values' bind processors and the defaulted columns' values; None when a left-out
    column's default is computed (SQLAlchemy's insert handles those) or the
    paramstyle is not positional."""
    if _PLACEHOLDER.get(dialect.paramstyle) is None:
        return None
    if any(name not in table.c for name in columns):
        return None
    # NOTE: the type's implementation for this dialect (a with_variant type's variant,
    # SQLite's DateTime with its storage format): the generic type's processor would let
    # the driver format a datetime its own way ('… 12:00:00', not '… 12:00:00.000000'),
    # and SQLite compares the text.
    processors = tuple(_processor(table.c[name].type, dialect) for name in columns)
    names = list(columns)
    extra: list[Any] = []
    for column in table.columns:
        if column.name in columns or column.default is None:
            continue
        default = column.default
        if not isinstance(default, sa.ColumnDefault) or not default.is_scalar:
            return None
        process = _processor(column.type, dialect)
        names.append(column.name)
        extra.append(process(default.arg) if process is not None else default.arg)
    return tuple(names), processors, tuple(extra)


def _processor(type_: Any, dialect: Dialect) -> Processor:
    """The bind processor of ``type_`` as ``dialect`` implements it."""
    processor: Processor = type_.dialect_impl(dialect).bind_processor(dialect)
    return processor


@functools.lru_cache(maxsize=512)
def _statement(
    dialect: Dialect, table: sa.Table, names: tuple[str, ...], count: int, returning: bool
) -> str:
    preparer = dialect.identifier_preparer
    mark = _PLACEHOLDER[dialect.paramstyle]
    assert mark is not None  # insert_rows comes here only for a paramstyle that has one
    row = "(" + ", ".join([mark] * len(names)) + ")"
    # Names from the table's metadata (quoted), never a caller's text; values are bound.
    sql = (
        f"INSERT INTO {preparer.format_table(table)} "  # noqa: S608
        f"({', '.join(preparer.quote(n) for n in names)}) VALUES {', '.join([row] * count)}"
    )
    if returning:
        sql += f" RETURNING {preparer.quote('id')}, {preparer.quote('uuid')}"
    return sql
