"""Pagination parameters and the ``next`` link (microversion 2.4), for every list.

``limit``, ``marker``, ``sort_key``, ``sort_dir``; bad values get 400; a list returns at
most ``[api] max_limit`` items and a top-level ``next`` URL while more remain. Each list
says how it pages (``Paging``): its sort keys, its default order and what a marker is
(a UUID by default; a hostname for hosts, an id for jobs).
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from exosuit.api import wsgi
from exosuit.db.pagination import Page

__all__ = ["PAGINATION_PARAMS", "Paging", "next_link", "page_from_request", "text_param"]

PAGINATION_PARAMS = ("limit", "marker", "sort_key", "sort_dir")

# A row of a list (a TypedDict of exosuit/db/): what next_link trims, and gives back.
Row = TypeVar("Row", bound=Mapping[str, object])

# Control characters (NUL above all: PostgreSQL refuses it in a string) are in no name.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclasses.dataclass(frozen=True)
class Paging:
    """How one list pages."""

    sort_keys: frozenset[str]
    default_key: str = "created_at"
    default_dir: str = "desc"
    marker_field: str = "uuid"  # the item field a marker holds
    # What a marker looks like (matched whole); None: a UUID (compared in lower case).
    marker_pattern: re.Pattern[str] | None = None
    marker_kind: str = "a UUID"  # what a marker is, for the 400


def text_param(req: wsgi.Request, name: str) -> str | None:
    """A free-text query parameter; 400 if it holds a control character."""
    value = req.GET.get(name)
    if value is not None and _CONTROL.search(value):
        raise wsgi.ApiError(
            400, f"{name} must not contain control characters.", f"exosuit.query.{name}"
        )
    return value


def page_from_request(req: wsgi.Request, paging: Paging | Iterable[str]) -> Page | None:
    """The requested page at 2.4 and later; None before (everything, as Cyborg).
    ``paging``: how the list pages, or just its sort keys (a list of UUID-marked items,
    newest first by default)."""
    if not isinstance(paging, Paging):
        paging = Paging(frozenset(paging))
    if not req.version.matches((2, 4)):
        return None
    params = req.GET
    max_limit = req.app.conf.api.max_limit
    limit = max_limit
    if "limit" in params:
        try:
            limit = int(params["limit"])
        except ValueError:
            raise wsgi.ApiError(
                400, f"limit must be an integer, not {params['limit']!r}.", "exosuit.query.limit"
            ) from None
        if limit < 1:
            raise wsgi.ApiError(400, "limit must be at least 1.", "exosuit.query.limit")
        limit = min(limit, max_limit)
    sort_key = params.get("sort_key", paging.default_key)
    if sort_key not in paging.sort_keys:
        raise wsgi.ApiError(
            400,
            f"sort_key {sort_key!r} is not one of: {', '.join(sorted(paging.sort_keys))}.",
            "exosuit.query.sort_key",
        )
    sort_dir = params.get("sort_dir", paging.default_dir)
    if sort_dir not in ("asc", "desc"):
        raise wsgi.ApiError(
            400, f"sort_dir must be asc or desc, not {sort_dir!r}.", "exosuit.query.sort_dir"
        )
    return Page(limit=limit, sort_key=sort_key, sort_dir=sort_dir, marker=_marker(req, paging))


def _marker(req: wsgi.Request, paging: Paging) -> str | None:
    marker = req.GET.get("marker")
    if marker is None:
        return None
    if paging.marker_pattern is None:
        if not wsgi.is_uuid_like(marker):
            raise wsgi.ApiError(
                400, f"marker must be a UUID, not {marker!r}.", "exosuit.query.marker"
            )
        return marker.lower()  # UUIDs are stored in lower case
    if not paging.marker_pattern.fullmatch(marker):
        raise wsgi.ApiError(
            400, f"marker must be {paging.marker_kind}, not {marker!r}.", "exosuit.query.marker"
        )
    return marker


def next_link(
    req: wsgi.Request,
    page: Page | None,
    rows: list[Row],
    body: dict[str, Any],
    paging: Paging | None = None,
) -> list[Row]:
    """Trim the extra row fetched by the query; add ``next`` to ``body`` if there is more."""
    if page is None or len(rows) <= page.limit:
        return rows
    rows = rows[: page.limit]
    field = "uuid" if paging is None else paging.marker_field
    query = [(k, v) for k, v in req.GET.items() if k != "marker"]
    query.append(("marker", str(rows[-1][field])))
    body["next"] = f"{req.base_url}{req.route_path}?{urllib.parse.urlencode(query)}"
    return rows
