"""The invariants of Exosuit's state, checked on the database and Placement directly.

The fault campaign (bench/chaos.py) checks them after its faults and load, and
tests/bench/test_chaos.py holds each one against a database put by hand into the bad state it names
(so that none is vacuous). Each ``check_*`` returns its violations, as sentences; an
empty list is the invariant held:

1. ``check_double_holders``: no attach handle held by two ARQs;
2. ``check_handles``: every handle in use is held by exactly one ARQ and every held
   handle is in use;
3. ``check_stuck``: no ARQ in a transitional state (``BindStarted``, ``Deleting``) past
   ``bind_timeout``;
4. ``check_placement``: Placement equal to the database, as the sync defines it: each
   deployable's provider (name, parent, resource class, total, reserved, traits, no
   other class) and no other provider; the allocations on them equal to the ``Bound``
   ARQs (instance, provider);
5. ``check_ledger``: every acknowledged write present (``Arq``: what the clients were
   told), and ``check_inventory``: each host's inventory its last acknowledged report.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

import httpx
import sqlalchemy as sa

from exosuit.db import models
from exosuit.db import placement as placement_db
from exosuit.db.api import Database
from exosuit.placement.providers import Provider, desired_providers

__all__ = [
    "AGENT_DEVICES",
    "TRANSITIONAL",
    "Arq",
    "check_claims",
    "check_double_holders",
    "check_handles",
    "check_inventory",
    "check_ledger",
    "check_placement",
    "check_stuck",
    "unacknowledged_arqs",
]

TRANSITIONAL = ("BindStarted", "Deleting")
# What a real agent of the campaign has (the simulated driver's 2 FPGAs and 2 GPUs).
AGENT_DEVICES = 4


@dataclasses.dataclass
class Arq:
    """What the clients were told about one ARQ: ``created`` (201), ``bound`` (202 and
    resolved Bound), ``deleted`` (204, or 404: gone); ``unknown`` when a delete was never
    acknowledged before the end."""

    uuid: str
    instance: str
    profile: str
    state: str = "created"
    hostname: str | None = None
    rp_uuid: str | None = None


def check_double_holders(db: Database) -> list[str]:
    """No attach handle held by two ARQs (the schema's UNIQUE says so too)."""
    arq = models.accelerator_requests
    rows = db.read(
        lambda conn: conn.execute(
            sa.select(arq.c.attach_handle_id, sa.func.count())
            .where(arq.c.attach_handle_id.is_not(None))
            .group_by(arq.c.attach_handle_id)
            .having(sa.func.count() > 1)
        ).all()
    )
    return [f"attach handle id {h} held by {n} ARQs" for h, n in rows]


def check_handles(db: Database) -> list[str]:
    """A handle is in use exactly when an ARQ holds it; a ``Bound`` ARQ holds one and
    only a ``Bound`` or ``BindStarted`` one does."""
    arq, ah = models.accelerator_requests, models.attach_handles
    problems = []
    holders = dict(
        db.read(
            lambda conn: conn.execute(
                sa.select(arq.c.attach_handle_id, arq.c.uuid).where(
                    arq.c.attach_handle_id.is_not(None)
                )
            ).all()
        )
    )
    handles = db.read(lambda conn: conn.execute(sa.select(ah.c.id, ah.c.uuid, ah.c.in_use)).all())
    for handle_id, handle_uuid, in_use in handles:
        if in_use and handle_id not in holders:
            problems.append(f"attach handle {handle_uuid} in use, held by no ARQ")
        if not in_use and handle_id in holders:
            problems.append(
                f"attach handle {handle_uuid} held by ARQ {holders[handle_id]} but not in use"
            )
    states = db.read(
        lambda conn: conn.execute(sa.select(arq.c.uuid, arq.c.state, arq.c.attach_handle_id)).all()
    )
    for arq_uuid, state, handle in states:
        if state == "Bound" and handle is None:
            problems.append(f"ARQ {arq_uuid} Bound without an attach handle")
        if handle is not None and state not in ("Bound", "BindStarted"):
            problems.append(f"ARQ {arq_uuid} {state} still holds an attach handle")
    return problems


def check_stuck(db: Database, bind_timeout: float) -> list[str]:
    """No ARQ in a transitional state (``TRANSITIONAL``) for longer than ``bind_timeout``
    seconds."""
    arq = models.accelerator_requests
    limit = models.utcnow() - dt.timedelta(seconds=bind_timeout)
    rows = db.read(
        lambda conn: conn.execute(
            sa.select(arq.c.uuid, arq.c.state, arq.c.created_at, arq.c.updated_at).where(
                arq.c.state.in_(TRANSITIONAL)
            )
        ).all()
    )
    return [
        f"ARQ {u} {state} since {since or created} (bind_timeout {bind_timeout:g} s)"
        for u, state, created, since in rows
        if (since or created) < limit
    ]


def check_placement(db: Database, placement: httpx.Client) -> tuple[list[str], list[str]]:
    """Placement (``placement``: a client of its API, as an admin) equal to the database
    as the sync defines it: each deployable's provider and no other provider (the first
    list), the allocations on them equal to the ``Bound`` ARQs (the second)."""
    problems: list[str] = []
    found_allocations: set[tuple[str, str]] = set()
    for host in db.read(placement_db.hostnames):
        rows = db.read(placement_db.deployable_rows, host)
        compute = db.read(placement_db.read_host, host).compute_rp_uuid
        if compute is None:
            if rows:
                problems.append(f"host {host}: no compute node provider recorded")
            continue
        want = desired_providers(host, compute, rows)
        recorded = db.read(placement_db.recorded_providers, host)
        r = placement.get(f"/resource_providers?in_tree={compute}")
        if r.status_code != 200:
            problems.append(f"host {host}: GET in_tree {compute}: {r.status_code}")
            continue
        found = {p["uuid"]: p for p in r.json()["resource_providers"] if p["uuid"] != compute}
        if want and not r.json()["resource_providers"]:
            problems.append(f"host {host}: compute node provider {compute} missing")
        for rp_uuid in sorted(set(want) | set(found)):
            wanted, rp = want.get(rp_uuid), found.get(rp_uuid)
            allocations = {}
            if rp is not None:
                allocations = placement.get(f"/resource_providers/{rp_uuid}/allocations").json()[
                    "allocations"
                ]
                found_allocations.update((consumer, rp_uuid) for consumer in allocations)
            if wanted is None:
                record = recorded.get(rp_uuid)
                if record is not None and record.removing and allocations:
                    continue  # a removed deployable's provider, kept while allocated
                problems.append(
                    f"host {host}: provider {rp_uuid} ({rp['name']}) is no deployable's"
                )
                continue
            if rp is None:
                problems.append(f"host {host}: provider {rp_uuid} ({wanted.name}) missing")
                continue
            actual = _read_provider(placement, rp, wanted)
            for aspect, a, b in (
                (
                    "name/parent",
                    (wanted.name, wanted.parent_uuid),
                    (actual.name, actual.parent_uuid),
                ),
                ("inventory", wanted.inventory_key(), actual.inventory_key()),
                ("traits", sorted(wanted.traits), sorted(actual.traits)),
            ):
                if a != b:
                    problems.append(
                        f"host {host}: provider {rp_uuid} {aspect} {b}, the database says {a}"
                    )
    arq, claims = models.accelerator_requests, models.claims
    # A claim's allocation is the claim's (its uuid the consumer), an ARQ's Nova's instance's.
    consumer = sa.case((arq.c.claim_id.is_not(None), claims.c.uuid), else_=arq.c.instance_uuid)
    bound = set(
        db.read(
            lambda conn: conn.execute(
                sa.select(consumer, arq.c.device_rp_uuid)
                .select_from(arq.outerjoin(claims, arq.c.claim_id == claims.c.id))
                .where(arq.c.state == "Bound")
            ).all()
        )
    )
    allocation_problems = [
        f"allocation of {c} on {rp} without a Bound ARQ"
        for c, rp in sorted(found_allocations - bound)
    ] + [
        f"ARQ Bound to {c} on {rp} without its allocation"
        for c, rp in sorted(bound - found_allocations)
    ]
    return problems, allocation_problems


def _read_provider(placement: httpx.Client, rp: dict, wanted: Provider) -> Provider:
    inventories = placement.get(f"/resource_providers/{rp['uuid']}/inventories").json()[
        "inventories"
    ]
    traits = placement.get(f"/resource_providers/{rp['uuid']}/traits").json()["traits"]
    classes = sorted(inventories)
    main = (
        wanted.resource_class
        if wanted.resource_class in inventories
        else (classes[0] if classes else None)
    )
    inventory = inventories.get(main, {}) if main else {}
    return Provider(
        uuid=rp["uuid"],
        name=rp["name"],
        parent_uuid=rp["parent_provider_uuid"],
        resource_class=main,
        total=int(inventory.get("total", 0)),
        reserved=int(inventory.get("reserved", 0)),
        traits=frozenset(traits),
        other_classes=frozenset(c for c in classes if c != main),
    )


def check_ledger(db: Database, ledger: Mapping[str, Arq]) -> list[str]:
    """Every write the clients were told of (``ledger``) is in the database: an ARQ
    created exists, one bound is ``Bound`` to what was asked and holds a handle of that
    provider, one deleted is gone."""
    arq, ah, dep = models.accelerator_requests, models.attach_handles, models.deployables
    rows = {
        r.uuid: r
        for r in db.read(
            lambda conn: conn.execute(
                sa.select(
                    arq.c.uuid,
                    arq.c.state,
                    arq.c.hostname,
                    arq.c.device_rp_uuid,
                    arq.c.instance_uuid,
                    dep.c.rp_uuid.label("handle_rp_uuid"),
                ).select_from(
                    arq.outerjoin(ah, arq.c.attach_handle_id == ah.c.id).outerjoin(
                        dep, ah.c.deployable_id == dep.c.id
                    )
                )
            ).all()
        )
    }
    problems = []
    for entry in ledger.values():
        row = rows.get(entry.uuid)
        if entry.state == "deleted" and row is not None:
            problems.append(f"ARQ {entry.uuid} deleted (acknowledged) but present ({row.state})")
        elif entry.state == "created" and row is None:
            problems.append(f"ARQ {entry.uuid} created (acknowledged) but absent")
        elif entry.state == "bound":
            if row is None:
                problems.append(f"ARQ {entry.uuid} bound (acknowledged) but absent")
            elif (row.state, row.hostname, row.device_rp_uuid, row.instance_uuid) != (
                "Bound",
                entry.hostname,
                entry.rp_uuid,
                entry.instance,
            ):
                problems.append(
                    f"ARQ {entry.uuid} bound to {entry.hostname}/{entry.rp_uuid}/"
                    f"{entry.instance} (acknowledged) but {row.state} "
                    f"{row.hostname}/{row.device_rp_uuid}/{row.instance_uuid}"
                )
            elif row.handle_rp_uuid != entry.rp_uuid:
                problems.append(
                    f"ARQ {entry.uuid} holds a handle of {row.handle_rp_uuid}, "
                    f"not of {entry.rp_uuid}"
                )
    return problems


def unacknowledged_arqs(db: Database, ledger: Mapping[str, Arq]) -> int:
    """ARQs in the database that no acknowledged POST created (not a violation: a POST
    whose answer was lost); a claim's ARQs are its own."""
    arq = models.accelerator_requests
    uuids = db.read(
        lambda conn: (
            conn.execute(sa.select(arq.c.uuid).where(arq.c.claim_id.is_(None))).scalars().all()
        )
    )
    return len(set(uuids) - set(ledger))


def check_claims(db: Database, ledger: Mapping[str, str]) -> list[str]:
    """Every claim the clients were told of (``ledger``: uuid → ``made``, 201, or
    ``released``, 204) is so in the database: a made one live, each of its ARQs ``Bound``
    with a handle; a released one released (or purged) and holding nothing. And no claim
    is stuck: none live with an ARQ in another state than ``Bound``."""
    arq, claims = models.accelerator_requests, models.claims
    rows = db.read(
        lambda conn: conn.execute(
            sa.select(
                claims.c.uuid, claims.c.released_at, arq.c.uuid.label("arq"), arq.c.state,
                arq.c.attach_handle_id,
            ).select_from(claims.outerjoin(arq, arq.c.claim_id == claims.c.id))
        ).all()
    )  # fmt: skip
    found: dict[str, list[Any]] = {}
    for row in rows:
        found.setdefault(row.uuid, []).append(row)
    problems = []
    for uuid, state in sorted(ledger.items()):
        held = [r for r in found.get(uuid, []) if r.arq is not None]
        if state == "made":
            if uuid not in found:
                problems.append(f"claim {uuid} made (acknowledged) but absent")
            elif found[uuid][0].released_at is not None:
                problems.append(f"claim {uuid} made (acknowledged) but released")
            elif not held:
                problems.append(f"claim {uuid} made (acknowledged) but holds nothing")
        elif state == "released" and uuid in found:
            if found[uuid][0].released_at is None or held:
                problems.append(f"claim {uuid} released (acknowledged) but live")
    for uuid, claim_rows in sorted(found.items()):
        if claim_rows[0].released_at is None:
            for r in claim_rows:
                if r.arq is not None and (r.state != "Bound" or r.attach_handle_id is None):
                    problems.append(f"claim {uuid} stuck: its ARQ {r.arq} is {r.state}")
    return problems


def check_inventory(
    db: Database,
    hosts: Iterable[str],
    acknowledged: Mapping[str, Mapping[str, Any]],
    agent_devices: int = AGENT_DEVICES,
) -> list[str]:
    """Each host's devices are its last acknowledged report's (``acknowledged``, by host)
    or, for a host without one (a real agent), ``agent_devices`` of them; a device no
    longer present is one still held."""
    dev, ah, dep = models.devices, models.attach_handles, models.deployables
    problems = []
    held = set(
        db.read(
            lambda conn: conn.execute(
                sa.select(dep.c.device_id)
                .join(ah, ah.c.deployable_id == dep.c.id)
                .where(ah.c.in_use.is_(True))
            ).scalars()
        )
    )
    for host in hosts:
        devices = db.read(
            lambda conn, host=host: conn.execute(
                sa.select(dev.c.id, dev.c.pci_address, dev.c.presence, dev.c.status).where(
                    dev.c.hostname == host
                )
            ).all()
        )
        present = {d.pci_address for d in devices if d.presence == "present"}
        if host in acknowledged:
            expected = {d["pci_address"] for d in acknowledged[host]["devices"]}
        else:
            expected = None  # a real agent: its own devices, 2 FPGAs and 2 GPUs
        if expected is not None and present != expected:
            problems.append(
                f"host {host}: devices present {sorted(present)}, its last acknowledged "
                f"report has {sorted(expected)}"
            )
        if expected is None and len(present) != agent_devices:
            problems.append(
                f"host {host}: {len(present)} devices present, its agent has {agent_devices}"
            )
        for d in devices:
            if d.presence != "present" and d.id not in held:
                problems.append(f"host {host}: device {d.pci_address} {d.presence}, not held")
    return problems
