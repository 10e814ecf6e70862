"""Discover now (doc/devices.md): an operator asks hosts to discover at once.

A discovery bumps each host's desired-state generation and records it per host
(``discovery_hosts``); the host's desired state carries ``{"generation", "spread"}``
until a report of its agent says it observed that generation (or a later one): then
the host's ``received_at`` is set (``mark_received``, in the report's transaction).
``spread`` (seconds) is the number of hosts asked over ``[api] discovery_rate``: each
agent waits a random delay within it, so that many hosts asked at once do not report
at once.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from collections.abc import Sequence
from typing import NotRequired, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import models
from exosuit.db.desired_state import bump
from exosuit.db.pagination import Page, paginate

__all__ = [
    "SORT_COLUMNS",
    "DiscoveryHost",
    "DiscoveryRow",
    "create",
    "get",
    "list_discoveries",
    "mark_received",
]

disc = models.discoveries
dh = models.discovery_hosts
hosts = models.hosts

SORT_COLUMNS = {"requested_at": disc.c.requested_at}

_MARK_RECEIVED = (
    sa.update(dh)
    .where(
        dh.c.hostname == sa.bindparam("p_hostname"),
        dh.c.generation <= sa.bindparam("p_generation"),
        dh.c.received_at.is_(None),
    )
    .values(received_at=sa.bindparam("p_now"))
)
_OF = dh.c.discovery_id == disc.c.id
# The hosts asked and those whose report arrived, counted per discovery (correlated).
_COUNTS = (
    sa.select(sa.func.count()).where(_OF).scalar_subquery().label("host_count"),
    sa.select(sa.func.count(dh.c.received_at)).where(_OF).scalar_subquery().label("received"),
    sa.select(sa.func.max(dh.c.received_at)).where(_OF).scalar_subquery().label("last_received_at"),
)


class DiscoveryHost(TypedDict):
    """A host a discovery asked: the generation that carries it, when its report came."""

    hostname: str
    generation: int
    received_at: dt.datetime | None


class DiscoveryRow(TypedDict):
    """A discovery as the API shows it: its row and its counts (``get``: its hosts too)."""

    id: int
    uuid: str
    requested_at: dt.datetime
    spread: float
    all_hosts: bool
    host_count: int
    received: int
    last_received_at: dt.datetime | None
    hosts: NotRequired[list[DiscoveryHost]]


def mark_received(conn: Connection, hostname: str, generation: int, now: dt.datetime) -> None:
    """The host reported at ``generation``: the discoveries asked at or before it have
    their new inventory."""
    conn.execute(_MARK_RECEIVED, {"p_hostname": hostname, "p_generation": generation, "p_now": now})


def create(conn: Connection, hostnames: Sequence[str] | None, *, rate: int) -> DiscoveryRow:
    """Ask ``hostnames`` (every host the database knows for None) to discover now.
    Raises HostNotFound for a host never seen (nothing is asked then)."""
    if hostnames is not None:
        known = set(
            conn.execute(
                sa.select(hosts.c.hostname).where(hosts.c.hostname.in_(sorted(set(hostnames))))
            ).scalars()
        )
        # Compared here too: MariaDB's collation ignores case.
        missing = sorted(set(hostnames) - known)
        if missing:
            raise exceptions.HostNotFound(hostname=", ".join(missing))
    generations = bump(conn, hostnames)
    now = models.utcnow()
    uuid = str(uuidlib.uuid4())
    discovery_id = conn.execute(
        sa.insert(disc).values(
            uuid=uuid,
            requested_at=now,
            spread=round(len(generations) / rate, 3),
            all_hosts=hostnames is None,
        )
    ).inserted_primary_key
    assert discovery_id is not None
    if generations:
        conn.execute(
            sa.insert(dh),
            [
                {"discovery_id": discovery_id[0], "hostname": h, "generation": g}
                for h, g in sorted(generations.items())
            ],
        )
    return get(conn, uuid)


def get(conn: Connection, uuid: str) -> DiscoveryRow:
    """A discovery with each host asked: its generation and ``received_at``."""
    row = conn.execute(sa.select(disc, *_COUNTS).where(disc.c.uuid == uuid.lower())).first()
    if row is None:
        raise exceptions.DiscoveryNotFound(uuid=uuid)
    discovery = cast(DiscoveryRow, dict(row._mapping))  # the table's columns, the counts
    discovery["hosts"] = [
        cast(DiscoveryHost, dict(h._mapping))
        for h in conn.execute(
            sa.select(dh.c.hostname, dh.c.generation, dh.c.received_at)
            .where(dh.c.discovery_id == row.id)
            .order_by(dh.c.hostname)
        )
    ]
    return discovery


def list_discoveries(conn: Connection, *, page: Page | None) -> list[DiscoveryRow]:
    """A page of discoveries, newest first by default, with their counts (hosts asked,
    received) but not their hosts."""
    stmt = sa.select(disc, *_COUNTS)
    if page is None:  # every list of 2.7 is paged; said rather than assumed
        stmt = stmt.order_by(disc.c.requested_at.desc(), disc.c.id.desc())
    else:
        stmt = paginate(conn, stmt, disc, page, SORT_COLUMNS)
    return [cast(DiscoveryRow, dict(r._mapping)) for r in conn.execute(stmt)]
