"""Server attach and detach bodies (microversion 2.10, doc/standalone.md "Servers")."""

_NAME = {"type": "string", "minLength": 1, "maxLength": 255}

# A profile's devices for the server, on its host (``hostname``) or on any one host.
POST_ATTACH_V2_10 = {
    "type": "object",
    "properties": {"device_profile_name": _NAME, "hostname": _NAME},
    "required": ["device_profile_name"],
    "additionalProperties": False,
}

# ``{}``: every claim of the server; with ``device_profile_name``: that profile's only.
POST_DETACH_V2_10 = {
    "type": "object",
    "properties": {"device_profile_name": _NAME},
    "additionalProperties": False,
}
