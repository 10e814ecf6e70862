"""Driver bodies (microversion 2.7): POST /v2/drivers/{name}/install|update|uninstall."""

from exosuit.schemas import names

# A host's name as agents report it (doc/names.md).
HOSTNAME = names.SCHEMA
# The hosts a request is for; absent: every host (and those that report later).
HOSTNAMES = {"type": "array", "items": HOSTNAME, "minItems": 1, "maxItems": 10000}

# Options overriding the agent's file, as strings (the agent parses each with its type).
_CONFIG = {
    "type": "object",
    "maxProperties": 64,
    "propertyNames": {"pattern": "^[a-z][a-z0-9_]{0,63}$"},
    "additionalProperties": {"type": "string", "maxLength": 4096},
}

POST_DRIVER_V2_7 = {
    "type": "object",
    "properties": {"hostnames": HOSTNAMES, "config": _CONFIG},
    "additionalProperties": False,
}
# Uninstall takes no options.
POST_DRIVER_UNINSTALL_V2_7 = {
    "type": "object",
    "properties": {"hostnames": HOSTNAMES},
    "additionalProperties": False,
}
