"""The usage and allocation history (microversion 2.11; doc/dashboard.md, "Charts").

Two tables, each a bounded, downsampled history in two tiers. ``usage_samples``: each
device's usage figures as its host last reported them (``hosts.usage``); one row per
device and bucket. ``allocation_samples``: the attach handles held (``in_use``) and free
by device model (type, vendor, model); one row per model and bucket.

Recording never touches the agents' report path: the conductor's ``usage_history`` job
(exosuit/conductor/usage_history.py) calls ``sample`` every half of ``[dashboard]
history_resolution``, and a bucket of that width is recorded once, by the first run in
it (a bucket already recorded is a one-row read and nothing else). A sample of a host's
usage is taken only if its usage is fresh (kept within ``stale_after`` seconds): a host
that stopped reporting leaves a gap, not its last figures repeated.

Downsampling: once a bucket of ``history_coarse_resolution`` is wholly older than
``history_recent``, ``roll_up`` replaces its recent samples (tier ``RECENT``) by one row
per device or model (tier ``OLDER``) holding the mean of each figure, weighted by the
samples behind each row. ``prune`` deletes every row older than ``history_retention``
and the rows of devices that no longer exist. So one device (or model) keeps at most
``Retention.max_rows()`` rows, whatever the number of samples taken.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from exosuit.db import Connection, models
from exosuit.schemas import canonical_json

__all__ = [
    "JOB",
    "OLDER",
    "RECENT",
    "ModelHistory",
    "Retention",
    "allocation_history",
    "bucket",
    "device_history",
    "prune",
    "roll_up",
    "sample",
]

# The conductor's periodic job kind (exosuit/conductor/usage_history.py).
JOB = "usage_history"
# The tiers: the recent history at [dashboard] history_resolution, the older one at
# history_coarse_resolution.
RECENT = 0
OLDER = 1
# Devices whose recent samples one ``roll_up`` transaction averages, at most.
ROLL_UP_DEVICES = 1000

_EPOCH = dt.datetime(1970, 1, 1)
usage = models.usage_samples
allocation = models.allocation_samples
_MODEL_KEY = ("type", "vendor", "model")


@dataclasses.dataclass(frozen=True)
class Retention:
    """The shape of the history ([dashboard] options, seconds): ``resolution`` the width
    of a recent bucket (0: nothing is recorded), ``recent`` how long samples are kept at
    it, ``coarse_resolution`` the width of an older bucket, ``retention`` how long
    anything is kept."""

    resolution: int
    recent: int
    coarse_resolution: int
    retention: int

    @property
    def enabled(self) -> bool:
        return self.resolution > 0

    def max_rows(self) -> int:
        """The most rows one device (or device model) has in a table: the recent buckets
        of the coarse buckets not yet rolled up, and the older buckets kept."""
        kept = min(self.recent + self.coarse_resolution, self.retention + self.resolution)
        recent = math.ceil(kept / self.resolution) + 1 if self.enabled else 0
        return recent + math.ceil(self.retention / self.coarse_resolution) + 1


def bucket(when: dt.datetime, width: int) -> dt.datetime:
    """The start of the bucket of ``width`` seconds that holds ``when`` (aligned on the
    epoch, so that every process agrees)."""
    seconds = int((when - _EPOCH).total_seconds())
    return _EPOCH + dt.timedelta(seconds=seconds - seconds % width)


def _numbers(figures: Any) -> dict[str, float]:
    """The finite numbers of a device's reported figures."""
    if not isinstance(figures, dict):
        return {}
    return {
        name: float(value)
        for name, value in figures.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }


def sample(
    conn: Connection, retention: Retention, *, stale_after: float, now: dt.datetime | None = None
) -> int:
    """Record the recent bucket of ``now`` unless it is recorded already: each device's
    fresh usage and the attach handles held and free by model. The rows written (0: the
    bucket was recorded before, or there is nothing to record)."""
    if not retention.enabled:
        return 0
    now = now or models.utcnow()
    at = bucket(now, retention.resolution)
    for table in (usage, allocation):
        recorded = conn.execute(
            sa.select(sa.literal(1)).where(table.c.tier == RECENT, table.c.at == at).limit(1)
        ).first()
        if recorded is not None:
            return 0
    rows = [
        {"device_uuid": uuid, "tier": RECENT, "at": at, "samples": 1, "figures": figures}
        for uuid, figures in _fresh_usage(conn, now - dt.timedelta(seconds=stale_after))
    ]
    _insert(conn, usage, rows)
    models_rows = [
        {
            **dict(zip(_MODEL_KEY, key, strict=True)),
            "tier": RECENT,
            "at": at,
            "samples": 1,
            "figures": canonical_json(counts),
        }
        for key, counts in _allocation(conn).items()
    ]
    _insert(conn, allocation, models_rows)
    return len(rows) + len(models_rows)


