"""A host's whole desired state: what its agent must do (doc/devices.md, doc/programming.md).

    {"generation": 12,
     "programs": [...],                            # exosuit/db/programs.py
     "discovery": {"generation": 12, "spread": 30.0} | None,
     "drivers": {"pci": {"enabled": False, "config": {}}},
     "activations": [{"device", "controlpath_id", "driver", "action", "generation"}],
     "partitions": [{"device", "controlpath_id", "driver", "layout", "generation"}],
     "slices": [{"device", "controlpath_id", "driver", "layout",
                 "held": [{"arq", "state", "attach_handle": {"type", "info"}}]}],
     "containers": [{"claim", "devices": [{"name", "class", "device", "controlpath_id",
                                           "driver", "attach_handle": {"type", "info"}}]}]}

``partitions``: the devices whose partition layout is being applied (doc/devices.md,
"Partitions"; exosuit/db/partitions.py), each with the layout and its generation.

``slices``: the devices whose applied layout is on demand (``"on_demand": true``), each
with the slices held now (the attach handles ARQs hold: ``state`` BindStarted while the
bind waits for its slice, Bound after). The agent makes exactly those of the device's
on-demand slices and removes the others, and reports each BindStarted one made (or not)
through ``PUT …/accelerator_requests/{arq}``.

``containers``: the host's bound standalone claims made with ``container`` (2.8,
doc/standalone.md), whose CDI spec files the agent writes: each device's CDI id is
``exosuit.dev/<class>=<name>`` (``cdi_id``), the name ``<claim uuid>-<n>`` in the
order of the claim's ARQs.

Every transaction that changes any of it bumps ``hosts.desired_generation`` (``bump``):
the agent polls the generation cheaply (an ETag) and the inventory answers carry the
whole state. A host with nothing to do costs one indexed read: the existence of each
part is read with the generation, and a part is read only when it exists.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import changes, models, programs

__all__ = [
    "ACTIVATING",
    "CDI_VENDOR",
    "DEACTIVATING",
    "FLEET",
    "INACTIVE",
    "PENDING",
    "READY",
    "STATES",
    "bump",
    "cdi_class",
    "cdi_id",
    "desired_state",
]

# Device activations (doc/devices.md): only a ready device is offered and bindable.
INACTIVE = "inactive"
ACTIVATING = "activating"
READY = "ready"
DEACTIVATING = "deactivating"
STATES = (INACTIVE, ACTIVATING, READY, DEACTIVATING)
# The activations whose host work the agent runs: the action each asks.
PENDING = {ACTIVATING: "install", DEACTIVATING: "uninstall"}

# A device whose partition layout its agent is applying (exosuit/db/partitions.py).
APPLYING_PARTITION = "applying"
APPLIED_PARTITION = "applied"

# The host_drivers row of what was asked for every host (no host is named "").
FLEET = ""

# The CDI vendor of every device Exosuit hands to containers (doc/standalone.md).
CDI_VENDOR = "exosuit.dev"

hosts = models.hosts
dev = models.devices
cpid = models.controlpath_ids
prog = models.programs
hd = models.host_drivers
dh = models.discovery_hosts
disc = models.discoveries
claims = models.claims
arq = models.accelerator_requests
ah = models.attach_handles
dep = models.deployables

_HOST: sa.BindParameter[str] = sa.bindparam("p_hostname")
_Q_HOST_STATE = sa.select(
    hosts.c.desired_generation,
    sa.exists().where(prog.c.hostname == _HOST, prog.c.state.in_(programs.RUNNING)).label("busy"),
    sa.exists()
    .where(dev.c.hostname == _HOST, dev.c.activation.in_(tuple(PENDING)))
    .label("activating"),
    sa.exists().where(dh.c.hostname == _HOST, dh.c.received_at.is_(None)).label("discovering"),
    sa.exists()
    .where(dev.c.hostname == _HOST, dev.c.partition_state == APPLYING_PARTITION)
    .label("partitioning"),
    sa.exists()
    .where(
        dev.c.hostname == _HOST,
        dev.c.partition_on_demand.is_(True),
        dev.c.partition_state == APPLIED_PARTITION,
    )
    .label("slicing"),
    sa.exists()
    .where(hd.c.hostname.in_((_HOST, FLEET)), hd.c.desired_generation.is_not(None))
    .label("overridden"),
    sa.exists()
    .where(claims.c.hostname == _HOST, claims.c.container.is_(True), claims.c.released_at.is_(None))
    .label("containing"),
).where(hosts.c.hostname == _HOST)

_cpid_of = cpid.alias("cpid_of")
_first_cpid = (
    sa.select(sa.func.min(_cpid_of.c.id))
    .where(_cpid_of.c.device_id == dev.c.id)
    .correlate(dev)
    .scalar_subquery()
)
_Q_ACTIVATIONS = (
    sa.select(
        dev.c.uuid,
        dev.c.driver_name,
        dev.c.activation,
        dev.c.activation_generation,
        cpid.c.cpid_type,
        cpid.c.cpid_info,
    )
    .select_from(
        dev.outerjoin(cpid, sa.and_(cpid.c.device_id == dev.c.id, cpid.c.id == _first_cpid))
    )
    .where(dev.c.hostname == _HOST, dev.c.activation.in_(tuple(PENDING)))
    .order_by(dev.c.id)
)
_Q_PARTITIONS = (
    sa.select(
        dev.c.uuid,
        sa.func.coalesce(dev.c.plugin, dev.c.driver_name).label("driver"),
        dev.c.partition_layout,
        dev.c.partition_generation,
        cpid.c.cpid_type,
        cpid.c.cpid_info,
    )
    .select_from(
        dev.outerjoin(cpid, sa.and_(cpid.c.device_id == dev.c.id, cpid.c.id == _first_cpid))
    )
    .where(dev.c.hostname == _HOST, dev.c.partition_state == APPLYING_PARTITION)
    .order_by(dev.c.id)
)
_Q_SLICING = (
    sa.select(
        dev.c.id,
        dev.c.uuid,
        sa.func.coalesce(dev.c.plugin, dev.c.driver_name).label("driver"),
        dev.c.partition_layout,
        cpid.c.cpid_type,
        cpid.c.cpid_info,
    )
    .select_from(
        dev.outerjoin(cpid, sa.and_(cpid.c.device_id == dev.c.id, cpid.c.id == _first_cpid))
    )
    .where(
        dev.c.hostname == _HOST,
        dev.c.partition_on_demand.is_(True),
        dev.c.partition_state == APPLIED_PARTITION,
    )
    .order_by(dev.c.id)
)
_Q_HELD_SLICES = (
    sa.select(
        dep.c.device_id,
        arq.c.uuid,
        arq.c.state,
        ah.c.attach_type,
        ah.c.attach_info,
    )
    .select_from(
        ah.join(dep, dep.c.id == ah.c.deployable_id)
        .join(dev, dev.c.id == dep.c.device_id)
        .join(arq, arq.c.attach_handle_id == ah.c.id)
    )
    .where(
        dev.c.hostname == _HOST,
        ah.c.attach_type.in_(("MDEV", "MIG")),  # slices (arqs.SLICE_TYPES)
        dev.c.partition_on_demand.is_(True),
        dev.c.partition_state == APPLIED_PARTITION,
    )
    .order_by(ah.c.id)
)
_Q_DISCOVERY = (
    sa.select(dh.c.generation, disc.c.spread)
    .select_from(dh.join(disc, disc.c.id == dh.c.discovery_id))
    .where(dh.c.hostname == _HOST, dh.c.received_at.is_(None))
    .order_by(dh.c.generation.desc(), dh.c.id.desc())
    .limit(1)
)
_Q_OVERRIDES = (
    sa.select(hd.c.hostname, hd.c.name, hd.c.desired_enabled, hd.c.desired_config)
    .where(hd.c.hostname.in_((_HOST, FLEET)), hd.c.desired_generation.is_not(None))
    .order_by(hd.c.name)
)
_Q_BUMP = sa.update(hosts).values(desired_generation=hosts.c.desired_generation + 1)
# The host's live container claims that are bound: none of their ARQs still waits for
# its host (a program) or failed.
_unbound = arq.alias("unbound")
_Q_CONTAINERS = (
    sa.select(
        claims.c.uuid.label("claim_uuid"),
        dev.c.uuid.label("device_uuid"),
        dev.c.type,
        sa.func.coalesce(dev.c.plugin, dev.c.driver_name).label("driver"),
        cpid.c.cpid_type,
        cpid.c.cpid_info,
        ah.c.attach_type,
        ah.c.attach_info,
    )
    .select_from(
        claims.join(arq, arq.c.claim_id == claims.c.id)
        .join(ah, ah.c.id == arq.c.attach_handle_id)
        .join(dep, dep.c.id == ah.c.deployable_id)
        .join(dev, dev.c.id == dep.c.device_id)
        .outerjoin(cpid, sa.and_(cpid.c.device_id == dev.c.id, cpid.c.id == _first_cpid))
    )
    .where(
        claims.c.hostname == _HOST,
        claims.c.container.is_(True),
        claims.c.released_at.is_(None),
        ~sa.exists().where(_unbound.c.claim_id == claims.c.id, _unbound.c.state != "Bound"),
    )
    .order_by(claims.c.id, arq.c.id)
)


def cdi_class(device_type: str | None) -> str:
    """The CDI class of a device type: lower case, letters, digits, ``_`` and ``-`` only
    (no ``.``: podman 4.3's CDI library refuses it), starting with a letter."""
    name = re.sub(r"[^a-z0-9_-]+", "-", (device_type or "").lower()).strip("-_")
    return name if name[:1].isalpha() else f"accelerator{'-' + name if name else ''}"


def cdi_id(device_type: str | None, claim_uuid: str, index: int) -> str:
    """The CDI device id of a claim's ``index``-th device: ``exosuit.dev/<class>=<name>``."""
    return f"{CDI_VENDOR}/{cdi_class(device_type)}={claim_uuid}-{index}"


def bump(conn: Connection, hostnames: Collection[str] | None) -> dict[str, int]:
    """A new desired-state generation for each of ``hostnames`` (every host for None):
    their generations now. Hosts the database does not know are left out."""
    if hostnames is not None and not hostnames:
        return {}
    stmt, select = _Q_BUMP, sa.select(hosts.c.hostname, hosts.c.desired_generation)
    if hostnames is not None:
        names = sorted(set(hostnames))
        stmt = stmt.where(hosts.c.hostname.in_(names))
        select = select.where(hosts.c.hostname.in_(names))
    conn.execute(stmt)
    changes.mark(conn, changes.HOST_REPORTS)
    return {r.hostname: int(r.desired_generation) for r in conn.execute(select)}


def desired_state(conn: Connection, hostname: str) -> dict[str, Any]:
    """The host's desired state (the module docstring's shape); generation 0 and
    nothing to do for a host never seen."""
    row = conn.execute(_Q_HOST_STATE, {"p_hostname": hostname}).first()
    if row is None:
        return {
            "generation": 0,
            "programs": [],
            "discovery": None,
            "drivers": {},
            "activations": [],
            "partitions": [],
            "slices": [],
            "containers": [],
        }
    params = {"p_hostname": hostname}
    discovery = None
    if row.discovering:
        found = conn.execute(_Q_DISCOVERY, params).first()
        if found is not None:
            discovery = {"generation": int(found.generation), "spread": float(found.spread)}
    return {
        "generation": int(row.desired_generation or 0),
        "programs": programs.running_programs(conn, hostname) if row.busy else [],
        "discovery": discovery,
        "drivers": _overrides(conn, hostname) if row.overridden else {},
        "activations": _activations(conn, hostname) if row.activating else [],
        "partitions": _partitions(conn, hostname) if row.partitioning else [],
        "slices": _slices(conn, hostname) if row.slicing else [],
        "containers": _containers(conn, hostname) if row.containing else [],
    }


def _controlpath_id(row: sa.Row[*tuple[Any, ...]]) -> dict[str, Any]:
    """The device's control-path id as the agent's drivers report it."""
    return {
        "cpid_type": row.cpid_type,
        "cpid_info": json.loads(row.cpid_info) if row.cpid_info else {},
    }


def _overrides(conn: Connection, hostname: str) -> dict[str, dict[str, Any]]:
    """The operator's driver overrides for the host: its own rows, else the fleet's."""
    fleet: dict[str, dict[str, Any]] = {}
    own: dict[str, dict[str, Any]] = {}
    for r in conn.execute(_Q_OVERRIDES, {"p_hostname": hostname}):
        override = {
            "enabled": r.desired_enabled,
            "config": json.loads(r.desired_config) if r.desired_config else {},
        }
        (fleet if r.hostname == FLEET else own)[r.name] = override
    return {**fleet, **own}


def _activations(conn: Connection, hostname: str) -> list[dict[str, Any]]:
    return [
        {
            "device": r.uuid,
            "controlpath_id": _controlpath_id(r),
            "driver": r.driver_name,
            "action": PENDING[r.activation],
            "generation": int(r.activation_generation or 0),
        }
        for r in conn.execute(_Q_ACTIVATIONS, {"p_hostname": hostname})
    ]


def _partitions(conn: Connection, hostname: str) -> list[dict[str, Any]]:
    return [
        {
            "device": r.uuid,
            "controlpath_id": _controlpath_id(r),
            "driver": r.driver,
            "layout": json.loads(r.partition_layout) if r.partition_layout else {},
            "generation": int(r.partition_generation or 0),
        }
        for r in conn.execute(_Q_PARTITIONS, {"p_hostname": hostname})
    ]


def _slices(conn: Connection, hostname: str) -> list[dict[str, Any]]:
    params = {"p_hostname": hostname}
    held: dict[int, list[dict[str, Any]]] = {}
    for r in conn.execute(_Q_HELD_SLICES, params):
        held.setdefault(r.device_id, []).append(
            {
                "arq": r.uuid,
                "state": r.state,
                "attach_handle": {
                    "type": r.attach_type,
                    "info": json.loads(r.attach_info) if r.attach_info else {},
                },
            }
        )
    return [
        {
            "device": r.uuid,
            "controlpath_id": _controlpath_id(r),
            "driver": r.driver,
            "layout": json.loads(r.partition_layout) if r.partition_layout else {},
            "held": held.get(r.id, []),
        }
        for r in conn.execute(_Q_SLICING, params)
    ]


def _containers(conn: Connection, hostname: str) -> list[dict[str, Any]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for r in conn.execute(_Q_CONTAINERS, {"p_hostname": hostname}):
        devices = found.setdefault(r.claim_uuid, [])
        devices.append(
            {
                "name": f"{r.claim_uuid}-{len(devices)}",
                "class": cdi_class(r.type),
                "device": r.device_uuid,
                "controlpath_id": _controlpath_id(r),
                "driver": r.driver,
                "attach_handle": {
                    "type": r.attach_type,
                    "info": json.loads(r.attach_info) if r.attach_info else {},
                },
            }
        )
    return [{"claim": claim, "devices": devices} for claim, devices in found.items()]
