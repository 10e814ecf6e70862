"""Attribute bodies, and the range of a deployable id."""

from __future__ import annotations

import re

from exosuit.api import wsgi

# deployables.id is an SQL INTEGER on all three databases: a larger number names no
# deployable, and SQLite's driver cannot even bind one above 2**63 - 1 (a 500).
MAX_ID = 2**31 - 1
_DIGITS = re.compile(r"[0-9]{1,20}")

POST_ATTRIBUTE_V2_0 = {
    "type": "object",
    "properties": {
        # An integer; python-cyborgclient sends it as a string of digits.
        "deployable_id": {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_ID},
                {"type": "string", "pattern": "^[1-9][0-9]{0,9}$"},
            ]
        },
        "key": {"type": "string", "minLength": 1, "maxLength": 255},
        "value": {"type": "string", "maxLength": 65535},
    },
    "required": ["deployable_id", "key", "value"],
}


def deployable_id(value: int | float | str, code: str = "exosuit.body.invalid") -> int:
    """``value`` (an integer, or its digits) as a deployable id: 400 with ``code``
    unless it is a whole number from 1 to ``MAX_ID``."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():  # 5.0: an integer to JSON Schema
        number = int(value)
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        number = int(value)
    if number is None or not 1 <= number <= MAX_ID:
        raise wsgi.ApiError(
            400, f"deployable_id must be an integer from 1 to {MAX_ID}, not {value!r}.", code
        )
    return number