def _insert(conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """SQLAlchemy's multi-row insert (its DateTime processing: exosuit/db/bulk.py's
    positional statements hand SQLite a datetime without it, stored in another text form
    than the one a comparison binds)."""
    if rows:
        conn.execute(sa.insert(table), rows)


def _fresh_usage(conn: Connection, since: dt.datetime) -> Iterable[tuple[str, str]]:
    """(device uuid, canonical JSON of its figures) of every device whose host's usage
    was kept at or after ``since`` and names it with at least one number."""
    hosts, dev = models.hosts, models.devices
    reported: dict[str, dict[str, Any]] = {}
    for hostname, text in conn.execute(
        sa.select(hosts.c.hostname, hosts.c.usage).where(
            hosts.c.usage.is_not(None), hosts.c.usage_at >= since
        )
    ):
        found = json.loads(text)
        if isinstance(found, dict):
            reported[hostname] = found
    if not reported:
        return
    for uuid, hostname, identity in conn.execute(
        sa.select(dev.c.uuid, dev.c.hostname, dev.c.identity).order_by(dev.c.id)
    ):
        figures = _numbers(reported.get(hostname, {}).get(identity))
        if figures:
            yield uuid, canonical_json(figures)


def _allocation(conn: Connection) -> dict[tuple[str, str, str], dict[str, int]]:
    """(type, vendor, model) → {"held": n, "free": n}: the attach handles of its devices."""
    dev, dep, ah = models.devices, models.deployables, models.attach_handles
    found: dict[tuple[str, str, str], dict[str, int]] = {}
    for type_, vendor, model, in_use, count in conn.execute(
        sa.select(dev.c.type, dev.c.vendor, dev.c.model, ah.c.in_use, sa.func.count())
        .select_from(
            ah.join(dep, dep.c.id == ah.c.deployable_id).join(dev, dev.c.id == dep.c.device_id)
        )
        .group_by(dev.c.type, dev.c.vendor, dev.c.model, ah.c.in_use)
    ):
        counts = found.setdefault((type_, vendor or "", model or ""), {"held": 0, "free": 0})
        counts["held" if in_use else "free"] += int(count)
    return found


def _mean(rows: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """The samples behind ``rows`` and the mean of each figure, weighted by them (a
    figure missing from a row is averaged over the rows that have it)."""
    totals: dict[str, float] = {}
    weights: dict[str, int] = {}
    samples = 0
    for row in rows:
        samples += row["samples"]
        for name, value in json.loads(row["figures"]).items():
            totals[name] = totals.get(name, 0.0) + value * row["samples"]
            weights[name] = weights.get(name, 0) + row["samples"]
    return samples, canonical_json({name: totals[name] / weights[name] for name in totals})


def roll_up(conn: Connection, retention: Retention, *, now: dt.datetime | None = None) -> int:
    """Average the recent samples of the oldest coarse bucket wholly older than
    ``[dashboard] history_recent`` into one older row per device (at most
    ``ROLL_UP_DEVICES`` devices per call) and per model, and delete them. The recent
    rows it replaced (0: none is due; call it again while it returns more)."""
    now = now or models.utcnow()
    cutoff = now - dt.timedelta(seconds=retention.recent)
    done = 0
    for table, key in ((usage, ("device_uuid",)), (allocation, _MODEL_KEY)):
        oldest = conn.execute(
            sa.select(sa.func.min(table.c.at)).where(table.c.tier == RECENT)
        ).scalar()
        if oldest is None:
            continue
        start = bucket(oldest, retention.coarse_resolution)
        end = start + dt.timedelta(seconds=retention.coarse_resolution)
        if end > cutoff:
            continue
        due = sa.and_(table.c.tier == RECENT, table.c.at < end)
        if table is usage:
            # A page of devices at a time: one transaction stays small in a large fleet.
            page = (
                sa.select(usage.c.device_uuid)
                .where(due)
                .group_by(usage.c.device_uuid)
                .order_by(usage.c.device_uuid)
                .limit(ROLL_UP_DEVICES)
            )
            uuids = list(conn.execute(page).scalars())
            due = sa.and_(due, usage.c.device_uuid.in_(uuids))
        done += _replace(conn, table, key, due, start)
    return done


def _replace(
    conn: Connection,
    table: sa.Table,
    key: tuple[str, ...],
    due: sa.ColumnElement[bool],
    start: dt.datetime,
) -> int:
    """Replace the ``due`` recent rows of ``table`` by their mean per ``key`` in the
    older bucket at ``start`` (merged with a row already there)."""
    rows = [dict(r._mapping) for r in conn.execute(sa.select(table).where(due))]
    if not rows:
        return 0
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in key), []).append(row)
    if len(key) == 1:
        of_group = table.c[key[0]].in_([values[0] for values in groups])
    else:
        of_group = sa.tuple_(*(table.c[k] for k in key)).in_(list(groups))
    there = sa.and_(table.c.tier == OLDER, table.c.at == start, of_group)
    for older in conn.execute(sa.select(table).where(there)):
        found = dict(older._mapping)
        groups[tuple(found[k] for k in key)].append(found)
    conn.execute(sa.delete(table).where(there))
    merged = []
    for values, group in groups.items():
        samples, figures = _mean(group)
        merged.append(
            {
                **dict(zip(key, values, strict=True)),
                "tier": OLDER,
                "at": start,
                "samples": samples,
                "figures": figures,
            }
        )
    _insert(conn, table, merged)
    conn.execute(sa.delete(table).where(due))
    return len(rows)


