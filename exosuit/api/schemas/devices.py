"""Device bodies: POST /v2/device_activations (2.7), POST /v2/devices/{uuid}/health (2.9)
(doc/devices.md)."""

# Free text without control characters (PostgreSQL refuses NUL in a string).
_TEXT = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[^\\x00-\\x1f\\x7f]*$"}
_UUID = {
    "type": "string",
    "pattern": "^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$",
}

# The devices named by "uuids", or those matching the filters (at least one); the handler
# refuses both at once, and neither.
POST_DEVICE_ACTIVATIONS_V2_7 = {
    "type": "object",
    "properties": {
        "state": {"enum": ["ready", "inactive"]},
        "uuids": {"type": "array", "items": _UUID, "minItems": 1, "maxItems": 1000},
        "hostname": _TEXT,
        "type": {**_TEXT, "maxLength": 32},
        "driver": {**_TEXT, "maxLength": 100},
    },
    "required": ["state"],
    "additionalProperties": False,
}

# An operator's act on a device's health (doc/devices.md, "Health"): clear it (offered
# again now), or hold it back by hand with a reason; exactly one of the two.
POST_DEVICE_HEALTH_V2_9 = {
    "type": "object",
    "properties": {
        "clear": {"const": True},
        "hold": {"const": True},
        "reason": {**_TEXT, "maxLength": 1000},
    },
    "oneOf": [
        {
            "required": ["clear"],
            "not": {"anyOf": [{"required": ["hold"]}, {"required": ["reason"]}]},
        },
        {"required": ["hold"], "not": {"required": ["clear"]}},
    ],
    "additionalProperties": False,
}
