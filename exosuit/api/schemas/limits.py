"""How much one request may ask for: the ``[api]`` limits, checked after the schema.

Each limit is an option (exosuit/conf/api.py) so that an operator can move it; doc/limits.md
lists every limit of the API, its option, its default and its answer. What exceeds one
gets 400 ``exosuit.limit.exceeded`` naming the option (request bodies over ``[api]
max_body_size`` get 413 before they are read).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from exosuit import exceptions

__all__ = ["Limits", "check_arq_patch", "exceeded"]


@dataclasses.dataclass(frozen=True)
class Limits:
    """The ``[api]`` limits of one request (defaults: the options' defaults)."""

    profile_groups: int = 64
    group_keys: int = 64
    value_length: int = 255
    arqs_per_patch: int = 256
    ops_per_arq: int = 8
    arqs_per_request: int = 64

    @classmethod
    def from_conf(cls, conf: Any) -> Limits:
        api = conf.api
        return cls(
            profile_groups=api.max_profile_groups,
            group_keys=api.max_group_keys,
            value_length=api.max_value_length,
            arqs_per_patch=api.max_arqs_per_patch,
            ops_per_arq=api.max_ops_per_arq,
            arqs_per_request=api.max_arqs_per_request,
        )


def exceeded(what: str, limit: int, option: str) -> exceptions.LimitExceeded:
    """``what`` (what the request asked, in words) is more than ``[api] option``."""
    return exceptions.LimitExceeded(what=what, limit=limit, option=f"[api] {option}")


def check_arq_patch(body: Any, limits: Limits) -> None:
    """Nova's bind/unbind map ``{"<arq uuid>": [ops…], …}``, before its schema (so that an
    oversized one costs no validation; whatever is not of that shape is left to the
    schema): at most ``arqs_per_patch`` ARQs of at most ``ops_per_arq`` operations, each
    value at most ``value_length`` characters."""
    if not isinstance(body, dict):
        return
    if len(body) > limits.arqs_per_patch:
        raise exceeded(
            f"The PATCH names {len(body)} accelerator requests",
            limits.arqs_per_patch,
            "max_arqs_per_patch",
        )
    for uuid, ops in body.items():
        if not isinstance(ops, list):
            continue
        if len(ops) > limits.ops_per_arq:
            raise exceeded(
                f"The PATCH of accelerator request {uuid[:64]} has {len(ops)} operations",
                limits.ops_per_arq,
                "max_ops_per_arq",
            )
        for op in ops:
            value = op.get("value") if isinstance(op, dict) else None
            if isinstance(value, str) and len(value) > limits.value_length:
                raise exceeded(
                    f"A value for accelerator request {uuid[:64]} is {len(value)} characters long",
                    limits.value_length,
                    "max_value_length",
                )
