"""The words a handler module describes itself in, for ``GET /openapi.json``.

Each module of ``exosuit/api/handlers/`` ends with what the route table cannot say
about it: ``SHAPES``, the JSON Schemas of the bodies it answers, by component name,
and ``OPERATIONS``, one ``Operation`` per handler (a summary, its statuses, its query
parameters, its request body, its answer). ``exosuit/api/openapi.py`` gathers them
and builds the document; a test fails for a handler without its entry.

A shape refers to another by name (``ref("Holder")``), whichever module declares it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from exosuit.api import pagination

__all__ = [
    "BOOL",
    "COUNTS",
    "CSV",
    "INT",
    "LINKS",
    "NBOOL",
    "NINT",
    "NSTR",
    "SNAPSHOT",
    "STR",
    "TEXT",
    "TIME",
    "UUID_FORMAT",
    "Handler",
    "Operation",
    "Schema",
    "list_of",
    "obj",
    "paged",
    "query",
    "ref",
]

Schema = dict[str, Any]
Handler = Callable[..., Any]

# -- shapes of what the API answers ------------------------------------------------------

STR: Schema = {"type": "string"}
NSTR: Schema = {"type": ["string", "null"]}
INT: Schema = {"type": "integer"}
NINT: Schema = {"type": ["integer", "null"]}
BOOL: Schema = {"type": "boolean"}
NBOOL: Schema = {"type": ["boolean", "null"]}
COUNTS: Schema = {"type": "object", "additionalProperties": {"type": "integer"}}
TIME: Schema = {"type": ["string", "null"], "description": "ISO 8601, UTC"}
LINKS: Schema = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"href": STR, "rel": STR},
        "required": ["href", "rel"],
    },
}
# The agent's inventory snapshot (exosuit/schemas/), a component the builder embeds.
SNAPSHOT = "InventorySnapshotV1"


def obj(fields: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An object with every field of ``fields`` (and maybe those of ``optional``)."""
    return {
        "type": "object",
        "properties": {**fields, **(optional or {})},
        "required": list(fields),
    }


def ref(name: str) -> Schema:
    """The shape named ``name`` (a key of some module's ``SHAPES``)."""
    return {"$ref": f"#/components/schemas/{name}"}


def list_of(key: str, item: str) -> Schema:
    """``{key: [item…]}`` and, while more remain (2.4), ``next``."""
    return obj({key: {"type": "array", "items": ref(item)}}, {"next": STR})


# -- query parameters --------------------------------------------------------------------


def query(name: str, schema: Schema, description: str, required: bool = False) -> Schema:
    """A query parameter."""
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


UUID_FORMAT: Schema = {"type": "string", "format": "uuid"}
TEXT: Schema = {"type": "string", "maxLength": 255}
CSV = "comma-separated"


def paged(paging: pagination.Paging | Iterable[str]) -> tuple[Schema, ...]:
    """The paging parameters of a list (microversion 2.4 and later; ignored below)."""
    if not isinstance(paging, pagination.Paging):
        paging = pagination.Paging(frozenset(paging))
    if paging.marker_pattern is None:
        marker: Schema = UUID_FORMAT
    else:
        marker = {"type": "string", "pattern": f"^(?:{paging.marker_pattern.pattern})$"}
    since = "From 2.4 on (ignored below): "
    return (
        query("limit", {"type": "integer", "minimum": 1}, since + "at most this many items."),
        query(
            "marker", marker, since + f"the last item of the previous page ({paging.marker_kind})."
        ),
        query(
            "sort_key",
            {"enum": sorted(paging.sort_keys)},
            since + f"the order (default {paging.default_key}).",
        ),
        query("sort_dir", {"enum": ["asc", "desc"]}, since + f"default {paging.default_dir}."),
    )


# -- operations --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Operation:
    """What the route table does not say about one handler.

    ``ok``: its success statuses; ``errors``: the errors of its own, beyond those every
    operation of its kind can answer (exosuit/api/openapi.py ``_common_errors``);
    ``body``: the JSON Schema of its JSON body (``raw_body``: any bytes instead);
    ``returns``: the shape of its success body, ``media`` the body's type (a JSON
    operation that returns nothing answers no body).
    """

    summary: str
    ok: tuple[int, ...] = (200,)
    errors: tuple[int, ...] = ()
    body: Schema | None = None
    raw_body: bool = False
    query: tuple[Schema, ...] = ()
    returns: Schema | None = None
    media: str = "application/json"
