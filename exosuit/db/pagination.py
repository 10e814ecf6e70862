"""Keyset pagination: ``limit``, ``marker``, ``sort_key``, ``sort_dir``, done in SQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions

__all__ = ["Page", "paginate"]


@dataclasses.dataclass(frozen=True)
class Page:
    limit: int
    sort_key: str = "created_at"
    sort_dir: str = "desc"
    marker: str | None = None  # the last item of the previous page (its uuid, by default)


def paginate(
    conn: Connection,
    stmt: sa.Select[*tuple[Any, ...]],
    table: sa.Table,
    page: Page | None,
    sort_columns: Mapping[str, sa.ColumnElement[Any]],
    marker_column: sa.ColumnElement[Any] | None = None,
    visible: sa.ColumnElement[bool] | None = None,
) -> sa.Select[*tuple[Any, ...]]:
    """``stmt`` ordered by ``page.sort_key`` (then id), after the marker, limit + 1 rows.

    One row more than the limit is fetched, so the caller knows whether a next
    page exists. ``sort_columns`` maps each allowed key to a non-null column
    expression; ``marker_column`` is what a marker names (default: the uuid).
    ``visible`` is what the caller may see (its project's rows …): a marker is looked
    up among those only, so that another project's item is "not found" (400) exactly
    as a made-up one is, not a page that tells it exists.
    Without a page (before microversion 2.4) everything comes, newest first, as in
    Cyborg.
    """
    if page is None:
        return stmt.order_by(table.c.created_at.desc(), table.c.id.desc())
    column = sort_columns[page.sort_key]
    ident = table.c.id
    descending = page.sort_dir == "desc"
    if page.marker is not None:
        named = table.c.uuid if marker_column is None else marker_column
        # An integer column's marker is compared as an integer: PostgreSQL casts a text
        # one to the column's type, and one beyond it is an error there, not "not found".
        wanted: Any = int(page.marker) if isinstance(named.type, sa.Integer) else page.marker
        lookup = sa.select(column.label("v"), ident).where(named == wanted)
        if visible is not None:
            lookup = lookup.where(visible)
        marker = conn.execute(lookup).first()
        if marker is None:
            raise exceptions.Invalid(reason=f"marker {page.marker} not found")
        value, marker_id = marker
        if descending:
            after = sa.or_(column < value, sa.and_(column == value, ident < marker_id))
        else:
            after = sa.or_(column > value, sa.and_(column == value, ident > marker_id))
        stmt = stmt.where(after)
    if descending:
        stmt = stmt.order_by(column.desc(), ident.desc())
    else:
        stmt = stmt.order_by(column.asc(), ident.asc())
    return stmt.limit(page.limit + 1)
