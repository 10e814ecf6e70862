"""Typed values out of oslo.config's untyped ones, for the settings types of the groups.

oslo.config has already parsed and checked each value by its option's type (an IntOpt
gives an int, a ListOpt a list); these only say so to the type checker and make the
containers immutable, as the frozen settings that hold them are.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

__all__ = ["optional_text", "text_map", "texts"]


def optional_text(value: Any) -> str | None:
    """A StrOpt without a default: None when unset."""
    return None if value is None else str(value)


def texts(value: Any) -> tuple[str, ...]:
    """A ListOpt's value (None: empty)."""
    return tuple(str(item) for item in value or ())


def text_map(value: Any) -> Mapping[str, str]:
    """A DictOpt's value, read-only (None: empty)."""
    return types.MappingProxyType({str(k): str(v) for k, v in (value or {}).items()})
