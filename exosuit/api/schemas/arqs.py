"""Accelerator request bodies."""

from exosuit.api.schemas import UUID

POST_ARQS_V2_0 = {
    "type": "object",
    "properties": {
        "device_profile_name": {"type": "string", "minLength": 1, "maxLength": 255},
        # Sent by python-cyborgclient; accepted and ignored, as Cyborg does.
        "device_profile_group_id": {"type": ["integer", "string", "null"]},
        "image_uuid": {"type": ["string", "null"]},
    },
    "required": ["device_profile_name"],
}

_OP = {
    "type": "object",
    "properties": {
        "op": {"enum": ["add", "remove"]},
        "path": {"type": "string"},
        "value": {},
    },
    "required": ["op", "path"],
}

# {"<arq uuid>": [ops…], …}: the bind/unbind map Nova sends.
PATCH_ARQS_V2_0 = {
    "type": "object",
    "minProperties": 1,
    "propertyNames": UUID,
    "additionalProperties": {"type": "array", "minItems": 1, "items": _OP},
}
