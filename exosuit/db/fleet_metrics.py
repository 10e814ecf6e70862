"""What ``/metrics`` reads of the fleet at each scrape (doc/metrics.md): every device with
its state, attach handles, holders and live figures; each host's report age; the job
queue; how far Placement is behind.

Read-only and bounded: a fixed number of statements whatever the size of the fleet (each
one scan of a table or one grouped join), never one per host or device, and rows come
back as plain tuples. The device labels are read once (``read_devices``) and shared by
every per-device series.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import jobs as jobs_db
from exosuit.db import models
from exosuit.db.placement import SYNC

__all__ = [
    "DEVICE_LABELS",
    "HOLDER_LABELS",
    "STATE_LABELS",
    "DeviceSeries",
    "JobQueue",
    "job_queue",
    "read_devices",
    "report_ages",
    "sync_lag",
]

dev = models.devices
dep = models.deployables
ah = models.attach_handles
arq = models.accelerator_requests
claims = models.claims
hosts = models.hosts
jobs = models.jobs

# What names a device on every per-device series.
DEVICE_LABELS = ("hostname", "device_uuid", "type", "vendor", "model", "pci_address")
# The device's states (doc/devices.md) on exosuit_device_info; ``health`` is its reported
# health (ok, warning, unhealthy) and ``health_offered`` false while it is held back
# (doc/metrics.md, "Health").
STATE_LABELS = ("driver", "status", "activation", "presence", "health", "health_offered")
# Who holds one of its attach handles: a Nova ARQ (instance_uuid) or a claim (claim_uuid).
HOLDER_LABELS = ("arq_uuid", "instance_uuid", "claim_uuid", "project_id")

Labels = tuple[str, ...]
Series = list[tuple[Labels, float]]


@dataclasses.dataclass
class DeviceSeries:
    """Every device's series: ``info`` (labels ``DEVICE_LABELS + STATE_LABELS``, 1 each),
    ``handles`` (``DEVICE_LABELS + ("state",)``: free / in_use, both always there),
    ``holders`` (``DEVICE_LABELS + HOLDER_LABELS``, 1 per held attach handle) and
    ``usage`` (figure → series labelled ``DEVICE_LABELS``)."""

    info: Series = dataclasses.field(default_factory=list)
    handles: Series = dataclasses.field(default_factory=list)
    holders: Series = dataclasses.field(default_factory=list)
    usage: dict[str, Series] = dataclasses.field(default_factory=dict)


def read_devices(conn: Connection, *, stale_after: float) -> DeviceSeries:
    """Every device's series, in five statements. ``usage``: the figures of the hosts
    whose kept usage is at most ``stale_after`` seconds old (a host that stopped
    reporting shows none rather than its last figures forever)."""
    labels: dict[int, Labels] = {}
    by_identity: dict[tuple[str, str], Labels] = {}
    found = DeviceSeries()
    rows = conn.execute(
        sa.select(
            dev.c.id,
            dev.c.hostname,
            dev.c.identity,
            dev.c.uuid,
            dev.c.type,
            dev.c.vendor,
            dev.c.model,
            dev.c.pci_address,
            dev.c.driver_name,
            dev.c.status,
            dev.c.activation,
            dev.c.presence,
            dev.c.health_state,
            dev.c.health_held,
        ).order_by(dev.c.hostname, dev.c.id)
    )
    for r in rows:
        named: Labels = (r.hostname, r.uuid, r.type, r.vendor, r.model, r.pci_address or "")
        labels[r.id] = by_identity[(r.hostname, r.identity)] = named
        offered = "true" if r.health_held is None else "false"
        state = (r.driver_name or "", r.status, r.activation, r.presence, r.health_state, offered)
        found.info.append((named + state, 1.0))
    counts = _handle_counts(conn)
    for device_id, named in labels.items():
        free, in_use = counts.get(device_id, (0, 0))
        found.handles.append((named + ("free",), float(free)))
        found.handles.append((named + ("in_use",), float(in_use)))
    for h in _holders(conn):
        holder = (h.arq_uuid, h.instance_uuid or "", h.claim_uuid or "", h.project_id or "")
        found.holders.append((labels[h.device_id] + holder, 1.0))
    for (hostname, identity), figures in _usage(conn, stale_after):
        named_device = by_identity.get((hostname, identity))
        if named_device is None:
            continue
        for name, value in figures.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                if math.isfinite(value):
                    found.usage.setdefault(name, []).append((named_device, float(value)))
    return found


def _handle_counts(conn: Connection) -> dict[int, tuple[int, int]]:
    """device id → (free, in use) attach handles."""
    counts: dict[int, tuple[int, int]] = {}
    rows = conn.execute(
        sa.select(dep.c.device_id, ah.c.in_use, sa.func.count())
        .select_from(ah.join(dep, dep.c.id == ah.c.deployable_id))
        .group_by(dep.c.device_id, ah.c.in_use)
    )
    for device_id, in_use, count in rows:
        free, held = counts.get(device_id, (0, 0))
        counts[device_id] = (free, held + count) if in_use else (free + count, held)
    return counts


def _holders(conn: Connection) -> Any:
    """The ARQs that hold an attach handle, with the device and the claim behind them."""
    return conn.execute(
        sa.select(
            dep.c.device_id,
            arq.c.uuid.label("arq_uuid"),
            arq.c.instance_uuid,
            arq.c.project_id,
            claims.c.uuid.label("claim_uuid"),
        )
        .select_from(
            arq.join(ah, ah.c.id == arq.c.attach_handle_id)
            .join(dep, dep.c.id == ah.c.deployable_id)
            .outerjoin(claims, claims.c.id == arq.c.claim_id)
        )
        .order_by(dep.c.device_id, arq.c.uuid)
    )


def _usage(
    conn: Connection, stale_after: float
) -> Iterator[tuple[tuple[str, str], dict[str, Any]]]:
    """((hostname, device identity), figures) of the hosts whose usage is fresh."""
    since = models.utcnow() - dt.timedelta(seconds=stale_after)
    rows = conn.execute(
        sa.select(hosts.c.hostname, hosts.c.usage).where(
            hosts.c.usage.is_not(None), hosts.c.usage_at >= since
        )
    )
    for hostname, usage in rows:
        reported = json.loads(usage)
        if isinstance(reported, dict):
            for identity, figures in reported.items():
                if isinstance(figures, dict):
                    yield (hostname, identity), figures


def report_ages(conn: Connection) -> Series:
    """Seconds since each host's agent last reported (labels: hostname), as the API
    keeps it: at most once per [api] report_age_resolution for an unchanged report."""
    now = models.utcnow()
    rows = conn.execute(
        sa.select(hosts.c.hostname, hosts.c.last_report_at)
        .where(hosts.c.last_report_at.is_not(None))
        .order_by(hosts.c.hostname)
    )
    return [((hostname,), max(0.0, (now - last).total_seconds())) for hostname, last in rows]


@dataclasses.dataclass
class JobQueue:
    """``by_state``: jobs by (kind, state); ``due``: pending jobs due now by kind,
    with how long the oldest has waited past its due time (seconds)."""

    by_state: Series = dataclasses.field(default_factory=list)
    due: Series = dataclasses.field(default_factory=list)
    oldest_due: Series = dataclasses.field(default_factory=list)


def job_queue(conn: Connection) -> JobQueue:
    """The job table by kind: two grouped statements."""
    queue = JobQueue()
    counts: dict[tuple[str, str], int] = {}
    for kind, state, count in conn.execute(
        sa.select(jobs.c.kind, jobs.c.state, sa.func.count()).group_by(jobs.c.kind, jobs.c.state)
    ):
        counts[(kind, state)] = count
    # Every kind shows every state (0 included), so that a series does not vanish.
    for kind in sorted({kind for kind, _ in counts}):
        for state in jobs_db.STATES:
            queue.by_state.append(((kind, state), float(counts.get((kind, state), 0))))
    now = models.utcnow()
    due = {
        kind: (count, oldest)
        for kind, count, oldest in conn.execute(
            sa.select(jobs.c.kind, sa.func.count(), sa.func.min(jobs.c.run_after))
            .where(jobs.c.state == jobs_db.PENDING, jobs.c.run_after <= now)
            .group_by(jobs.c.kind)
        )
    }
    for kind in sorted({kind for kind, _ in counts}):
        count, oldest = due.get(kind, (0, None))
        waited = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
        queue.due.append(((kind,), float(count)))
        queue.oldest_due.append(((kind,), waited))
    return queue


def sync_lag(conn: Connection) -> Series:
    """Seconds since the oldest change Placement has not received yet: the age of the
    oldest pending or running Placement sync (0 when there is none). A drift-repair
    round's syncs count too: until they run, Placement is not known to be right."""
    oldest = conn.execute(
        sa.select(sa.func.min(jobs.c.created_at)).where(
            jobs.c.kind == SYNC,
            sa.or_(jobs.c.state == jobs_db.PENDING, jobs.c.state == jobs_db.RUNNING),
        )
    ).scalar()
    if oldest is None:
        return [((), 0.0)]
    return [((), max(0.0, (models.utcnow() - oldest).total_seconds()))]
