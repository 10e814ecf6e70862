"""Partition bodies (microversion 2.9): PUT /v2/devices/{uuid}/partitions, and the agent's
outcome PUT /agent/v1/hosts/{hostname}/partitions/{device_uuid} (doc/devices.md,
"Partitions"; the wire: doc/agent-api.md)."""

# A slice type: an mdev type id (a sysfs directory name: nvidia-222, i915-GVTg_V5_4) or
# a MIG profile (1g.5gb).
_TYPE = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "pattern": "^[A-Za-z0-9][A-Za-z0-9._+-]*$",
}
_COUNT = {"type": "integer", "minimum": 0, "maximum": 1024}
_COUNTS = {
    "type": "object",
    "propertyNames": _TYPE,
    "additionalProperties": _COUNT,
    "maxProperties": 16,
}

# One kind per layout: {"mdev": {type: count}}, {"mig": {profile: count}} or {"vfs": n},
# with "on_demand" (slices made for a bind, removed when it is released; doc/devices.md,
# "Partitions").
PUT_PARTITIONS_V2_9 = {
    "type": "object",
    "properties": {
        "mdev": _COUNTS,
        "mig": _COUNTS,
        "vfs": {"type": "integer", "minimum": 0, "maximum": 4096},
        "on_demand": {"type": "boolean"},
    },
    "oneOf": [{"required": ["mdev"]}, {"required": ["mig"]}, {"required": ["vfs"]}],
    "additionalProperties": False,
}

# A host's outcome of the layout its desired state gave.
PUT_PARTITION_OUTCOME_V1 = {
    "type": "object",
    "properties": {
        "generation": {"type": "integer", "minimum": 0, "maximum": 2147483647},
        "state": {"enum": ["applied", "failed"]},
        "reason": {"type": ["string", "null"], "maxLength": 4096},
    },
    "required": ["generation", "state"],
    "additionalProperties": False,
}
