"""Device profile bodies, and the rules for request-group keys and values."""

from __future__ import annotations

import re
from typing import Any

import os_resource_classes
import os_traits

from exosuit.api import wsgi
from exosuit.api.schemas import UUID
from exosuit.api.schemas.limits import Limits, exceeded
from exosuit.db.arqs import units_per_group
from exosuit.schemas import JSONObject

NAME_PATTERN = "^[a-zA-Z0-9-_]+$"

# How many groups, keys and how long their keys and values may be are [api] options,
# checked by normalize_groups (doc/limits.md).
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
                "propertyNames": {"minLength": 1},
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


def normalize_groups(groups: list[JSONObject], conf: Any = None) -> list[dict[str, str]]:
    """Check every group key and value; strip blanks around names (as Cyborg does).

    ``resources:<RC>`` needs a standard or CUSTOM_ resource class and a positive
    integer; ``trait:<TRAIT>`` a standard or CUSTOM_ trait and ``required`` or
    ``forbidden``; ``accel:`` keys are free-form. Within ``conf``'s ``[api]`` limits
    (the defaults without one): groups, keys per group, lengths, and the accelerator
    requests the profile makes (``[accelerator_requests] attach_handles_per_unit``
    counted), so that it can be used: 400 ``exosuit.limit.exceeded`` beyond.
    """
    limits = Limits() if conf is None else Limits.from_conf(conf)
    if len(groups) > limits.profile_groups:
        raise exceeded(
            f"The device profile has {len(groups)} groups",
            limits.profile_groups,
            "max_profile_groups",
        )
    result = []
    for index, group in enumerate(groups):
        _check_sizes(index, group, limits)
        normal: dict[str, str] = {}
        for key, value in group.items():
            prefix = next((p for p in _PREFIXES if key.startswith(p)), None)
            if prefix is None:
                raise _bad(
                    f"groups[{index}]: key {key!r} must start with one of {', '.join(_PREFIXES)}"
                )
            name = key[len(prefix) :].strip()
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
    per_unit = {} if conf is None else handles_per_unit(conf)
    arqs = sum(units_per_group(group, per_unit) for group in result)
    if arqs > limits.arqs_per_request:
        raise exceeded(
            f"The device profile would make {arqs} accelerator requests per "
            "POST /v2/accelerator_requests",
            limits.arqs_per_request,
            "max_arqs_per_request",
        )
    return result


def handles_per_unit(conf: Any) -> dict[str, int]:
    """``[accelerator_requests] attach_handles_per_unit`` as trait → factor."""
    return {k: int(v) for k, v in conf.accelerator_requests.attach_handles_per_unit.items()}


def _check_sizes(index: int, group: JSONObject, limits: Limits) -> None:
    if len(group) > limits.group_keys:
        raise exceeded(
            f"groups[{index}] has {len(group)} keys", limits.group_keys, "max_group_keys"
        )
    for key, value in group.items():
        for what, text in (("key", key), (f"value of {key[:64]!r}", str(value))):
            if len(text) > limits.value_length:
                raise exceeded(
                    f"groups[{index}]: the {what} is {len(text)} characters long",
                    limits.value_length,
                    "max_value_length",
                )
