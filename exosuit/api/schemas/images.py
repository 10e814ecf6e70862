"""Image bodies (microversion 2.6): the catalogue's POST /v2/images."""

from exosuit.images.verify import SIGNATURE_ALGORITHMS
from exosuit.schemas import names

# Free text without control characters (PostgreSQL refuses NUL in a string).
_TEXT = {"type": "string", "maxLength": 255, "pattern": "^[^\\x00-\\x1f\\x7f]*$"}
_OPTIONAL_TEXT = {"anyOf": [_TEXT, {"type": "null"}]}

POST_IMAGE_V2_6 = {
    "type": "object",
    "properties": {
        "name": names.SCHEMA,  # doc/names.md
        # gbs, xclbin, simulated … (what a driver's program_formats name).
        "format": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{0,31}$"},
        "vendor": _OPTIONAL_TEXT,
        "board": _OPTIONAL_TEXT,
        "function_id": _OPTIONAL_TEXT,
        "interface_id": _OPTIONAL_TEXT,
        "visibility": {"enum": ["private", "shared", "public"]},
        # What the data must hash to (checked at upload).
        "sha256": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
        "signature": {
            "type": "object",
            "properties": {
                "key_id": {**_TEXT, "minLength": 1},
                # base64 of the detached signature of the data.
                "value": {
                    "type": "string",
                    "minLength": 4,
                    "maxLength": 16384,
                    "pattern": "^[A-Za-z0-9+/=\\s]+$",
                },
                "algorithm": {"enum": list(SIGNATURE_ALGORITHMS)},
            },
            "required": ["key_id", "value", "algorithm"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "format"],
    "additionalProperties": False,
}
