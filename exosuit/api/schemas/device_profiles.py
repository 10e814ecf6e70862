"""Device profile bodies, and the limits of their request groups (the rules for their
keys and values are exosuit/schemas/profile_groups.py's)."""

from __future__ import annotations

from typing import Any

from exosuit.api import wsgi
from exosuit.api.schemas import UUID
from exosuit.api.schemas.limits import Limits, exceeded
from exosuit.schemas import JSONObject, profile_groups

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

# The prefixes a group key starts with (GET /openapi.json describes them).
_PREFIXES = profile_groups.PREFIXES


def _bad(message: str) -> wsgi.ApiError:
    return wsgi.ApiError(400, message, "exosuit.device_profile.invalid")


def normalize_groups(groups: list[JSONObject], conf: Any = None) -> list[dict[str, str]]:
    """Check every group key and value; strip blanks around names (as Cyborg does):
    ``profile_groups.parse``, 400 ``exosuit.device_profile.invalid`` for what it refuses.

    ``resources:<RC>`` needs a standard or CUSTOM_ resource class and a positive
    integer; ``trait:<TRAIT>`` a standard or CUSTOM_ trait and ``required`` or
    ``forbidden``, and a ``resources:`` key beside it; ``accel:`` keys one of
    ``profile_groups.ACCEL_KEYS`` or ``accel:label:<key>``. Within ``conf``'s ``[api]`` limits
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
    parsed = []
    for index, group in enumerate(groups):
        _check_sizes(index, group, limits)
        try:
            parsed.append(profile_groups.parse(group))
        except profile_groups.GroupInvalid as error:
            raise _bad(f"groups[{index}]: {error}") from None
    per_unit = {} if conf is None else handles_per_unit(conf)
    arqs = sum(group.units(per_unit) for group in parsed)
    if arqs > limits.arqs_per_request:
        raise exceeded(
            f"The device profile would make {arqs} accelerator requests per "
            "POST /v2/accelerator_requests",
            limits.arqs_per_request,
            "max_arqs_per_request",
        )
    return [dict(group.entries) for group in parsed]


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
