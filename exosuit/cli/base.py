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
import re
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

from cliff import columns as cliff_columns
from cliff.lister import Lister
from cliff.show import ShowOne

from exosuit.cli.client import ApiClient, CLIError

# What a list command's take_action gives cliff's Lister: the column names, then a row
# of cells for each item.
Listed: TypeAlias = tuple[Sequence[str], Iterable[Sequence[Any]]]
# What a show command's take_action gives cliff's ShowOne: the field names, their values.
Shown: TypeAlias = tuple[Sequence[str], Sequence[Any]]

__all__ = [
    "ApiCommand",
    "Filter",
    "ARQ",
    "CLAIM",
    "DEPLOYABLE",
    "DEVICE",
    "IMAGE",
    "PROFILE",
    "SHORT_ID",
    "ListCommand",
    "Listed",
    "Noun",
    "ShowCommand",
    "Shown",
    "cells",
    "human",
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


# An API timestamp (ISO 8601, seconds, UTC offset), shown in a table as
# ``YYYY-MM-DD HH:MM:SS`` (UTC): 19 characters; squeezed, it wraps at the space only.
_TIMESTAMP = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?(?:Z|[+-]00:00)$")
_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(number: float) -> str:
    """``1536`` → ``1.5 KiB``; whole numbers of bytes below 1 KiB as ``512 B``."""
    value = float(number)
    for unit in _BINARY_UNITS:
        if abs(value) < 1024 or unit == _BINARY_UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human(name: str | None, value: Any) -> Any:
    """A value for a person, in a table: bytes (a field named ``size`` or ``…_bytes``)
    in KiB/MiB/GiB, ``…_percent`` with a %, timestamps ``YYYY-MM-DD HH:MM:SS`` (UTC,
    no offset); a dict's values likewise, by their keys. JSON, YAML, value and csv keep
    the API's values."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, dict):
        return {k: human(k, v) for k, v in value.items()}
    if isinstance(value, int | float) and name:
        if name == "size" or name.endswith("_bytes"):
            return human_bytes(value)
        if name.endswith("_percent"):
            return f"{value:g}%"
    if isinstance(value, str) and (match := _TIMESTAMP.match(value)):
        return f"{match[1]} {match[2]}"
    return value


def cell(value: Any, formatter: str, name: str | None = None) -> Any:
    """One value as the output format ``formatter`` wants it (a table's: ``human``)."""
    if formatter in MACHINE_FORMATS:
        return value
    if formatter == "table":
        value = human(name, value)
    if isinstance(value, dict | list):
        if formatter in TEXT_FORMATS:
            return json.dumps(value, separators=(",", ":"))
        return _Nested(value)
    return _scalar(value)


def cells(item: dict[str, Any], names: Sequence[str], formatter: str) -> tuple[Any, ...]:
    return tuple(cell(item.get(name), formatter, name) for name in names)


def show_item(item: dict[str, Any], formatter: str) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """Every field of an API object but its ``links``, in the API's order."""
    names = tuple(k for k in item if k != "links")
    return names, cells(item, names, formatter)


@dataclasses.dataclass(frozen=True)
class Noun:
    """What a UUID argument names: ``what`` in messages, the list (``path``, ``key``)
    a short id is looked up in, and whether a name is accepted too (``by_name``)."""

    what: str
    path: str
    key: str
    by_name: bool = False
    needs: str = "2.0"


DEVICE = Noun("device", "/v2/devices", "devices")
DEPLOYABLE = Noun("deployable", "/v2/deployables", "deployables")
ARQ = Noun("accelerator request", "/v2/accelerator_requests", "arqs")
CLAIM = Noun("claim", "/v2/claims", "claims", needs="2.8")
IMAGE = Noun("image", "/v2/images", "images", by_name=True, needs="2.6")
PROFILE = Noun("device profile", "/v2/device_profiles", "device_profiles", by_name=True)

# A whole UUID (with or without its dashes), and what may be the start of one.
_UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$", re.I)
_UUID_START = re.compile(r"^[0-9a-f][0-9a-f-]*$", re.I)
SHORT_ID = 8  # the fewest hex digits of a short id (what the dashboard shows)


class ApiCommand:
    """A command that talks to the API. ``needs``: the microversion it requires.

    Its output (a Lister's or a ShowOne's): ``-c`` columns in the order given, and
    ``nothing`` (``No devices.``) for an empty list in a table."""

    app: Any
    cmd_name: str | None
    needs = "2.0"
    nothing = "Nothing."
    # The arguments (their dest) that name an object by UUID: a short id of each is
    # resolved (``resolve``) before the command runs.
    ids: dict[str, Noun] = {}

    def run(self, parsed_args: argparse.Namespace) -> int:
        for dest, noun in self.ids.items():
            value = getattr(parsed_args, dest, None)
            if isinstance(value, list):
                setattr(parsed_args, dest, self.resolve_all(value, noun))
            elif isinstance(value, str):
                setattr(parsed_args, dest, self.resolve(value, noun))
        code: int = super().run(parsed_args)  # type: ignore[misc]
        return code

    @property
    def api(self) -> ApiClient:
        api: ApiClient = self.app.api
        if self.needs != "2.0":
            api.require(self.needs, f"`exosuit {self.cmd_name}`")
        return api

    def resolve(self, value: str, noun: Noun) -> str:
        """The UUID a UUID argument names: itself when whole, else the one item of
        ``noun`` whose UUID starts with it (at least 8 hex digits; dashes optional).
        A name (a noun ``by_name``), or what cannot start a UUID, is left to the API."""
        if _UUID.match(value) or not _UUID_START.match(value):
            return value
        digits = value.replace("-", "").lower()
        if len(digits) < SHORT_ID:
            if noun.by_name:
                return value
            raise CLIError(
                f"{value}: a short id needs at least {SHORT_ID} hex digits of the "
                f"{noun.what}'s UUID (a UUID or its first {SHORT_ID} characters)"
            )
        if noun.needs != "2.0" and not self.api.supports(noun.needs):
            return value
        cache: dict[str, list[dict[str, Any]]] = self.__dict__.setdefault("_listed", {})
        if noun.path not in cache:
            cache[noun.path] = self.api.list(noun.path, noun.key)
        if noun.by_name and any(item.get("name") == value for item in cache[noun.path]):
            return value
        matches = [
            item["uuid"]
            for item in cache[noun.path]
            if str(item.get("uuid", "")).replace("-", "").lower().startswith(digits)
        ]
        if len(matches) == 1:
            return str(matches[0])
        if noun.by_name and not matches:
            return value
        if not matches:
            raise CLIError(f"no {noun.what} has a UUID starting with {value}")
        raise CLIError(
            f"{value} is ambiguous: {len(matches)} {noun.what}s' UUIDs start with it "
            f"({', '.join(sorted(matches))}); give more characters"
        )

    def resolve_all(self, values: Sequence[str], noun: Noun) -> list[str]:
        """``resolve`` of each (one list request for all the short ones)."""
        return [self.resolve(v, noun) for v in values]

    def produce_output(
        self, parsed_args: argparse.Namespace, column_names: Sequence[str], data: Any
    ) -> int:
        names = list(column_names)
        wanted = [c for c in getattr(parsed_args, "columns", None) or () if c in names]
        if wanted:
            # -c in the order given (cliff keeps its own order); the rest as cliff does.
            order = wanted + [c for c in names if c not in wanted]
            index = [names.index(c) for c in order]
            if isinstance(self, Lister):
                data = [[row[i] for i in index] for row in data]
            else:
                data = [data[i] for i in index]
            names = order
        if isinstance(self, Lister):
            data = list(data)
            if not data and parsed_args.formatter == "table":
                self.app.stdout.write(f"{self.nothing}\n")
                return 0
        code: int = super().produce_output(parsed_args, names, data)  # type: ignore[misc]
        return code


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
        items = [self.list_item(item) for item in items]
        if parsed_args.formatter == "table":
            wide = bool(getattr(parsed_args, "long", False))
            items = [self.table_item(item, wide) for item in items]
        return names, [cells(item, names, parsed_args.formatter) for item in items]

    def list_item(self, item: dict[str, Any]) -> dict[str, Any]:
        """An item with the columns this list derives from the API's fields, in every
        output format (none by default)."""
        return item

    def table_item(self, item: dict[str, Any], long: bool) -> dict[str, Any]:
        """An item as a table row shows it (``long``: --long given): its ``uuid`` as a
        short id (its first 8 characters, accepted by every command) unless --long, so
        that a table fits 80 columns; JSON, YAML, value and csv show the API's item."""
        uuid = item.get("uuid")
        if long or not isinstance(uuid, str):
            return item
        return {**item, "uuid": uuid[:SHORT_ID]}


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
