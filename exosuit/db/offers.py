"""What a deployable offers: its resource class and traits, from its attributes.

One rule for two readers: the Placement sync writes them on the deployable's resource
provider (exosuit/placement/providers.py), and a bind checks a device profile group
against them (exosuit/db/arqs.py), so that a bind never takes a device that Placement
would not have offered for that group. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import os_resource_classes as orc
import os_traits

__all__ = ["OWNER_TRAIT", "attribute", "offered", "resource_class", "trait_name"]

# Marks the providers Exosuit (like Cyborg) owns; drift repair looks for it.
OWNER_TRAIT = os_traits.OWNER_CYBORG
_STANDARD_CLASSES = frozenset(orc.STANDARDS)
_STANDARD_TRAITS: frozenset[str] | None = None

# An attribute: (key, value, source); source ``api`` (an operator's) or ``agent``.
Attribute = tuple[str, str, str]


def _custom(value: str) -> str:
    name = re.sub(r"[^A-Z0-9_]", "_", value.strip().upper())
    if name.startswith("CUSTOM_"):
        name = name[len("CUSTOM_") :]
    return ("CUSTOM_" + name)[:255]


def resource_class(value: str | None, device_type: str) -> str:
    """A standard class (os-resource-classes) as is; anything else as CUSTOM_*.

    A deployable without an ``rc`` attribute gets ``CUSTOM_<device type>``.
    """
    if not value:
        return _custom(device_type or "ACCELERATOR")
    if value in _STANDARD_CLASSES:
        return value
    return _custom(value)


def trait_name(value: str) -> str:
    """A standard trait (os-traits) as is; anything else as CUSTOM_*."""
    value = value.strip()
    if os_traits.is_custom(value) and re.fullmatch(r"CUSTOM_[A-Z0-9_]+", value):
        return value
    if value in _standard_traits():
        return value
    return _custom(value)


def _standard_traits() -> frozenset[str]:
    global _STANDARD_TRAITS
    if _STANDARD_TRAITS is None:
        _STANDARD_TRAITS = frozenset(os_traits.get_traits())
    return _STANDARD_TRAITS


def attribute(attributes: Iterable[Attribute], key: str) -> str | None:
    """An attribute's value; an operator's (source api) wins over the agent's."""
    found = None
    for k, value, source in attributes:
        if k == key:
            if source == "api":
                return value
            found = value if found is None else found
    return found


def offered(attributes: Iterable[Attribute], device_type: str) -> tuple[str, frozenset[str]]:
    """(resource class, traits) of a deployable: its ``rc`` attribute (else
    ``CUSTOM_<device type>``), its ``trait*`` attributes plus ``OWNER_CYBORG``."""
    attributes = list(attributes)
    traits = {trait_name(v) for k, v, _ in attributes if k.startswith("trait") and v.strip()}
    traits.add(OWNER_TRAIT)
    return resource_class(attribute(attributes, "rc"), device_type), frozenset(traits)
