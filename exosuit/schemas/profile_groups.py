"""A device profile's request group, parsed once into a typed value.

A group is a flat JSON object; each key says by its prefix what it asks for:

* ``resources:<RC>``: an amount (a positive integer) of a resource class, standard
  (os-resource-classes, or Cyborg's list) or ``CUSTOM_``;
* ``trait:<TRAIT>``: ``required`` or ``forbidden``, of a standard (os-traits) or
  ``CUSTOM_`` trait;
* ``accel:<key>``: an option Exosuit reads itself, one of ``ACCEL_KEYS`` (or a label,
  ``accel:label:<key>``): ``accel:bitstream_id``, ``accel:function_id`` (an image a bind
  loads, doc/programming.md); ``accel:numa_node`` (the device's NUMA node);
  ``accel:same_numa_node``, ``accel:same_pcie_root``, ``accel:distinct_devices``
  (``true``/``false``: constraints across the profile's groups, doc/devices.md,
  "Topology"); ``accel:label:<key>`` (a device label an operator set, doc/devices.md,
  "Labels"). An unknown one is refused: Exosuit would not act on it.

Two doors, one value (``ProfileGroup``):

* ``parse`` is the rule a new profile passes (``POST /v2/device_profiles``): it refuses
  a key or value with ``GroupInvalid`` (the message says which and why) and gives the
  group its normal form, the one stored: blanks around names and values stripped,
  amounts written as decimal integers. A group with ``trait:`` keys needs a
  ``resources:`` key too (Placement lands a trait on a resource class's provider). A
  stricter rule adds a check to ``_CHECKS``.
* ``read`` takes a stored group as it is, without judging it again (a profile imported
  from Cyborg was never parsed): keys of another prefix and trait values other than
  ``required``/``forbidden`` count for nothing; an amount that is not an integer is a
  ``GroupInvalid`` (a ``ValueError``), as it always was.

Pure: no database, no HTTP; the API, the database floor and the claims use it alike.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import os_resource_classes
import os_traits

from exosuit.schemas import labels

__all__ = [
    "ACCEL",
    "ACCEL_KEYS",
    "BITSTREAM_ID",
    "DISTINCT_DEVICES",
    "FUNCTION_ID",
    "LABEL",
    "NUMA_NODE",
    "SAME_NUMA_NODE",
    "SAME_PCIE_ROOT",
    "PREFIXES",
    "RESOURCES",
    "TRAIT",
    "GroupInvalid",
    "ProfileGroup",
    "parse",
    "read",
]

RESOURCES = "resources:"
TRAIT = "trait:"
ACCEL = "accel:"
PREFIXES = (RESOURCES, TRAIT, ACCEL)
REQUIRED = "required"
FORBIDDEN = "forbidden"
# The accel: keys that make a bind load an image (doc/programming.md).
BITSTREAM_ID = "accel:bitstream_id"
FUNCTION_ID = "accel:function_id"
# Where the device must sit (doc/devices.md, "Topology"): a NUMA node; and, across the
# profile's groups, one NUMA node, one PCIe root, or as many physical devices as units.
NUMA_NODE = "accel:numa_node"
SAME_NUMA_NODE = "accel:same_numa_node"
SAME_PCIE_ROOT = "accel:same_pcie_root"
DISTINCT_DEVICES = "accel:distinct_devices"
# accel:label:<key>=<value>: a device an operator labelled so (doc/devices.md, "Labels").
LABEL = "accel:label:"
_FLAGS = (SAME_NUMA_NODE, SAME_PCIE_ROOT, DISTINCT_DEVICES)
# Every accel: key parse accepts (besides labels), in the order the docs list them.
ACCEL_KEYS = (BITSTREAM_ID, FUNCTION_ID, NUMA_NODE, *_FLAGS)

# Cyborg's list (constants.SUPPORT_RESOURCES), kept so existing profiles stay valid.
_CYBORG_RESOURCES = frozenset(
    {"FPGA", "GPU", "VGPU", "PGPU", "CUSTOM_QAT", "CUSTOM_NIC", "CUSTOM_SSD"}
)
_CUSTOM = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
_AMOUNT = re.compile(r"[0-9]+")
_NOTHING: Mapping[str, str] = MappingProxyType({})
_NO_AMOUNTS: Mapping[str, int] = MappingProxyType({})


class GroupInvalid(ValueError):  # noqa: N818 - named as the API's other refusals are
    """A key or value of a group the rules refuse; the message says which and why."""


@dataclass(frozen=True)
class ProfileGroup:
    """What one request group asks for. ``entries``: the group itself, in its normal
    form when ``parse`` made it (what is stored), as stored when ``read`` did."""

    entries: Mapping[str, str] = field(default_factory=lambda: _NOTHING)
    resources: Mapping[str, int] = field(default_factory=lambda: _NO_AMOUNTS)  # RC → amount
    required_traits: frozenset[str] = frozenset()
    forbidden_traits: frozenset[str] = frozenset()
    accel: Mapping[str, str] = field(default_factory=lambda: _NOTHING)  # name → value

    @property
    def bitstream_id(self) -> str | None:
        """The image (by uuid) the group asks to be loaded, if it names one."""
        return self.accel.get(BITSTREAM_ID[len(ACCEL) :])

    @property
    def function_id(self) -> str | None:
        """The function whose image the group asks to be loaded, if it names one."""
        return self.accel.get(FUNCTION_ID[len(ACCEL) :])

    @property
    def loads_image(self) -> bool:
        """Whether a bind of this group loads an image (``accel:bitstream_id`` or
        ``accel:function_id``), resolved by the caller before the bind."""
        return self.bitstream_id is not None or self.function_id is not None

    @property
    def numa_node(self) -> int | None:
        """The NUMA node the group's devices must be on (``accel:numa_node``), if any."""
        value = self.accel.get(NUMA_NODE[len(ACCEL) :])
        return int(value) if value is not None and _AMOUNT.fullmatch(value) else None

    def flag(self, key: str) -> bool:
        """Whether the group sets the constraint ``key`` (``SAME_NUMA_NODE`` …) true."""
        return self.accel.get(key[len(ACCEL) :], "").strip().lower() == "true"

    @property
    def labels(self) -> Mapping[str, str]:
        """The device labels the group asks for (``accel:label:<key>``), key → value."""
        prefix = LABEL[len(ACCEL) :]
        return {k[len(prefix) :]: v for k, v in self.accel.items() if k.startswith(prefix)}

    @property
    def selects(self) -> bool:
        """Whether the group says anything of the provider it lands on: a resource
        class, a required or a forbidden trait."""
        return bool(self.resources or self.required_traits or self.forbidden_traits)

    def units(self, handles_per_unit: Mapping[str, int]) -> int:
        """How many ARQs the group makes: the sum of its amounts, times N for each
        required trait that ``handles_per_unit`` (``[accelerator_requests]
        attach_handles_per_unit``) maps to N."""
        count = sum(self.resources.values())
        for trait, factor in handles_per_unit.items():
            if trait in self.required_traits:
                count *= factor
        return count

    def matches(self, resource_class: str, traits: frozenset[str]) -> bool:
        """Whether a provider of ``resource_class`` with ``traits`` serves the group, as
        Placement would match it: one of its classes, every required trait, no
        forbidden one (a group that names none of them takes any provider)."""
        if self.resources and resource_class not in self.resources:
            return False
        return self.required_traits <= traits and not self.forbidden_traits & traits

    def mismatch(self, resource_class: str, traits: frozenset[str]) -> str | None:
        """Why a provider of ``resource_class`` with ``traits`` does not serve the group
        (the first reason, a phrase for "<the provider> ..."), or None when it does."""
        if self.resources and resource_class not in self.resources:
            wanted = " or ".join(sorted(self.resources))
            return (
                f"offers resource class {resource_class}, not {wanted} as its device "
                "profile group asks"
            )
        if self.required_traits - traits:
            return f"lacks required trait(s) {', '.join(sorted(self.required_traits - traits))}"
        if self.forbidden_traits & traits:
            return f"has forbidden trait(s) {', '.join(sorted(self.forbidden_traits & traits))}"
        return None


