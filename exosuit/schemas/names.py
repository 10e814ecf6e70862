"""Names (doc/names.md): the one grammar of the names that agents and operators give
things which end up in the database, in Placement, in file and folder names and in
log lines: host names, device (deployable) names, driver names, image names.

A name is 1 to ``MAX_LENGTH`` characters with no ``/``, no NUL and no other control
character (U+0000–U+001F, U+007F), and is neither ``.`` nor ``..``. Anything else
goes: dots (``compute-1.example.org``), colons (``0000:3b:00.0``), blanks inside,
non-ASCII letters. So a name is always one path component, never a way out of the
folder it is joined to, and prints on one line.

Used by the inventory schema (``inventory-v1.json`` carries ``PATTERN`` as
``$defs/name``: a test holds them equal), the API's request schemas (``SCHEMA``),
the API's checks of path arguments (``check``), and the agent before it makes a file
or folder whose name came from outside (``file_name``). A refusal at the API is a
400 ``exosuit.name.invalid`` whose message states ``RULE``. Label keys have a
stricter grammar of their own (exosuit/schemas/labels.py), inside this one.
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = [
    "CODE",
    "MAX_LENGTH",
    "PATTERN",
    "RULE",
    "SCHEMA",
    "NameInvalid",
    "check",
    "file_name",
    "is_name",
]

MAX_LENGTH = 255
# JSON Schema (ECMA-262) and Python alike: the length is in the pattern, so that every
# refusal of a string is this pattern's (and the API can name the rule).
PATTERN = r"^(?!\.\.?$)[^/\x00-\x1f\x7f]{1,255}$"
_NAME = re.compile(r"(?!\.\.?\Z)[^/\x00-\x1f\x7f]{1,255}")
RULE = (
    f"1-{MAX_LENGTH} characters, without '/', NUL or other control characters, "
    "and neither '.' nor '..'"
)
CODE = "exosuit.name.invalid"
SCHEMA: dict[str, Any] = {"type": "string", "pattern": PATTERN}


class NameInvalid(ValueError):  # noqa: N818 - named as the API's other refusals are
    """A name outside the grammar; the message says which, what it is, and the rule."""


def is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def check(what: str, value: object) -> str:
    """``value`` if it is a name; NameInvalid naming ``what`` (``host name``, …)."""
    if not is_name(value):
        raise NameInvalid(f"The {what} {value!r} is not a name: {RULE}.")
    assert isinstance(value, str)
    return value


def file_name(folder: str, what: str, value: object) -> str:
    """The path of ``value`` inside ``folder``, for a name that came from outside (a
    driver's, a host's …); NameInvalid if it is not a name, so that nothing is ever made
    outside ``folder`` nor named ``.``/``..``."""
    return os.path.join(folder, check(what, value))
