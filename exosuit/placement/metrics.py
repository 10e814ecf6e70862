"""The Placement sync's metrics (kept in the database: see exosuit/metrics.py)."""

from __future__ import annotations

import sqlalchemy as sa

from exosuit.db import models
from exosuit.metrics import declare_counter, declare_gauge

__all__ = ["REPAIRS", "REQUESTS", "SYNCS", "WRITES"]

REQUESTS = declare_counter(
    "exosuit_placement_requests",
    "HTTP requests the conductor sent to Placement, by job (sync: a host's change; "
    "verify: drift repair) and method.",
    ("job", "method"))
SYNCS = declare_counter(
    "exosuit_placement_syncs",
    "Host syncs with Placement, by job and result (succeeded; retry: Placement "
    "unreachable, compute node provider missing or a removal waiting for allocations; "
    "failed).",
    ("job", "result"))
WRITES = declare_counter(
    "exosuit_placement_provider_writes",
    "Changes written to Placement, by action (create, provider, inventory, traits, "
    "delete, reserve: a removed deployable's provider kept reserved while it has "
    "allocations).",
    ("action",))
REPAIRS = declare_counter(
    "exosuit_placement_repairs",
    "Differences between Placement and what Exosuit had written there, repaired by "
    "the drift repair, by kind (provider_missing, provider_extra, provider, inventory, "
    "traits, compute_provider).",
    ("kind",))


def _providers(conn):
    pp = models.placement_providers
    rows = conn.execute(sa.select(pp.c.removing, sa.func.count()).group_by(pp.c.removing))
    counts = {"synced": 0, "removing": 0}
    for removing, count in rows:
        counts["removing" if removing else "synced"] += count
    return [((state,), float(n)) for state, n in sorted(counts.items())]


def _hosts_pending(conn):
    ph = models.placement_hosts
    count = conn.execute(sa.select(sa.func.count()).select_from(ph)
                         .where(ph.c.failures > 0)).scalar()
    return [((), float(count or 0))]


declare_gauge(
    "exosuit_placement_providers",
    "Deployable resource providers Exosuit keeps in Placement, by state (removing: "
    "the deployable is gone but the provider has allocations, so it is reserved).",
    ("state",), _providers)
declare_gauge(
    "exosuit_placement_hosts_pending",
    "Hosts whose last Placement sync could not finish yet: Placement unreachable, "
    "compute node provider missing, removal waiting for allocations, or an error "
    "(placement_hosts.last_error says which).",
    (), _hosts_pending)
