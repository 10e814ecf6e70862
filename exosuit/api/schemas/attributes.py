"""Attribute bodies."""

POST_ATTRIBUTE_V2_0 = {
    "type": "object",
    "properties": {
        # An integer; python-cyborgclient sends it as a string of digits.
        "deployable_id": {"anyOf": [{"type": "integer", "minimum": 1},
                                    {"type": "string", "pattern": "^[1-9][0-9]{0,17}$"}]},
        "key": {"type": "string", "minLength": 1, "maxLength": 255},
        "value": {"type": "string", "maxLength": 65535},
    },
    "required": ["deployable_id", "key", "value"],
}
