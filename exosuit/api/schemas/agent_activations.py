"""Agent API bodies about device activations (doc/devices.md; the wire: doc/agent-api.md)."""

# A host's outcome of the install or uninstall step its desired state asked.
PUT_ACTIVATION_V1 = {
    "type": "object",
    "properties": {
        "action": {"enum": ["install", "uninstall"]},
        "generation": {"type": "integer", "minimum": 0, "maximum": 2147483647},
        "state": {"enum": ["done", "failed"]},
        "reason": {"type": ["string", "null"], "maxLength": 4096},
    },
    "required": ["action", "generation", "state"],
    "additionalProperties": False,
}
