"""What Placement should hold for a host, computed from the database: pure functions.

One nested resource provider per deployable, child of the host's compute node
provider, with the deployable's ``rp_uuid`` (derived from host, device identity
and deployable name, so stable across restarts and re-discovery). Its
inventory is ``num_accelerators`` of the deployable's resource class, all of it
reserved while the deployable must take no new workload (disabled, not ready, gone,
unhealthy, being programmed); its traits are the
deployable's ``trait*`` attributes plus ``OWNER_CYBORG`` (exosuit/db/offers.py, the rule
a bind checks profile groups against).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from exosuit.db.offers import OWNER_TRAIT, attribute, offered, resource_class, trait_name
from exosuit.db.placement import DeployableRow

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

    def inventories(self) -> dict[str, dict[str, Any]]:
        """The body of PUT /resource_providers/{uuid}/inventories (its ``inventories``)."""
        if not self.resource_class or self.total < 1:
            return {}
        return {
            self.resource_class: {
                "total": self.total,
                "reserved": min(self.reserved, self.total),
                "min_unit": 1,
                "max_unit": self.total,
                "step_size": 1,
                "allocation_ratio": 1.0,
            }
        }

    def inventory_key(self) -> tuple[object, ...]:
        inventories = self.inventories()
        return tuple(
            sorted((rc, inv["total"], inv["reserved"]) for rc, inv in inventories.items())
        ) + tuple(sorted(self.other_classes))

    def fully_reserved(self) -> Provider:
        return dataclasses.replace(self, reserved=self.total)


@dataclasses.dataclass(frozen=True)
class Change:
    """One step that makes Placement equal to the wanted state.

    kind: ``create`` (provider, inventory and traits), ``provider`` (name or
    parent), ``inventory``, ``traits`` or ``delete``.
    """

    kind: str
    uuid: str
    want: Provider | None = None


def reserve_reason(row: DeployableRow) -> str | None:
    """Why the deployable takes no new workload (its inventory is then all reserved),
    or None."""
    if row.device_status != "enabled":
        return f"device disabled (status {row.device_status})"
    if row.device_activation != "ready":
        return f"device not ready (activation {row.device_activation})"
    if row.device_presence != "present":
        return f"device {row.device_presence}"
    if row.program_uuid is not None:
        return f"being programmed (program {row.program_uuid})"
    if row.device_health_held is not None:
        why = f": {row.device_health_reason}" if row.device_health_reason else ""
        return f"held back as unhealthy (by its {row.device_health_held}){why}"
    health = attribute(row.attributes, "health")
    if health is not None and health.strip().lower() not in _HEALTHY:
        return f"unhealthy (health {health})"
    if row.handles and not row.handles_present:
        return "gone from the host's report while in use"
    if row.num_accelerators > 0 and not row.handles_present:
        # What was held is released and gone: nothing is left to attach.
        return "no attach handle left"
    return None


def provider_name(hostname: str, deployable_name: str) -> str:
    """Provider names are unique in Placement: prefixed with the host unless the
    deployable's name already starts with it (as drivers name them)."""
    if deployable_name == hostname or deployable_name.startswith(hostname + "_"):
        name = deployable_name
    else:
        name = f"{hostname}_{deployable_name}"
    return name[:_NAME_MAX]


def desired_providers(
    hostname: str, compute_uuid: str, rows: list[DeployableRow]
) -> dict[str, Provider]:
    """The providers the host's deployables should have, by uuid."""
    names: dict[str, list[DeployableRow]] = {}
    for row in rows:
        names.setdefault(provider_name(hostname, row.name), []).append(row)
    providers = {}
    for name, same in names.items():
        for row in same:
            # Two deployables of one host with one name (different devices): each
            # name gets a part of the provider uuid, so it stays unique.
            unique = name if len(same) == 1 else f"{name[: _NAME_MAX - 9]}_{row.rp_uuid[:8]}"
            rc, traits = offered(row.attributes, row.device_type)
            provider = Provider(
                uuid=row.rp_uuid,
                name=unique,
                parent_uuid=compute_uuid,
                resource_class=rc,
                total=max(0, row.num_accelerators),
                reserved=0,
                traits=traits,
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
