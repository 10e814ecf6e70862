"""Device health (doc/devices.md, "Health"): what the agents report, what holds a device
back from every offer, and how it comes back.

A device's health is its agent's last report (``health_state`` ok | warning | unhealthy,
``health_reason``, ``health_since``: when the state took its value), applied with the
rest of the report (exosuit/db/inventory.py, through ``reported``). A device reported
unhealthy is **held back** (``health_held`` ``agent``) in the same transaction: Placement
reserves its providers (exosuit/placement/providers.py), binds and claims refuse it
(exosuit/db/arqs.py, exosuit/db/claims.py) and DRA no longer publishes it; what holds it
already keeps it (``holders``, as for drain). It is offered again when it has been
healthy (ok or warning) for ``[health] recover_after`` seconds, which the conductor's
periodic ``health_recovery`` job (``recover``) finds, or when an operator clears it
(``set_health``). An operator may also hold a healthy device back by hand (``health_held``
``operator``): only a clear offers it again.

Each change that moves a device in or out of the offer also queues its host's Placement
sync.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import audit, models
from exosuit.db.drain import Holder, holders
from exosuit.db.placement import enqueue_sync

__all__ = [
    "AGENT",
    "OK",
    "OPERATOR",
    "RECOVERY",
    "STATES",
    "UNHEALTHY",
    "WARNING",
    "OFFERED",
    "DeviceHealth",
    "HealthView",
    "recover",
    "hold_record",
    "reported",
    "set_health",
    "view",
]

OK = "ok"
WARNING = "warning"
UNHEALTHY = "unhealthy"
STATES = (OK, WARNING, UNHEALTHY)
# Who holds a device back: its agent's report of unhealthy, or an operator.
AGENT = "agent"
OPERATOR = "operator"
# The periodic job that offers recovered devices again (exosuit/conductor/health.py).
RECOVERY = "health_recovery"

dev = models.devices

# The devices offered as far as health goes: what every offer (Placement, binds, claims,
# DRA) adds to its own conditions.
OFFERED = dev.c.health_held.is_(None)


def reported(row: Any | None, device: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    """The health columns that change for ``device`` as reported (its ``health``, absent:
    ok), given its current ``row`` (None: a new device). A change of state dates
    ``health_since``; a change to unhealthy holds the device back (``agent``), unless an
    operator already did. Pure."""
    health = device.get("health") or {}
    state = health.get("state") or OK
    reason = health.get("reason") if state != OK else None
    if row is None:
        return {
            "health_state": state,
            "health_reason": reason,
            "health_since": None if state == OK else now,
            "health_held": AGENT if state == UNHEALTHY else None,
        }
    changes: dict[str, Any] = {}
    if row.health_state != state:
        changes["health_state"] = state
        changes["health_since"] = now
        if state == UNHEALTHY and row.health_held is None:
            changes["health_held"] = AGENT
    if row.health_reason != reason:
        changes["health_reason"] = reason
    return changes


class HealthView(TypedDict):
    """A device's health as the API shows it (``view``)."""

    state: str  # ok | warning | unhealthy
    reason: str | None
    since: dt.datetime | None
    offered: bool
    held_by: str | None  # None | agent | operator
    offered_at: dt.datetime | None


class DeviceHealth(HealthView):
    """``set_health``'s answer: the view, and which device it is and what holds it."""

    uuid: str
    hostname: str
    holders: list[Holder]


def view(device: Mapping[str, Any], recover_after: float | None = None) -> HealthView:
    """A device's health as the API shows it (``device``: its row's mapping): ``state``,
    ``reason``, ``since``, ``offered`` (False while held back), ``held_by`` (None, agent
    or operator) and ``offered_at``: for a device its agent's report held back and
    healthy again, when the recovery job offers it again at the earliest (None
    otherwise)."""
    held, since = device["health_held"], device["health_since"]
    offered_at = None
    if held == AGENT and device["health_state"] != UNHEALTHY and since is not None:
        if recover_after is not None:
            offered_at = since + dt.timedelta(seconds=recover_after)
    return {
        "state": device["health_state"],
        "reason": device["health_reason"],
        "since": since,
        "offered": held is None,
        "held_by": held,
        "offered_at": offered_at,
    }


