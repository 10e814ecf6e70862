"""Agent API bodies about programs (doc/programming.md, "Agent protocol")."""

_ID = {"type": ["string", "null"], "maxLength": 255}

# The host's report on a program's progress.
PUT_PROGRAM_V1 = {
    "type": "object",
    "properties": {
        "state": {"enum": ["fetching", "programming", "verifying", "done", "failed"]},
        "reason": {"type": "string", "minLength": 1, "maxLength": 2000},
        "restored": {"type": ["boolean", "null"]},
        # What the driver read back after loading (LoadedImage of the driver SDK).
        "loaded": {
            "type": ["object", "null"],
            "properties": {"function_id": _ID, "interface_id": _ID, "image_uuid": _ID},
            "additionalProperties": False,
        },
    },
    "required": ["state"],
    "additionalProperties": False,
}
