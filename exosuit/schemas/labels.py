"""Device labels (doc/devices.md, "Labels"): an operator's ``key → value`` tags on a
device, selectable in device profiles as ``accel:label:<key>``.

The rules, one place for the API, the database floor and the profile groups:

* a key is 1–63 characters: lower-case letters, digits, ``-``, ``_`` and ``.``,
  starting and ending with a letter or a digit (a DNS label's shape, dots allowed:
  ``rack``, ``team.ml``, ``cooling-zone``);
* a value is 1–63 printable characters without blanks at either end (a profile's
  values are stripped: one with blanks there could never be asked for);
* at most ``MAX_LABELS`` labels per device (what a Kubernetes ResourceSlice device
  leaves for them beside Exosuit's own attributes, exosuit/kubernetes/slices.py).

Stored as the canonical JSON of the object (None when there is none): equal labels,
equal text. Pure: no database, no HTTP.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from exosuit.schemas import canonical_json

__all__ = [
    "KEY_PATTERN",
    "MAX_LABELS",
    "MAX_VALUE",
    "VALUE_PATTERN",
    "LabelInvalid",
    "check_key",
    "check_value",
    "decode",
    "encode",
    "parse_selector",
]

MAX_LABELS = 16
MAX_VALUE = 63
KEY_PATTERN = r"^[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?$"
# Printable (no control characters), no blank at either end.
VALUE_PATTERN = r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$"
_KEY = re.compile(KEY_PATTERN)
_VALUE = re.compile(VALUE_PATTERN)
KEY_RULE = (
    "1-63 lower-case letters, digits, '-', '_' or '.', starting and ending with a letter or a digit"
)
VALUE_RULE = f"1-{MAX_VALUE} printable characters, no blank at either end"


class LabelInvalid(ValueError):  # noqa: N818 - named as the API's other refusals are
    """A label key, value or selector the rules refuse; the message says which and why."""


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise LabelInvalid(f"label key {key!r} is not {KEY_RULE}")
    return key


def check_value(key: str, value: str) -> str:
    if len(value) > MAX_VALUE or not _VALUE.fullmatch(value):
        raise LabelInvalid(f"the value of label {key} ({value!r}) is not {VALUE_RULE}")
    return value


def decode(text: str | None) -> dict[str, str]:
    """A device's labels as stored (None: none)."""
    if not text:
        return {}
    found = json.loads(text)
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def encode(labels: Mapping[str, str]) -> str | None:
    """The stored form: canonical JSON, None for no labels."""
    return canonical_json(dict(labels)) if labels else None


def parse_selector(text: str) -> tuple[str, str]:
    """``key=value`` (a list's ``label`` filter, the CLI's ``--label``) as (key, value),
    both checked; LabelInvalid otherwise."""
    key, sep, value = text.partition("=")
    if not sep:
        raise LabelInvalid(f"label {text!r} is not key=value")
    return check_key(key), check_value(key, value)
