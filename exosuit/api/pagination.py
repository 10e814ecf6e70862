"""Pagination parameters and the ``next`` link (microversion 2.4)."""

from __future__ import annotations

import urllib.parse

from exosuit.api import router, wsgi
from exosuit.db.pagination import Page

__all__ = ["PAGINATION_PARAMS", "next_link", "page_from_request"]

PAGINATION_PARAMS = ("limit", "marker", "sort_key", "sort_dir")


def page_from_request(req: wsgi.Request, sort_keys) -> Page | None:
    """The requested page at 2.4 and later; None before (everything, as Cyborg)."""
    if not req.version.matches((2, 4)):
        return None
    params = req.GET
    max_limit = req.app.conf.api.max_limit
    limit = max_limit
    if "limit" in params:
        try:
            limit = int(params["limit"])
        except ValueError:
            raise wsgi.ApiError(400, f"limit must be an integer, not {params['limit']!r}.",
                                "exosuit.query.limit") from None
        if limit < 1:
            raise wsgi.ApiError(400, "limit must be at least 1.", "exosuit.query.limit")
        limit = min(limit, max_limit)
    sort_key = params.get("sort_key", "created_at")
    if sort_key not in sort_keys:
        raise wsgi.ApiError(
            400,
            f"sort_key {sort_key!r} is not one of: {', '.join(sorted(sort_keys))}.",
            "exosuit.query.sort_key",
        )
    sort_dir = params.get("sort_dir", "desc")
    if sort_dir not in ("asc", "desc"):
        raise wsgi.ApiError(400, f"sort_dir must be asc or desc, not {sort_dir!r}.",
                            "exosuit.query.sort_dir")
    marker = params.get("marker")
    if marker is not None and not wsgi.is_uuid_like(marker):
        raise wsgi.ApiError(400, f"marker must be a UUID, not {marker!r}.",
                            "exosuit.query.marker")
    if marker is not None:
        marker = marker.lower()  # UUIDs are stored in lower case
    return Page(limit=limit, sort_key=sort_key, sort_dir=sort_dir, marker=marker)


def next_link(req: wsgi.Request, page: Page | None, rows: list, body: dict) -> list:
    """Trim the extra row fetched by the query; add ``next`` to ``body`` if there is more."""
    if page is None or len(rows) <= page.limit:
        return rows
    rows = rows[: page.limit]
    query = [(k, v) for k, v in req.GET.items() if k != "marker"]
    query.append(("marker", rows[-1]["uuid"]))
    path = router.normalize_path(req.path_info)
    body["next"] = f"{req.base_url}{path}?{urllib.parse.urlencode(query)}"
    return rows
