"""Standalone claim bodies (microversion 2.8, doc/standalone.md)."""

from exosuit.api.schemas import UUID
from exosuit.schemas import names

# Ten years: an expiry further away is no expiry (leave it out).
MAX_EXPIRES_IN = 10 * 365 * 86400
_EXPIRES_IN = {"type": "integer", "minimum": 1, "maximum": MAX_EXPIRES_IN}

# A profile's devices (Exosuit picks them) or the attach handles named (the DRA plugin's:
# the scheduler chose them), on ``hostname`` or any one host. How many ARQs a claim makes
# is bounded by [api] max_arqs_per_request (checked after the schema).
_PROPERTIES_V2_8 = {
    "device_profile_name": {"type": "string", "minLength": 1, "maxLength": 255},
    "attach_handles": {"type": "array", "minItems": 1, "uniqueItems": True, "items": UUID},
    "hostname": names.SCHEMA,  # doc/names.md
    "consumer": {"type": ["string", "null"], "maxLength": 255},
    "expires_in": {"anyOf": [_EXPIRES_IN, {"type": "null"}]},
    "container": {"type": "boolean"},
}
_ONE_OF = [
    {"required": ["device_profile_name"], "not": {"required": ["attach_handles"]}},
    {"required": ["attach_handles"], "not": {"required": ["device_profile_name"]}},
]
POST_CLAIM_V2_8 = {
    "type": "object",
    "properties": _PROPERTIES_V2_8,
    "oneOf": _ONE_OF,
    "additionalProperties": False,
}

# 2.10: ``numa_node`` (every device of the profile's claim on that NUMA node) and
# ``dry_run`` (place nothing: say what would be chosen and why not the rest;
# doc/devices.md, "Why not here?"). Both choose among a profile's devices: with
# ``attach_handles`` the devices are chosen already (a 400, parse_request).
POST_CLAIM_V2_10 = {
    "type": "object",
    "properties": {
        **_PROPERTIES_V2_8,
        "numa_node": {"type": "integer", "minimum": 0, "maximum": 4095},
        "dry_run": {"type": "boolean"},
    },
    "oneOf": _ONE_OF,
    "additionalProperties": False,
}

POST_RENEW_V2_8 = {
    "type": "object",
    "properties": {"expires_in": _EXPIRES_IN},
    "required": ["expires_in"],
    "additionalProperties": False,
}

# The agent's report on a claim's CDI spec files (the wire: doc/agent-api.md).
PUT_AGENT_CLAIM_V1 = {
    "type": "object",
    "properties": {
        "cdi": {"enum": ["written", "failed"]},
        "reason": {"type": ["string", "null"], "maxLength": 4096},
        "devices": {
            "type": "array",
            "maxItems": 1024,
            "items": {"type": "string", "minLength": 1, "maxLength": 512},
        },
    },
    "required": ["cdi"],
    "additionalProperties": False,
}
