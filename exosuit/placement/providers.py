"""What Placement should hold for a host, computed from the database: pure functions.

One nested resource provider per deployable, child of the host's compute node
provider, with the deployable's ``rp_uuid`` (derived from host, device identity
and deployable name, so stable across restarts and re-discovery). Its
inventory is ``num_accelerators`` of the deployable's resource class, all of it
reserved while the deployable must take no new workload; its traits are the
deployable's ``trait*`` attributes plus ``OWNER_CYBORG``.
"""

from __future__ import annotations

import dataclasses
import re

import os_resource_classes as orc
import os_traits

__all__ = [
    "OWNER_TRAIT",
    "Change",
    "DeployableRow",
    "Provider",
    "desired_providers",
    "plan",
    "provider_name",
    "reserve_reason",
    "resource_class",
    "trait_name",
]

# Marks the providers Exosuit (like Cyborg) owns; drift repair looks for it.
OWNER_TRAIT = os_traits.OWNER_CYBORG
_STANDARD_CLASSES = frozenset(orc.STANDARDS)
_NAME_MAX = 200  # Placement's resource provider name limit
_HEALTHY = frozenset({"", "ok", "healthy", "good"})


@dataclasses.dataclass(frozen=True)
class Provider:
    """A resource provider as Exosuit wants it (or last wrote it, or found it)."""

    uuid: str
    name: str
    parent_uuid: str | None
    resource_class: str | None
    total: int
    reserved: int
    traits: frozenset[str]
    # Other resource classes found on the provider in Placement (never wanted).
    other_classes: frozenset[str] = frozenset()

    def inventories(self) -> dict:
        """The body of PUT /resource_providers/{uuid}/inventories (its ``inventories``)."""
        if not self.resource_class or self.total < 1:
            return {}
        return {self.resource_class: {
            "total": self.total, "reserved": min(self.reserved, self.total), "min_unit": 1,
            "max_unit": self.total, "step_size": 1, "allocation_ratio": 1.0,
        }}

    def inventory_key(self) -> tuple:
        inventories = self.inventories()
        return tuple(sorted((rc, inv["total"], inv["reserved"])
                            for rc, inv in inventories.items())) + tuple(sorted(self.other_classes))

    def fully_reserved(self) -> Provider:
        return dataclasses.replace(self, reserved=self.total)


@dataclasses.dataclass(frozen=True)
class DeployableRow:
    """A deployable of the host, with what decides its provider."""

    rp_uuid: str
    name: str
    num_accelerators: int
    device_type: str
    device_status: str  # enabled | maintaining
    device_presence: str  # present | missing | lost
    attributes: tuple[tuple[str, str, str], ...]  # (key, value, source)
    handles: int = 0
    handles_present: int = 0


@dataclasses.dataclass(frozen=True)
class Change:
    """One step that makes Placement equal to the wanted state.

    kind: ``create`` (provider, inventory and traits), ``provider`` (name or
    parent), ``inventory``, ``traits`` or ``delete``.
    """

    kind: str
    uuid: str
    want: Provider | None = None


def _custom(value: str) -> str:
    name = re.sub(r"[^A-Z0-9_]", "_", value.strip().upper())
    if name.startswith("CUSTOM_"):
        name = name[len("CUSTOM_"):]
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


_STANDARD_TRAITS: frozenset[str] | None = None


def _standard_traits() -> frozenset[str]:
    global _STANDARD_TRAITS
    if _STANDARD_TRAITS is None:
        _STANDARD_TRAITS = frozenset(os_traits.get_traits())
    return _STANDARD_TRAITS


def reserve_reason(row: DeployableRow) -> str | None:
    """Why the deployable takes no new workload (its inventory is then all reserved),
    or None."""
    if row.device_status != "enabled":
        return f"device disabled (status {row.device_status})"
    if row.device_presence != "present":
        return f"device {row.device_presence}"
    health = _attribute(row, "health")
    if health is not None and health.strip().lower() not in _HEALTHY:
        return f"unhealthy (health {health})"
    if row.handles and not row.handles_present:
        return "gone from the host's report while in use"
    if row.num_accelerators > 0 and not row.handles_present:
        # What was held is released and gone: nothing is left to attach.
        return "no attach handle left"
    return None


def _attribute(row: DeployableRow, key: str) -> str | None:
    """An attribute's value; an operator's (source api) wins over the agent's."""
    found = None
    for k, value, source in row.attributes:
        if k == key:
            if source == "api":
                return value
            found = value if found is None else found
    return found


def provider_name(hostname: str, deployable_name: str) -> str:
    """Provider names are unique in Placement: prefixed with the host unless the
    deployable's name already starts with it (as drivers name them)."""
    if deployable_name == hostname or deployable_name.startswith(hostname + "_"):
        name = deployable_name
    else:
        name = f"{hostname}_{deployable_name}"
    return name[:_NAME_MAX]


def desired_providers(hostname: str, compute_uuid: str,
                      rows: list[DeployableRow]) -> dict[str, Provider]:
    """The providers the host's deployables should have, by uuid."""
    names: dict[str, list[DeployableRow]] = {}
    for row in rows:
        names.setdefault(provider_name(hostname, row.name), []).append(row)
    providers = {}
    for name, same in names.items():
        for row in same:
            # Two deployables of one host with one name (different devices): each
            # name gets a part of the provider uuid, so it stays unique.
            unique = name if len(same) == 1 else f"{name[:_NAME_MAX - 9]}_{row.rp_uuid[:8]}"
            traits = {trait_name(v) for k, v, _ in row.attributes
                      if k.startswith("trait") and v.strip()}
            traits.add(OWNER_TRAIT)
            provider = Provider(
                uuid=row.rp_uuid,
                name=unique,
                parent_uuid=compute_uuid,
                resource_class=resource_class(_attribute(row, "rc"), row.device_type),
                total=max(0, row.num_accelerators),
                reserved=0,
                traits=frozenset(traits),
            )
            if reserve_reason(row) is not None:
                provider = provider.fully_reserved()
            providers[row.rp_uuid] = provider
    return providers


def plan(want: dict[str, Provider], have: dict[str, Provider]) -> list[Change]:
    """The changes that turn ``have`` into ``want``: creations first, deletions last."""
    creates, updates, deletes = [], [], []
    for uuid in sorted(want):
        wanted, current = want[uuid], have.get(uuid)
        if current is None:
            creates.append(Change("create", uuid, wanted))
            continue
        if (wanted.name, wanted.parent_uuid) != (current.name, current.parent_uuid):
            updates.append(Change("provider", uuid, wanted))
        if wanted.inventory_key() != current.inventory_key():
            updates.append(Change("inventory", uuid, wanted))
        if wanted.traits != current.traits:
            updates.append(Change("traits", uuid, wanted))
    for uuid in sorted(set(have) - set(want)):
        deletes.append(Change("delete", uuid))
    return creates + updates + deletes
