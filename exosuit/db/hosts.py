"""Hosts (one row per reporting agent) as the fleet views of microversion 2.5 show them.

A host comes with its counts (devices, deployables, attach handles) and what the
conductor knows of it in Placement, in one statement: the counts are correlated
subqueries, so a page of hosts costs one round trip whatever its size.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, NotRequired, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from exosuit import exceptions
from exosuit.db import drain, models
from exosuit.db.pagination import Page, paginate

__all__ = ["SORT_COLUMNS", "HostRow", "get", "list_hosts"]

hosts = models.hosts
dev = models.devices
dep = models.deployables
ah = models.attach_handles
ph = models.placement_hosts

# Keyset paging needs a sort value that is never NULL: a host that never reported
# sorts as if it had last reported at the epoch.
_NEVER = dt.datetime(1970, 1, 1)
SORT_COLUMNS: dict[str, sa.ColumnElement[Any]] = {
    "hostname": hosts.c.hostname,
    "last_report_at": sa.func.coalesce(hosts.c.last_report_at, _NEVER),
    "created_at": hosts.c.created_at,
}

_OF_HOST = dev.c.hostname == hosts.c.hostname
_HANDLES = ah.join(dep, dep.c.id == ah.c.deployable_id).join(dev, dev.c.id == dep.c.device_id)
_SELECT = sa.select(
    hosts,
    sa.select(sa.func.count()).select_from(dev).where(_OF_HOST).scalar_subquery().label("devices"),
    sa.select(sa.func.count())
    .select_from(dep.join(dev, dev.c.id == dep.c.device_id))
    .where(_OF_HOST)
    .scalar_subquery()
    .label("deployables"),
    sa.select(sa.func.count())
    .select_from(_HANDLES)
    .where(_OF_HOST)
    .scalar_subquery()
    .label("attach_handles"),
    sa.select(sa.func.count())
    .select_from(_HANDLES)
    .where(_OF_HOST, ah.c.in_use.is_(True))
    .scalar_subquery()
    .label("attach_handles_in_use"),
    ph.c.id.label("placement_id"),
    ph.c.compute_rp_uuid.label("placement_compute_rp_uuid"),
    ph.c.synced_at.label("placement_synced_at"),
    ph.c.verified_at.label("placement_verified_at"),
    ph.c.failures.label("placement_failures"),
    ph.c.last_error.label("placement_last_error"),
).select_from(hosts.outerjoin(ph, ph.c.hostname == hosts.c.hostname))


class HostRow(TypedDict):
    """A host as the API shows it: a row of ``hosts`` (models.Host says what each column
    holds; ``driver_errors`` decoded), its counts, what the conductor knows of it in
    Placement (``placement_id`` None: never synced) and its maintenance state."""

    id: int
    hostname: str
    snapshot_hash: str | None
    last_report_at: dt.datetime | None
    agent_version: str | None
    driver_errors: list[dict[str, Any]]
    desired_generation: int
    observed_generation: int | None
    observed_at: dt.datetime | None
    usage: str | None
    usage_at: dt.datetime | None
    drained_at: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime | None
    devices: int
    deployables: int
    attach_handles: int
    attach_handles_in_use: int
    placement_id: int | None
    placement_compute_rp_uuid: str | None
    placement_synced_at: dt.datetime | None
    placement_verified_at: dt.datetime | None
    placement_failures: int | None
    placement_last_error: str | None
    report_age_seconds: float | None
    maintenance: str | None
    holders: NotRequired[list[drain.HostHolder]]  # get(..., holders=True)


def _host(row: Row[Any], now: dt.datetime) -> HostRow:
    """The row as a plain dict: ``driver_errors`` decoded, ``report_age_seconds`` added
    and ``placement_*`` columns (``placement_id`` None: the conductor never synced it)."""
    host = dict(row._mapping)
    host["driver_errors"] = json.loads(host["driver_errors"] or "[]")
    last = host["last_report_at"]
    host["report_age_seconds"] = None if last is None else (now - last).total_seconds()
    # Drained (2.9): draining while an attach handle of its devices is held.
    held = host["attach_handles_in_use"] or 0
    host["maintenance"] = drain.host_maintenance(host.get("drained_at"), range(held))
    return cast(HostRow, host)  # _SELECT's columns and what was added: HostRow's keys


def list_hosts(conn: Connection, *, page: Page | None) -> list[HostRow]:
    """A page of hosts (``page.marker``: the hostname of the last one seen), one more
    than ``page.limit`` when more remain."""
    stmt = paginate(conn, _SELECT, hosts, page, SORT_COLUMNS, marker_column=hosts.c.hostname)
    now = models.utcnow()
    return [_host(row, now) for row in conn.execute(stmt)]


def get(conn: Connection, hostname: str, *, holders: bool = False) -> HostRow:
    """The host; ``holders``: with what holds its devices' attach handles
    (exosuit/db/drain.py, ``host_holders``)."""
    row = conn.execute(_SELECT.where(hosts.c.hostname == hostname)).first()
    # NOTE: compared again here: MariaDB's collation ignores case, and a host must be
    # found (or not) the same way on every database.
    if row is None or row.hostname != hostname:
        raise exceptions.HostNotFound(hostname=hostname)
    host = _host(row, models.utcnow())
    if holders:
        host["holders"] = drain.host_holders(conn, hostname)
    return host
