"""Device activation (doc/devices.md): only a ready device is offered and bindable.

    inactive ──ready──► activating ──agent: install done──► ready
        ▲                   │ └──────agent: install failed──► inactive (reason)
        │                 inactive
        │                   ▼
        └──agent: done── deactivating ◄──inactive (no attach handle held)── ready

An operator's change (``change``) and an agent's outcome (``record_outcome``) are each a
compare-and-set on the device's ``activation`` (and, for an outcome, its
``activation_generation``: the host's desired-state generation of the operator's last
change, which the outcome names). Every change bumps the host's desired-state generation
(the agent's activations list moved) and queues the host's Placement sync, in the
same transaction: a device that is not ready is fully reserved there
(exosuit/placement/providers.py), and a bind refuses it (exosuit/db/arqs.py).
``inactive`` is refused while an attach handle of the device is held; the handles are
locked before that is decided, as exosuit/db/programs.py does, so a concurrent bind has
either committed (and is seen) or waits and then sees the new activation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import audit, models
from exosuit.db.desired_state import (
    ACTIVATING,
    DEACTIVATING,
    INACTIVE,
    PENDING,
    READY,
    bump,
)
from exosuit.db.placement import enqueue_sync

__all__ = [
    "CHANGED",
    "FILTERS",
    "REFUSED",
    "UNCHANGED",
    "Outcome",
    "change",
    "deactivate",
    "holders",
    "record_outcome",
]

CHANGED = "changed"
UNCHANGED = "unchanged"
REFUSED = "refused"
# What an operator may select devices by (besides their uuids): devices' columns.
FILTERS = {"hostname": "hostname", "type": "type", "driver": "driver_name"}

dev = models.devices
dep = models.deployables
ah = models.attach_handles
arq = models.accelerator_requests
claims = models.claims

_Q_LOCK_HANDLES = (
    sa.select(ah.c.id)
    .where(
        ah.c.deployable_id.in_(
            sa.select(dep.c.id).where(dep.c.device_id.in_(sa.bindparam("p_ids", expanding=True)))
        )
    )
    .with_for_update()
)
_Q_HELD = (
    sa.select(
        dep.c.device_id,
        ah.c.uuid,
        arq.c.uuid.label("arq_uuid"),
        arq.c.instance_uuid,
        claims.c.uuid.label("claim_uuid"),
    )
    .select_from(
        ah.join(dep, ah.c.deployable_id == dep.c.id)
        .outerjoin(arq, arq.c.attach_handle_id == ah.c.id)
        .outerjoin(claims, arq.c.claim_id == claims.c.id)
    )
    .where(dep.c.device_id.in_(sa.bindparam("p_ids", expanding=True)), ah.c.in_use.is_(True))
    .order_by(ah.c.id)
)
_Q_SET = (
    sa.update(dev)
    .where(dev.c.id == sa.bindparam("p_id"), dev.c.activation == sa.bindparam("p_from"))
    .values(
        activation=sa.bindparam("p_to"),
        activation_reason=sa.bindparam("p_reason"),
        activation_generation=sa.bindparam("p_generation"),
        updated_at=sa.bindparam("p_now"),
    )
)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What an operator's change did to one device."""

    uuid: str
    hostname: str
    activation: str  # now
    outcome: str  # changed | unchanged | refused
    reason: str | None = None


def holders(conn: Connection, device_ids: Collection[int]) -> dict[int, list[str]]:
    """Who holds attach handles of the devices, by device id (devices held by nobody are
    left out); the handles are locked first."""
    if not device_ids:
        return {}
    ids = sorted(device_ids)
    conn.execute(_Q_LOCK_HANDLES, {"p_ids": ids})
    held: dict[int, list[str]] = {}
    for h in conn.execute(_Q_HELD, {"p_ids": ids}):
        who = f"attach handle {h.uuid} held by ARQ {h.arq_uuid}"
        if h.claim_uuid:
            who = f"attach handle {h.uuid} held by claim {h.claim_uuid} (ARQ {h.arq_uuid})"
        elif h.instance_uuid:
            who += f" of instance {h.instance_uuid}"
        held.setdefault(h.device_id, []).append(who)
    return held


def _select(
    conn: Connection, uuids: Sequence[str] | None, filters: Mapping[str, str]
) -> list[sa.Row[*tuple[Any, ...]]]:
    """The devices named (DeviceNotFound for any unknown uuid) or matched, locked, in id
    order (two requests lock them in the same order)."""
    stmt = sa.select(dev.c.id, dev.c.uuid, dev.c.hostname, dev.c.activation)
    if uuids is not None:
        wanted = sorted({u.lower() for u in uuids})
        stmt = stmt.where(dev.c.uuid.in_(wanted))
    for name, value in filters.items():
        stmt = stmt.where(dev.c[FILTERS[name]] == value)
    rows = list(conn.execute(stmt.order_by(dev.c.id).with_for_update()).all())
    if uuids is not None:
        missing = sorted(set(wanted) - {r.uuid for r in rows})
        if missing:
            raise exceptions.DeviceNotFound(uuid=", ".join(missing))
    return rows


def _target(activation: str, state: str) -> str | None:
    """Where an operator's ``state`` takes a device in ``activation`` (None: it is there
    already, or on its way)."""
    if state == READY:
        return None if activation in (READY, ACTIVATING) else ACTIVATING
    return None if activation in (INACTIVE, DEACTIVATING) else DEACTIVATING