def prune(
    conn: Connection,
    retention: Retention,
    *,
    now: dt.datetime | None = None,
    gone_devices: bool = False,
) -> int:
    """Delete the rows older than ``[dashboard] history_retention`` and, with
    ``gone_devices``, the usage rows of devices that no longer exist. The rows deleted."""
    now = now or models.utcnow()
    oldest = now - dt.timedelta(seconds=retention.retention)
    deleted = 0
    for table in (usage, allocation):
        deleted += conn.execute(sa.delete(table).where(table.c.at < oldest)).rowcount
    if gone_devices:
        dev = models.devices
        exists = sa.exists().where(dev.c.uuid == usage.c.device_uuid)
        deleted += conn.execute(sa.delete(usage).where(~exists)).rowcount
    return deleted


def device_history(
    conn: Connection, device_uuid: str, since: dt.datetime
) -> dict[str, list[tuple[dt.datetime, float]]]:
    """figure → [(bucket start, value)], oldest first, of the buckets of ``device_uuid``
    that start at or after ``since`` (older buckets first, then recent ones)."""
    found: dict[str, list[tuple[dt.datetime, float]]] = {}
    rows = conn.execute(
        sa.select(usage.c.at, usage.c.figures)
        .where(usage.c.device_uuid == device_uuid, usage.c.at >= since)
        .order_by(usage.c.at, usage.c.tier)
    )
    for at, figures in rows:
        for name, value in json.loads(figures).items():
            found.setdefault(name, []).append((at, float(value)))
    return found


@dataclasses.dataclass(frozen=True)
class ModelHistory:
    """A device model's attach handles over time: [(bucket start, held, free)]."""

    type: str
    vendor: str
    model: str
    points: list[tuple[dt.datetime, float, float]]


def allocation_history(conn: Connection, since: dt.datetime) -> list[ModelHistory]:
    """Every model's attach handles held and free in the buckets that start at or after
    ``since``, by type, vendor and model, oldest first."""
    found: dict[tuple[str, str, str], list[tuple[dt.datetime, float, float]]] = {}
    rows = conn.execute(
        sa.select(
            allocation.c.type,
            allocation.c.vendor,
            allocation.c.model,
            allocation.c.at,
            allocation.c.figures,
        )
        .where(allocation.c.at >= since)
        .order_by(allocation.c.type, allocation.c.vendor, allocation.c.model, allocation.c.at)
    )
    for type_, vendor, model, at, figures in rows:
        counts = json.loads(figures)
        found.setdefault((type_, vendor, model), []).append(
            (at, float(counts.get("held", 0)), float(counts.get("free", 0)))
        )
    return [ModelHistory(*key, points) for key, points in found.items()]
