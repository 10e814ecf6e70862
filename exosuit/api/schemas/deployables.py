"""Deployable bodies."""

from exosuit.api.schemas import UUID

# [{"path": "/program", "op": "replace", "value": [{"image_uuid": "<uuid>"}]}]
PROGRAM_V2_0 = {
    "type": "array",
    "minItems": 1,
    "maxItems": 1,
    "items": {
        "type": "object",
        "properties": {
            "path": {"const": "/program"},
            "op": {"const": "replace"},
            "value": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": {
                    "type": "object",
                    "properties": {"image_uuid": UUID},
                    "required": ["image_uuid"],
                },
            },
        },
        "required": ["path", "op", "value"],
    },
}
