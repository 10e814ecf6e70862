"""The Placement sync's metrics (counted by exosuit/placement/sync.py, kept in the
database: see exosuit/metrics.py)."""

from __future__ import annotations

from exosuit.db import placement as placement_db
from exosuit.metrics import Counter, Declaration, Gauge

__all__ = ["ALL", "HOSTS_PENDING", "PROVIDERS", "REPAIRS", "REQUESTS", "SYNCS", "WRITES"]

REQUESTS = Counter(
    "exosuit_placement_requests",
    "HTTP requests the conductor sent to Placement, by job (sync: a host's change; "
    "verify: drift repair) and method.",
    ("job", "method"),
)
SYNCS = Counter(
    "exosuit_placement_syncs",
    "Host syncs with Placement, by job and result (succeeded; retry: Placement "
    "unreachable, compute node provider missing or a removal waiting for allocations; "
    "failed).",
    ("job", "result"),
)
WRITES = Counter(
    "exosuit_placement_provider_writes",
    "Changes written to Placement, by action (create, provider, inventory, traits, "
    "delete, reserve: a removed deployable's provider kept reserved while it has "
    "allocations).",
    ("action",),
)
REPAIRS = Counter(
    "exosuit_placement_repairs",
    "Differences between Placement and what Exosuit had written there, repaired by "
    "the drift repair, by kind (provider_missing, provider_extra, provider, inventory, "
    "traits, compute_provider).",
    ("kind",),
)
PROVIDERS = Gauge(
    "exosuit_placement_providers",
    "Deployable resource providers Exosuit keeps in Placement, by state (removing: "
    "the deployable is gone but the provider has allocations, so it is reserved).",
    ("state",),
    placement_db.count_providers,
)
HOSTS_PENDING = Gauge(
    "exosuit_placement_hosts_pending",
    "Hosts whose last Placement sync could not finish yet: Placement unreachable, "
    "compute node provider missing, removal waiting for allocations, or an error "
    "(placement_hosts.last_error says which).",
    (),
    placement_db.count_hosts_pending,
)

# Everything /metrics exposes for the Placement sync.
ALL: tuple[Declaration, ...] = (REQUESTS, SYNCS, WRITES, REPAIRS, PROVIDERS, HOSTS_PENDING)