@functools.cache
def _standard_resources() -> frozenset[str]:
    return frozenset(os_resource_classes.STANDARDS) | _CYBORG_RESOURCES


@functools.cache
def _standard_traits() -> frozenset[str]:
    return frozenset(os_traits.get_traits())


def _resource(name: str, value: str) -> str:
    if name not in _standard_resources() and not _CUSTOM.match(name):
        raise GroupInvalid(f"unsupported resource class {name!r}")
    if not _AMOUNT.fullmatch(value) or int(value) < 1:
        raise GroupInvalid(f"amount of {name} must be a positive integer, not {value!r}")
    return str(int(value))


def _trait(name: str, value: str) -> str:
    if name not in _standard_traits() and not _CUSTOM.match(name):
        raise GroupInvalid(f"unsupported trait name {name!r}")
    if value not in (REQUIRED, FORBIDDEN):
        raise GroupInvalid(f"trait {name} must be 'required' or 'forbidden', not {value!r}")
    return value


def _accel(name: str, value: str) -> str:
    if not name:
        raise GroupInvalid("empty accel: key")
    key = ACCEL + name
    if key.startswith(LABEL):
        if not key[len(LABEL) :].strip() or not value:
            raise GroupInvalid(f"{key} needs a label key and a value ({LABEL}<key>: <value>)")
        # A label no device can have would match nothing: refused by the labels' rules.
        try:
            labels.check_value(labels.check_key(key[len(LABEL) :]), value)
        except labels.LabelInvalid as error:
            raise GroupInvalid(f"{key}: {error}") from None
        return value
    if key not in ACCEL_KEYS:
        raise GroupInvalid(
            f"unknown key {key!r}: the accel: keys are {', '.join(ACCEL_KEYS)} and {LABEL}<key>"
        )
    if key == NUMA_NODE and not _AMOUNT.fullmatch(value):
        raise GroupInvalid(f"{key} must be a NUMA node number (0, 1 …), not {value!r}")
    if key in _FLAGS:
        if value.lower() not in ("true", "false"):
            raise GroupInvalid(f"{key} must be 'true' or 'false', not {value!r}")
        return value.lower()
    return value


