"""Keyset pagination: ``limit``, ``marker``, ``sort_key``, ``sort_dir``, done in SQL."""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from exosuit import exceptions

__all__ = ["Page", "paginate"]


@dataclasses.dataclass(frozen=True)
class Page:
    limit: int
    sort_key: str = "created_at"
    sort_dir: str = "desc"
    marker: str | None = None  # uuid of the last item of the previous page


def paginate(conn, stmt, table: sa.Table, page: Page | None, sort_columns: dict) -> sa.Select:
    """``stmt`` ordered by ``page.sort_key`` (then id), after the marker, limit + 1 rows.

    One row more than the limit is fetched, so the caller knows whether a next
    page exists. ``sort_columns`` maps each allowed key to a non-null column
    expression. Without a page (before microversion 2.4) everything comes, newest
    first, as in Cyborg.
    """
    if page is None:
        return stmt.order_by(table.c.created_at.desc(), table.c.id.desc())
    column = sort_columns[page.sort_key]
    ident = table.c.id
    descending = page.sort_dir == "desc"
    if page.marker is not None:
        marker = conn.execute(
            sa.select(column.label("v"), ident).where(table.c.uuid == page.marker)
        ).first()
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
