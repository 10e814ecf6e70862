"""Agent API bodies about accelerator requests."""

# The host's report on the work a bind waits for (programming, mdev creation).
PUT_HOST_WORK_V1 = {
    "type": "object",
    "properties": {
        "result": {"enum": ["done", "failed"]},
        "reason": {"type": "string", "minLength": 1, "maxLength": 2000},
    },
    "required": ["result"],
    "additionalProperties": False,
}
