"""What every ``exosuit`` command shares: the API client, list and show commands,
filters, and how a value is shown in each output format.

A list command is a ``ListCommand`` with class attributes (its path, its columns,
its sort keys, its filters); a show command is a ``ShowCommand`` whose ``item`` returns the object.
Columns are the API's field names, so ``-c hostname`` and the keys of ``-f json``
are the names the API documents. Nested values (dicts, lists) stay structured in
``-f json|yaml``, are compact JSON in ``-f value|csv`` and ``key=value`` in tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

from cliff import columns as cliff_columns
from cliff.lister import Lister
from cliff.show import ShowOne

from exosuit.cli.client import ApiClient

# What a list command's take_action gives cliff's Lister: the column names, then a row
# of cells for each item.
Listed: TypeAlias = tuple[Sequence[str], Iterable[Sequence[Any]]]
# What a show command's take_action gives cliff's ShowOne: the field names, their values.
Shown: TypeAlias = tuple[Sequence[str], Sequence[Any]]

__all__ = [
    "ApiCommand",
    "Filter",
    "ListCommand",
    "Listed",
    "ShowCommand",
    "Shown",
    "cells",
    "segment",
    "show_item",
]

MACHINE_FORMATS = ("json", "yaml")
TEXT_FORMATS = ("value", "csv", "shell")


class _Nested(cliff_columns.FormattableColumn[Any]):
    """A dict or list: structured for JSON/YAML, readable in a table."""

    def human_readable(self) -> str:
        return _readable(self._value)


def _flat(value: Any) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return all(not isinstance(v, dict | list) for v in items)


def _readable(value: Any) -> str:
    """``k=v, k=v`` for a flat dict, ``a, b`` for a flat list, one line per flat dict
    of a list (a profile's groups); JSON for anything deeper."""
    if isinstance(value, dict) and _flat(value):
        return ", ".join(f"{k}={_scalar(v)}" for k, v in value.items())
    if isinstance(value, list) and _flat(value):
        return ", ".join(_scalar(v) for v in value)
    if isinstance(value, list) and all(isinstance(v, dict) and _flat(v) for v in value):
        return "\n".join(_readable(v) for v in value)
    return json.dumps(value, separators=(",", ":"))


def _scalar(value: Any) -> str:
    """None as empty, booleans as JSON spells them; the rest as str()."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def cell(value: Any, formatter: str) -> Any:
    """One value as the output format ``formatter`` wants it."""
    if formatter in MACHINE_FORMATS:
        return value
    if isinstance(value, dict | list):
        if formatter in TEXT_FORMATS:
            return json.dumps(value, separators=(",", ":"))
        return _Nested(value)
    return _scalar(value)


def cells(item: dict[str, Any], names: Sequence[str], formatter: str) -> tuple[Any, ...]:
    return tuple(cell(item.get(name), formatter) for name in names)


def show_item(item: dict[str, Any], formatter: str) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """Every field of an API object but its ``links``, in the API's order."""
    names = tuple(k for k in item if k != "links")
    return names, cells(item, names, formatter)


class ApiCommand:
    """A command that talks to the API. ``needs``: the microversion it requires."""

    app: Any
    cmd_name: str | None
    needs = "2.0"

    @property
    def api(self) -> ApiClient:
        api: ApiClient = self.app.api
        if self.needs != "2.0":
            api.require(self.needs, f"`exosuit {self.cmd_name}`")
        return api


@dataclasses.dataclass(frozen=True)
class Filter:
    """A list option sent as a query parameter (``local``: applied by this client to
    the items received, for a field the API cannot filter on)."""

    option: str
    field: str
    help: str
    metavar: str = "VALUE"
    needs: str = "2.0"
    local: bool = False

    @property
    def dest(self) -> str:
        return self.option.lstrip("-").replace("-", "_")


class ListCommand(ApiCommand, Lister):
    """``GET path`` → ``{key: [...]}``, every page, as a table of ``columns``."""

    path: str
    key: str
    columns: tuple[str, ...]
    long_columns: tuple[str, ...] = ()
    sort_keys: tuple[str, ...] = ()
    filters: tuple[Filter, ...] = ()

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        for f in self.filters:
            parser.add_argument(f.option, dest=f.dest, metavar=f.metavar, help=f.help)
        if self.long_columns:
            parser.add_argument(
                "--long",
                action="store_true",
                help=f"Also show {', '.join(self.long_columns)}.",
            )
        if self.sort_keys:
            parser.add_argument(
                "--sort",
                metavar="KEY[:asc|desc]",
                help=f"Order by KEY, done by the API across pages (API 2.4); keys: "
                f"{', '.join(self.sort_keys)}.",
            )
        parser.add_argument(
            "--limit",
            type=_positive,
            metavar="N",
            help="Show at most N items (default: all, fetched page by page).",
        )
        return parser

    def params(self, parsed_args: argparse.Namespace) -> dict[str, str]:
        """The query: filters and sort order (each checked against the microversion)."""
        params: dict[str, str] = {}
        for f in self.filters:
            value = getattr(parsed_args, f.dest)
            if value is None or f.local:
                continue
            if f.needs != "2.0":
                self.api.require(f.needs, f.option)
            params[f.field] = value
        sort = getattr(parsed_args, "sort", None)
        if sort:
            self.api.require("2.4", "--sort")
            key, _, direction = sort.partition(":")
            params["sort_key"] = key
            params["sort_dir"] = direction or "asc"
        return params

    def keep(self, parsed_args: argparse.Namespace) -> Callable[[dict[str, Any]], bool] | None:
        local = [
            (f.field, getattr(parsed_args, f.dest))
            for f in self.filters
            if f.local and getattr(parsed_args, f.dest) is not None
        ]
        if not local:
            return None
        return lambda item: all(str(item.get(field)) == value for field, value in local)

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        # -c of a --long column implies --long.
        long = getattr(parsed_args, "long", False) or bool(
            set(parsed_args.columns) & set(self.long_columns)
        )
        names = self.columns + (self.long_columns if long else ())
        items = self.api.list(
            self.path,
            self.key,
            self.params(parsed_args),
            limit=parsed_args.limit,
            keep=self.keep(parsed_args),
        )
        return names, [cells(item, names, parsed_args.formatter) for item in items]


class ShowCommand(ApiCommand, ShowOne):
    """One API object, every field but its links."""

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        """The object to show (one request to the API)."""
        raise NotImplementedError

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        return show_item(self.item(parsed_args), parsed_args.formatter)


def segment(value: str) -> str:
    """A value as one segment of a URL path."""
    return urllib.parse.quote(value, safe="")


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number