def change(
    conn: Connection,
    state: str,
    *,
    uuids: Sequence[str] | None = None,
    filters: Mapping[str, str] | None = None,
) -> list[Outcome]:
    """An operator marks devices ``ready`` or ``inactive``: those named by ``uuids``, or
    those matching ``filters`` (hostname, type, driver). Each device's outcome: changed,
    unchanged (there already, or on its way), or refused (inactive while held). Raises
    DeviceNotFound for a uuid that names no device (nothing changes), DeviceInUse when
    every device asked is refused (a single device asked: the 409 names its holders)."""
    rows = _select(conn, uuids, filters or {})
    moves = {r.id: _target(r.activation, state) for r in rows}
    leaving = [r.id for r in rows if moves[r.id] == DEACTIVATING]
    held = holders(conn, leaving)
    if rows and len(held) == len(rows):
        raise exceptions.DeviceInUse(
            "Device(s) cannot be marked inactive while in use: "
            + "; ".join(f"{r.uuid}: {', '.join(held[r.id])}" for r in rows)
            + ". Release them first."
        )
    changing = [r for r in rows if moves[r.id] is not None and r.id not in held]
    generations = bump(conn, {r.hostname for r in changing})
    now = models.utcnow()
    outcomes = []
    changes = []
    for r in rows:
        to = moves[r.id]
        if r.id in held:
            reason = f"in use: {', '.join(held[r.id])}"
            outcomes.append(Outcome(r.uuid, r.hostname, r.activation, REFUSED, reason))
        elif to is None:
            outcomes.append(Outcome(r.uuid, r.hostname, r.activation, UNCHANGED))
        else:
            params = {"p_id": r.id, "p_from": r.activation, "p_to": to, "p_reason": None}
            conn.execute(
                _Q_SET, {**params, "p_generation": generations.get(r.hostname), "p_now": now}
            )
            outcomes.append(Outcome(r.uuid, r.hostname, to, CHANGED))
            before, after = {"activation": r.activation}, {"activation": to}
            changes.append(audit.Change(r.uuid, before, after, r.hostname))
    audit.record_many(conn, f"activation.{state}", "device", changes)
    for hostname in sorted(generations):
        enqueue_sync(conn, hostname)
    return outcomes


def deactivate(
    conn: Connection,
    rows: Iterable[sa.Row[*tuple[Any, ...]]],
    reason: str,
    generations: Mapping[str, int],
) -> list[str]:
    """Make devices (rows with id, uuid, hostname, activation) inactive at once, with
    ``reason``, no host work asked (their driver is going: exosuit/db/drivers.py); the
    caller has checked no handle is held and bumped their hosts' generations. Their
    uuids; the hosts' Placement syncs are queued."""
    now = models.utcnow()
    done, touched, changes = [], set(), []
    for r in rows:
        if r.activation == INACTIVE:
            continue
        after = {"activation": INACTIVE, "reason": reason}
        changes.append(audit.Change(r.uuid, {"activation": r.activation}, after, r.hostname))
        params = {"p_id": r.id, "p_from": r.activation, "p_to": INACTIVE, "p_reason": reason}
        conn.execute(_Q_SET, {**params, "p_generation": generations.get(r.hostname), "p_now": now})
        done.append(r.uuid)
        touched.add(r.hostname)
    audit.record_many(conn, "activation.inactive", "device", changes)
    for hostname in sorted(touched):
        enqueue_sync(conn, hostname)
    return done


def _ended(action: str, state: str, reason: str | None) -> tuple[str, str | None]:
    """The activation (and its reason) an agent's outcome leads to."""
    if state == "done":
        return (READY, None) if action == "install" else (INACTIVE, None)
    if action == "install":
        return INACTIVE, reason or "the install step failed"
    return INACTIVE, f"the host work could not be undone: {reason or 'no reason given'}"


def record_outcome(
    conn: Connection,
    hostname: str,
    uuid: str,
    *,
    action: str,
    generation: int,
    state: str,
    reason: str | None = None,
) -> str:
    """The agent of ``hostname`` ended the ``action`` (install, uninstall) its desired
    state asked for device ``uuid`` at ``generation``: ``state`` done or failed. Returns
    the device's activation now. Idempotent (the same outcome again changes nothing).
    Raises DeviceNotFound (no such device on that host) or ActivationSuperseded (the
    operator changed the device's activation since: the outcome is dropped)."""
    row = conn.execute(
        sa.select(dev.c.id, dev.c.hostname, dev.c.activation, dev.c.activation_generation)
        .where(dev.c.uuid == uuid.lower())
        .with_for_update()
    ).first()
    if row is None or row.hostname != hostname:
        raise exceptions.DeviceNotFound(uuid=uuid)
    to, why = _ended(action, state, reason)
    if row.activation_generation == generation:
        if PENDING.get(row.activation) == action:
            # The device keeps the generation its outcome names (the same outcome again
            # is then recognised); the host's moves on: its activations list changed.
            bump(conn, [hostname])
            params = {"p_id": row.id, "p_from": row.activation, "p_to": to, "p_reason": why}
            conn.execute(_Q_SET, {**params, "p_generation": generation, "p_now": models.utcnow()})
            enqueue_sync(conn, hostname)
            after = {"activation": to, "reason": why, "host_work": action, "outcome": state}
            was = {"activation": row.activation}
            audit.record(conn, "activation.end", "device", uuid.lower(), was, after, host=hostname)
            return to
        if row.activation == to:
            return to  # this outcome, recorded already
    raise exceptions.ActivationSuperseded(
        uuid=uuid,
        action=action,
        generation=generation,
        activation=row.activation,
        current=row.activation_generation,
    )
