"""The Placement sync's database side: what the deployables want, what was written.

``enqueue_sync`` is what changes of a host call, in their own transaction: the
API (inventory snapshots, device enable/disable, attributes) never talks to
Placement itself; a conductor does, in a ``placement_sync`` job (coalesced per
host; its handler is exosuit/placement/sync.py). The sync reads the host's
deployables (``deployable_rows``) and what it last wrote to Placement
(``recorded_providers``), and records what it wrote (``write_outcome``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import jobs, metrics, models

__all__ = [
    "SYNC",
    "DeployableRow",
    "HostState",
    "ProviderRecord",
    "count_hosts_pending",
    "count_providers",
    "deployable_rows",
    "enqueue_sync",
    "enqueue_sync_of_deployable",
    "hostnames",
    "read_host",
    "recorded_providers",
    "sync_key",
    "write_outcome",
]

# The job kind that brings one host's providers in Placement up to date.
SYNC = "placement_sync"

dev = models.devices
dep = models.deployables
attr = models.attributes
ah = models.attach_handles
hosts = models.hosts
ph = models.placement_hosts
pp = models.placement_providers


def sync_key(hostname: str) -> str:
    return f"placement-sync:{hostname}"


def enqueue_sync(
    conn: Connection,
    hostname: str,
    *,
    verify: bool = False,
    delay: float = 0.0,
    coalesce: bool = True,
) -> None:
    """Have a conductor bring the host's providers in Placement up to date.

    ``verify`` also compares with what Placement actually holds (drift repair);
    a pending sync of the host becomes a verifying one rather than a second job.
    """
    key = sync_key(hostname)
    payload = {"host": hostname, "verify": verify}
    if verify and jobs.set_pending_payload(conn, key, payload):
        return
    jobs.enqueue(conn, SYNC, payload, key=key, delay=delay, coalesce=coalesce)


def enqueue_sync_of_deployable(conn: Connection, deployable_id: int) -> None:
    """``enqueue_sync`` for the host of a deployable (its attributes changed)."""
    hostname = conn.execute(
        sa.select(dev.c.hostname)
        .join(dep, dep.c.device_id == dev.c.id)
        .where(dep.c.id == deployable_id)
    ).scalar()
    if hostname is not None:
        enqueue_sync(conn, hostname)


def hostnames(conn: Connection) -> list[str]:
    """Every host the database knows or the sync has written providers for."""
    names = set(conn.execute(sa.select(hosts.c.hostname)).scalars())
    names.update(conn.execute(sa.select(ph.c.hostname)).scalars())
    return sorted(names)


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
    # The program running on it (exosuit/db/programs.py): no new workload meanwhile.
    program_uuid: str | None = None
    # The device's activation (doc/devices.md): only a ready one is offered.
    device_activation: str = "ready"
    # Held back as unhealthy (exosuit/db/health.py): None, agent or operator.
    device_health_held: str | None = None
    device_health_reason: str | None = None


def deployable_rows(conn: Connection, hostname: str) -> list[DeployableRow]:
    """The host's deployables with their device's state, attributes and handles."""
    of_host = (
        sa.select(dep.c.id).join(dev, dep.c.device_id == dev.c.id).where(dev.c.hostname == hostname)
    )
    rows = conn.execute(
        sa.select(
            dep.c.id,
            dep.c.rp_uuid,
            dep.c.name,
            dep.c.num_accelerators,
            dev.c.type,
            dev.c.status,
            dev.c.presence,
            dep.c.program_uuid,
            dev.c.activation,
            dev.c.health_held,
            dev.c.health_reason,
        )
        .join(dev, dep.c.device_id == dev.c.id)
        .where(dev.c.hostname == hostname, dep.c.rp_uuid.is_not(None))
        .order_by(dep.c.id)
    ).all()
    attributes: dict[int, list[tuple[str, str, str]]] = {}
    for a in conn.execute(
        sa.select(attr.c.deployable_id, attr.c.key, attr.c.value, attr.c.source)
        .where(attr.c.deployable_id.in_(of_host))
        .order_by(attr.c.id)
    ):
        attributes.setdefault(a.deployable_id, []).append((a.key, a.value, a.source))
    present = sa.func.sum(sa.case((ah.c.presence == "present", 1), else_=0))
    handles = {
        h.deployable_id: (int(h.total), int(h.present or 0))
        for h in conn.execute(
            sa.select(ah.c.deployable_id, sa.func.count().label("total"), present.label("present"))
            .where(ah.c.deployable_id.in_(of_host))
            .group_by(ah.c.deployable_id)
        )
    }
    return [
        DeployableRow(
            rp_uuid=r.rp_uuid,
            name=r.name,
            num_accelerators=r.num_accelerators,
            device_type=r.type,
            device_status=r.status,
            device_presence=r.presence,
            attributes=tuple(attributes.get(r.id, ())),
            handles=handles.get(r.id, (0, 0))[0],
            handles_present=handles.get(r.id, (0, 0))[1],
            program_uuid=r.program_uuid,
            device_activation=r.activation,
            device_health_held=r.health_held,
            device_health_reason=r.health_reason,
        )
        for r in rows
    ]


@dataclasses.dataclass(frozen=True)
class ProviderRecord:
    """A provider as Exosuit last wrote it, with Placement's generation after that;
    ``removing``: its deployable is gone but it has allocations (kept, reserved)."""

    uuid: str
    name: str
    parent_uuid: str | None
    resource_class: str | None
    total: int
    reserved: int
    traits: frozenset[str]
    generation: int | None
    removing: bool = False


@dataclasses.dataclass(frozen=True)
class HostState:
    compute_rp_uuid: str | None
    failures: int
    last_error: str | None


def read_host(conn: Connection, hostname: str) -> HostState:
    row = conn.execute(sa.select(ph).where(ph.c.hostname == hostname)).first()
    if row is None:
        return HostState(None, 0, None)
    return HostState(row.compute_rp_uuid, row.failures, row.last_error)


def recorded_providers(conn: Connection, hostname: str) -> dict[str, ProviderRecord]:
    return {
        r.rp_uuid: ProviderRecord(
            uuid=r.rp_uuid,
            name=r.name,
            parent_uuid=r.parent_rp_uuid,
            resource_class=r.resource_class,
            total=r.total,
            reserved=r.reserved,
            traits=frozenset(json.loads(r.traits)),
            generation=r.generation,
            removing=bool(r.removing),
        )
        for r in conn.execute(sa.select(pp).where(pp.c.hostname == hostname))
    }


def write_outcome(
    conn: Connection,
    hostname: str,
    *,
    records: Mapping[str, ProviderRecord | None],
    compute_rp_uuid: str | None,
    error: str | None,
    verified: bool,
    counts: metrics.Counts,
) -> None:
    """Record what a sync wrote (``None``: the provider is gone), the host's state and
    the sync's counters, in one transaction."""
    now = models.utcnow()
    gone = sorted(u for u, r in records.items() if r is None)
    if gone:
        conn.execute(sa.delete(pp).where(pp.c.rp_uuid.in_(gone)))
    kept = {u: r for u, r in records.items() if r is not None}
    existing = (
        set(conn.execute(sa.select(pp.c.rp_uuid).where(pp.c.rp_uuid.in_(sorted(kept)))).scalars())
        if kept
        else set()
    )
    for uuid in sorted(kept):
        p = kept[uuid]
        values = {
            "hostname": hostname,
            "name": p.name,
            "parent_rp_uuid": p.parent_uuid or "",
            "resource_class": p.resource_class,
            "total": p.total,
            "reserved": p.reserved,
            "traits": json.dumps(sorted(p.traits)),
            "generation": p.generation,
            "removing": p.removing,
        }
        if uuid in existing:
            conn.execute(sa.update(pp).where(pp.c.rp_uuid == uuid).values(updated_at=now, **values))
        else:
            conn.execute(sa.insert(pp).values(rp_uuid=uuid, created_at=now, **values))
    host = conn.execute(sa.select(ph.c.id, ph.c.failures).where(ph.c.hostname == hostname)).first()
    state: dict[str, object] = {
        "compute_rp_uuid": compute_rp_uuid,
        "last_error": error,
        "failures": 0 if error is None else (host.failures if host else 0) + 1,
    }
    if error is None:
        state["synced_at"] = now
        if verified:
            state["verified_at"] = now
    if host is None:
        conn.execute(sa.insert(ph).values(hostname=hostname, created_at=now, **state))
    else:
        conn.execute(sa.update(ph).where(ph.c.id == host.id).values(updated_at=now, **state))
    metrics.increment(conn, counts)


# -- gauges (read at each scrape of /metrics) ------------------------------------------------


def count_providers(conn: Connection) -> list[tuple[tuple[str, ...], float]]:
    """Deployable providers kept in Placement, by state (synced, removing)."""
    rows = conn.execute(sa.select(pp.c.removing, sa.func.count()).group_by(pp.c.removing))
    counts = {"synced": 0, "removing": 0}
    for removing, count in rows:
        counts["removing" if removing else "synced"] += count
    return [((state,), float(n)) for state, n in sorted(counts.items())]


def count_hosts_pending(conn: Connection) -> list[tuple[tuple[str, ...], float]]:
    """Hosts whose last Placement sync could not finish yet."""
    count = conn.execute(
        sa.select(sa.func.count()).select_from(ph).where(ph.c.failures > 0)
    ).scalar()
    return [((), float(count or 0))]
