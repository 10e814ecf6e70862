"""The fleet in numbers (GET /v2/summary, microversion 2.5): counts grouped in SQL."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import jobs, models

__all__ = ["Summary", "summarize"]

hosts = models.hosts
dev = models.devices
ah = models.attach_handles
arq = models.accelerator_requests


@dataclasses.dataclass(frozen=True)
class Summary:
    hosts: int
    stale_hosts: int  # last report older than the cut-off, or none at all
    devices_by_type: dict[str, int]
    devices_by_status: dict[str, int]
    devices_by_presence: dict[str, int]
    attach_handles: int
    attach_handles_in_use: int
    arqs_by_state: dict[str, int]
    jobs_by_state: dict[str, int]  # every state of exosuit.db.jobs.STATES, 0 if none


def _grouped(conn: Connection, column: sa.Column[Any]) -> dict[str, int]:
    query = sa.select(column, sa.func.count()).group_by(column).order_by(column)
    return {str(value): int(count) for value, count in conn.execute(query)}


def summarize(conn: Connection, *, stale_after: float) -> Summary:
    """The counts now; a host is stale when it last reported more than ``stale_after``
    seconds ago (or never)."""
    cutoff = models.utcnow() - dt.timedelta(seconds=stale_after)
    stale = sa.or_(hosts.c.last_report_at.is_(None), hosts.c.last_report_at < cutoff)
    host_counts = conn.execute(
        sa.select(
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(sa.case((stale, 1), else_=0)), 0),
        ).select_from(hosts)
    ).one()
    handle_counts = conn.execute(
        sa.select(
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(sa.case((ah.c.in_use.is_(True), 1), else_=0)), 0),
        ).select_from(ah)
    ).one()
    return Summary(
        hosts=int(host_counts[0]),
        stale_hosts=int(host_counts[1]),
        devices_by_type=_grouped(conn, dev.c.type),
        devices_by_status=_grouped(conn, dev.c.status),
        devices_by_presence=_grouped(conn, dev.c.presence),
        attach_handles=int(handle_counts[0]),
        attach_handles_in_use=int(handle_counts[1]),
        arqs_by_state=_grouped(conn, arq.c.state),
        jobs_by_state=jobs.count_by_state(conn),
    )
