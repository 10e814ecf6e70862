"""Statements each dialect spells differently, built once per dialect."""

from __future__ import annotations

import functools

import sqlalchemy as sa

__all__ = ["insert_if_absent"]


@functools.cache
def insert_if_absent(
    dialect: str, table: sa.Table, columns: tuple[str, ...], key: str
) -> sa.Insert:
    """``INSERT`` of ``columns`` (bound parameters of the same names) that does nothing
    when a row with the same unique ``key`` exists: one round trip, no savepoint, and
    no error for a concurrent insert of the same row (it waits on the unique index,
    then does nothing)."""
    values: dict[str, sa.BindParameter[object]] = {c: sa.bindparam(c) for c in columns}
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return (
            postgresql.insert(table)
            .values(values)
            .on_conflict_do_nothing(index_elements=[table.c[key]])
        )
    if dialect == "sqlite":
        from sqlalchemy.dialects import sqlite

        return (
            sqlite.insert(table)
            .values(values)
            .on_conflict_do_nothing(index_elements=[table.c[key]])
        )
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        statement = mysql.insert(table).values(values)
        # NOTE: not INSERT IGNORE: that would also turn real errors into warnings.
        return statement.on_duplicate_key_update({key: statement.inserted[key]})
    raise NotImplementedError(dialect)