# What ``parse`` checks of a key of each prefix (its name and value stripped): the
# normal form of the value, or GroupInvalid. One place for the rules.
_CHECKS: Mapping[str, Callable[[str, str], str]] = {
    RESOURCES: _resource,
    TRAIT: _trait,
    ACCEL: _accel,
}


def _prefix(key: str) -> str | None:
    return next((p for p in PREFIXES if key.startswith(p)), None)


def parse(group: Mapping[str, object]) -> ProfileGroup:
    """The group a new profile gives (values strings or integers), checked and in its
    normal form; GroupInvalid for the first key or value the rules refuse."""
    normal: dict[str, str] = {}
    for key, value in group.items():
        prefix = _prefix(key)
        if prefix is None:
            raise GroupInvalid(f"key {key!r} must start with one of {', '.join(PREFIXES)}")
        name = key[len(prefix) :].strip()
        normal[prefix + name] = _CHECKS[prefix](name, str(value).strip())
    _traits_land(normal)
    return read(normal)


def _traits_land(group: Mapping[str, str]) -> None:
    """GroupInvalid for a group with ``trait:`` keys but no ``resources:`` key: Placement
    finds a trait on the provider of a resource class the group asks for, so such a group
    matches no provider and every claim or bind of it would fail."""
    traits = [key for key in group if key.startswith(TRAIT)]
    if traits and not any(key.startswith(RESOURCES) for key in group):
        raise GroupInvalid(
            f"{', '.join(traits)} without a resources: key: Placement needs a resource "
            "class to land a trait on (add resources:<RC>=<amount>, e.g. resources:FPGA=1)"
        )


def read(group: Mapping[str, str]) -> ProfileGroup:
    """A stored group, as it is (module docstring): GroupInvalid only for an amount
    that is not an integer."""
    resources: dict[str, int] = {}
    required: set[str] = set()
    forbidden: set[str] = set()
    accel: dict[str, str] = {}
    for key, value in group.items():
        prefix = _prefix(key)
        name = key[len(prefix or "") :].strip()
        if prefix == RESOURCES:
            try:
                amount = int(value)
            except (TypeError, ValueError):
                raise GroupInvalid(f"amount of {name} is not an integer: {value!r}") from None
            resources[name] = resources.get(name, 0) + amount
        elif prefix == TRAIT:
            wanted = {REQUIRED: required, FORBIDDEN: forbidden}.get(str(value).strip())
            if wanted is not None:
                wanted.add(name)
        elif prefix == ACCEL:
            accel[name] = value
    return ProfileGroup(
        entries=MappingProxyType(dict(group)),
        resources=MappingProxyType(resources),
        required_traits=frozenset(required),
        forbidden_traits=frozenset(forbidden),
        accel=MappingProxyType(accel),
    )