_Q_DEVICE = sa.select(
    dev.c.id,
    dev.c.uuid,
    dev.c.hostname,
    dev.c.health_state,
    dev.c.health_reason,
    dev.c.health_since,
    dev.c.health_held,
)


def set_health(
    conn: Connection,
    uuid: str,
    *,
    clear: bool = False,
    hold: bool = False,
    reason: str | None = None,
    recover_after: float | None = None,
) -> DeviceHealth:
    """An operator's act on a device's health: ``clear`` offers it again now (whatever
    held it back; its reported state stays what it is, and only a new change to unhealthy
    holds it back again); ``hold`` holds it back (``operator``) until a clear, with
    ``reason`` (shown as its health reason until its agent reports a change). Neither:
    nothing changes (a read). Idempotent. Returns ``view`` plus ``uuid``, ``hostname``
    and ``holders``; raises DeviceNotFound. The host's Placement sync is queued when the
    offer changed."""
    row = conn.execute(_Q_DEVICE.where(dev.c.uuid == uuid.lower()).with_for_update()).first()
    if row is None:
        raise exceptions.DeviceNotFound(uuid=uuid)
    now = models.utcnow()
    values: dict[str, Any] = {}
    if clear and row.health_held is not None:
        values["health_held"] = None
    elif hold:
        if row.health_held != OPERATOR:
            values["health_held"] = OPERATOR
        if reason and reason != row.health_reason:
            values["health_reason"] = f"held back by an operator: {reason}"
    if values:
        conn.execute(sa.update(dev).where(dev.c.id == row.id).values(updated_at=now, **values))
        if "health_held" in values:
            enqueue_sync(conn, row.hostname)
        before = {"held_by": row.health_held, "reason": row.health_reason}
        row = conn.execute(_Q_DEVICE.where(dev.c.id == row.id)).one()
        after = {"held_by": row.health_held, "reason": row.health_reason}
        action = "health.clear" if clear else "health.hold"
        audit.record(conn, action, "device", row.uuid, before, after, host=row.hostname)
    return {
        "uuid": row.uuid,
        "hostname": row.hostname,
        **view(dict(row._mapping), recover_after),
        "holders": holders(conn, [row.id])[row.id],
    }


def recover(conn: Connection, recover_after: float, now: dt.datetime | None = None) -> list[str]:
    """Offer again the devices their agent's report held back that have been healthy (ok
    or warning, no change of health) for ``recover_after`` seconds; their hosts' Placement
    syncs queued, each recorded (``health.recover``). Returns the devices' uuids."""
    now = now or models.utcnow()
    cutoff = now - dt.timedelta(seconds=recover_after)
    rows = conn.execute(
        sa.select(dev.c.id, dev.c.uuid, dev.c.hostname)
        .where(
            dev.c.health_held == AGENT,
            dev.c.health_state != UNHEALTHY,
            sa.or_(dev.c.health_since.is_(None), dev.c.health_since <= cutoff),
        )
        .order_by(dev.c.id)
        .with_for_update()
    ).all()
    if not rows:
        return []
    conn.execute(
        sa.update(dev)
        .where(dev.c.id.in_([r.id for r in rows]), dev.c.health_held == AGENT)
        .values(health_held=None, updated_at=now)
    )
    for hostname in sorted({r.hostname for r in rows}):
        enqueue_sync(conn, hostname)
    audit.record_many(
        conn,
        "health.recover",
        "device",
        [audit.Change(r.uuid, {"held_by": AGENT}, {"held_by": None}, r.hostname) for r in rows],
    )
    return [r.uuid for r in rows]


def hold_record(
    changes: Mapping[str, Any], row: Any | None = None
) -> tuple[dict[str, Any] | None, dict[str, Any]] | None:
    """The audit record's (before, after) of a report that held a device back
    (``health.hold``, recorded by the report's applier as its host): ``changes`` as
    ``reported`` gave them for the device's ``row`` (None: a new device). None when the
    report held nothing back."""
    if changes.get("health_held") != AGENT:
        return None
    before = None if row is None else {"state": row.health_state, "held_by": row.health_held}
    after = {"state": changes["health_state"], "held_by": AGENT}
    if changes.get("health_reason") is not None:
        after["reason"] = changes["health_reason"]
    return before, after
