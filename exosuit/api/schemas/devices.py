"""Device bodies: POST /v2/device_activations (2.7), POST /v2/devices/{uuid}/health (2.9),
POST /v2/device_labels (2.10) (doc/devices.md)."""

from exosuit.schemas import labels

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


# Labels set and removed on the devices named, all or none (doc/devices.md, "Labels"): at
# least one label set or unset. The shape only: the rules of keys and values are checked
# by the database floor (exosuit/db/devices.py set_labels, exosuit/schemas/labels.py),
# whose 400 says which one and why in words rather than a pattern.
_LABEL_KEY = {"type": "string", "minLength": 1, "maxLength": 63}
POST_DEVICE_LABELS_V2_10 = {
    "type": "object",
    "properties": {
        "uuids": {"type": "array", "items": _UUID, "minItems": 1, "maxItems": 1000},
        "set": {
            "type": "object",
            "propertyNames": _LABEL_KEY,
            "additionalProperties": {"type": "string"},
            "maxProperties": labels.MAX_LABELS,
        },
        "unset": {
            "type": "array",
            "items": _LABEL_KEY,
            "uniqueItems": True,
            "maxItems": 100,
        },
    },
    "required": ["uuids"],
    "additionalProperties": False,
}
