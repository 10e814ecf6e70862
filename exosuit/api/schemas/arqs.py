"""Accelerator request bodies."""

from exosuit.api.schemas import UUID

POST_ARQS_V2_0 = {
    "type": "object",
    "properties": {
        # An empty name is a profile that does not exist: 404, as Cyborg (its tempest tests).
        "device_profile_name": {"type": "string", "maxLength": 255},
        # Sent by python-cyborgclient; accepted and ignored, as Cyborg does.
        "device_profile_group_id": {"type": ["integer", "string", "null"]},
        "image_uuid": {"type": ["string", "null"]},
    },
    "required": ["device_profile_name"],
}

# One JSON-patch operation of a bind (add: every path with a non-empty string) or an
# unbind (remove). The path's leading slash is optional, as in Cyborg.
_OP = {
    "type": "object",
    "properties": {
        "op": {"enum": ["add", "remove"]},
        "path": {
            "type": "string",
            "pattern": "^/?(hostname|device_rp_uuid|instance_uuid|project_id)$",
        },
        "value": {},
    },
    "required": ["op", "path"],
    "if": {"properties": {"op": {"const": "add"}}},
    "then": {
        "properties": {"value": {"type": "string", "minLength": 1}},
        "required": ["value"],
    },
}

# {"<arq uuid>": [ops…], …}: the bind/unbind map Nova sends. Its shape only: what the
# ops mean together (add or remove, the three bind fields) is parse_patch's
# (exosuit/api/handlers/arqs.py), which validates against this first. How many ARQs and
# ops, and how long a value, are [api] options checked before it (schemas/limits.py).
PATCH_ARQS_V2_0 = {
    "type": "object",
    "minProperties": 1,
    "propertyNames": UUID,
    "additionalProperties": {
        "type": "array",
        "minItems": 1,
        "items": _OP,
    },
}
