"""Device profile bodies, and the rules for request-group keys and values."""

from __future__ import annotations

import re

import os_resource_classes
import os_traits

from exosuit.api import wsgi
from exosuit.api.schemas import UUID

NAME_PATTERN = "^[a-zA-Z0-9-_]+$"

_PROFILE = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": NAME_PATTERN},
        "uuid": UUID,
        "description": {"type": ["string", "null"], "maxLength": 65535},
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": {"type": ["string", "integer"]},
            },
        },
    },
    "required": ["name", "groups"],
}

# Cyborg's body: a JSON list holding exactly one profile.
POST_DEVICE_PROFILE_V2_0 = {
    "type": "array",
    "minItems": 1,
    "maxItems": 1,
    "items": _PROFILE,
}

# Cyborg's list (constants.SUPPORT_RESOURCES), kept so existing profiles stay valid.
_CYBORG_RESOURCES = {"FPGA", "GPU", "VGPU", "PGPU", "CUSTOM_QAT", "CUSTOM_NIC", "CUSTOM_SSD"}
_STANDARD_RESOURCES = set(os_resource_classes.STANDARDS) | _CYBORG_RESOURCES
_STANDARD_TRAITS = set(os_traits.get_traits())
_CUSTOM = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
_PREFIXES = ("resources:", "trait:", "accel:")


def _bad(message: str) -> wsgi.ApiError:
    return wsgi.ApiError(400, message, "exosuit.device_profile.invalid")


def normalize_groups(groups: list[dict]) -> list[dict]:
    """Check every group key and value; strip blanks around names (as Cyborg does).

    ``resources:<RC>`` needs a standard or CUSTOM_ resource class and a positive
    integer; ``trait:<TRAIT>`` a standard or CUSTOM_ trait and ``required`` or
    ``forbidden``; ``accel:`` keys are free-form.
    """
    result = []
    for index, group in enumerate(groups):
        normal: dict[str, str] = {}
        for key, value in group.items():
            prefix = next((p for p in _PREFIXES if key.startswith(p)), None)
            if prefix is None:
                raise _bad(
                    f"groups[{index}]: key {key!r} must start with one of "
                    f"{', '.join(_PREFIXES)}"
                )
            name = key[len(prefix):].strip()
            value = str(value).strip()
            if prefix == "resources:":
                if name not in _STANDARD_RESOURCES and not _CUSTOM.match(name):
                    raise _bad(f"groups[{index}]: unsupported resource class {name!r}")
                if not re.fullmatch(r"[0-9]+", value) or int(value) < 1:
                    raise _bad(
                        f"groups[{index}]: amount of {name} must be a positive integer, "
                        f"not {value!r}"
                    )
                value = str(int(value))
            elif prefix == "trait:":
                if name not in _STANDARD_TRAITS and not _CUSTOM.match(name):
                    raise _bad(f"groups[{index}]: unsupported trait name {name!r}")
                if value not in ("required", "forbidden"):
                    raise _bad(
                        f"groups[{index}]: trait {name} must be 'required' or "
                        f"'forbidden', not {value!r}"
                    )
            elif not name:
                raise _bad(f"groups[{index}]: empty accel: key")
            normal[prefix + name] = value
        result.append(normal)
    return result
