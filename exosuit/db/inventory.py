"""Apply a host's inventory snapshot: the difference, in one transaction.

Identity: a device by its control-path id within its host, a deployable by its
name within its device (or, renamed, by its attach handles), an attribute by its
key, an attach handle by its attach info. A deployable that is matched keeps its
uuid and rp_uuid: only new ones get an rp_uuid derived from host, identity and name.
An attach handle held by an ARQ is never deleted: one that disappears while held
is marked ``lost`` (never bound again) and deleted when released; a device that
disappears while one of its handles is held is marked ``lost`` (with the reason)
and deleted when the last handle is released.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, CursorResult

from exosuit import exceptions
from exosuit.db import audit, bulk, changes, discoveries, drivers, health, models
from exosuit.db.desired_state import READY
from exosuit.db.placement import enqueue_sync
from exosuit.db.statements import insert_if_absent
from exosuit.schemas import canonical_json, device_identity, snapshot_errors

__all__ = [
    "ALL_READY",
    "ApplyResult",
    "HostReport",
    "NewDevices",
    "apply_snapshot",
    "host_report",
    "host_report_versioned",
    "rp_uuid",
    "touch_host",
]

dev = models.devices
cpid = models.controlpath_ids
dep = models.deployables
attr = models.attributes
ah = models.attach_handles
arq = models.accelerator_requests
hosts = models.hosts
svc = models.device_services

# Resource provider UUIDs derive from (host, device identity, deployable name):
# the same across restarts and re-discovery.
_RP_NAMESPACE = uuidlib.UUID("6f0b3a52-4c55-4f4e-9a39-4d2f6b3c8e11")

_DEVICE_FIELDS = (
    "type",
    "vendor",
    "model",
    "driver_name",
    "plugin",
    "pci_address",
    "numa_node",
    "pcie_root",
    "iommu_group",
    "firmware_version",
)


# A device's services' insert, built once (building one and computing its cache key
# cost about as much as running it); a new host's rows go through exosuit/db/bulk.py.
_INSERT = {svc: sa.insert(svc)}
_HOST_DEVICES = sa.select(dev).where(dev.c.hostname == sa.bindparam("hostname"))
_UPDATE_HOST = (
    sa.update(hosts)
    .where(hosts.c.id == sa.bindparam("host_id"))
    .values(
        {
            c: sa.bindparam(c)
            for c in (
                "snapshot_hash",
                "last_report_at",
                "agent_version",
                "driver_errors",
                "usage",
                "usage_at",
                "updated_at",
            )
        }
    )
)
# What a host's known devices hold, each in one statement (_Applier._read_under).
_OF_HOST = dev.c.hostname == sa.bindparam("hostname")
_HOST_CPIDS = (
    sa.select(cpid.c.device_id, cpid.c.id)
    .join(dev, dev.c.id == cpid.c.device_id)
    .where(_OF_HOST)
    .order_by(cpid.c.id)
)
_HOST_DEPLOYABLES = sa.select(dep).join(dev, dev.c.id == dep.c.device_id).where(_OF_HOST)
_HOST_ATTRIBUTES = (
    sa.select(attr)
    .join(dep, dep.c.id == attr.c.deployable_id)
    .join(dev, dev.c.id == dep.c.device_id)
    .where(_OF_HOST, attr.c.source == "agent")
)
_HOST_HANDLES = (
    sa.select(ah)
    .join(dep, dep.c.id == ah.c.deployable_id)
    .join(dev, dev.c.id == dep.c.device_id)
    .where(_OF_HOST)
)


@dataclasses.dataclass
class ApplyResult:
    changed: bool
    created: int = 0
    updated: int = 0
    deleted: int = 0
    lost: int = 0


@dataclasses.dataclass(frozen=True)
class NewDevices:
    """How a device reported for the first time starts (doc/devices.md): ``activation``
    (``[inventory] new_device_activation``), but ready for the driver plug-ins of
    ``ready_drivers`` (the device's ``plugin``; its ``driver_name`` when an older agent
    did not say which plug-in found it)."""

    activation: str = READY
    ready_drivers: frozenset[str] = frozenset()

    def of(self, device: Mapping[str, Any]) -> str:
        plugin = device.get("plugin") or device.get("driver_name")
        return READY if plugin in self.ready_drivers else self.activation


# Every new device ready: how devices started before activation existed (callers that
# seed a database; the API passes the [inventory] options).
ALL_READY = NewDevices()


def rp_uuid(hostname: str, identity: str, deployable_name: str) -> str:
    return str(uuidlib.uuid5(_RP_NAMESPACE, f"{hostname}\n{identity}\n{deployable_name}"))


# Built once: every unchanged agent report runs it (building it cost a third of
# the request's CPU).
_HOST_REPORT = sa.select(
    hosts.c.snapshot_hash,
    hosts.c.last_report_at,
    hosts.c.observed_generation,
    hosts.c.desired_generation,
).where(hosts.c.hostname == sa.bindparam("hostname"))
_TOUCH_HOST = (
    sa.update(hosts)
    .where(
        hosts.c.hostname == sa.bindparam("p_hostname"),
        hosts.c.snapshot_hash == sa.bindparam("p_hash"),
        hosts.c.last_report_at < sa.bindparam("p_before"),
    )
    .values(
        last_report_at=sa.bindparam("p_now"),
        usage=sa.bindparam("p_usage"),
        usage_at=sa.bindparam("p_now"),
    )
)
_OBSERVE = (
    sa.update(hosts)
    .where(
        hosts.c.hostname == sa.bindparam("p_hostname"),
        sa.or_(
            hosts.c.observed_generation.is_(None),
            hosts.c.observed_generation < sa.bindparam("p_generation"),
        ),
    )
    .values(observed_generation=sa.bindparam("p_generation"), observed_at=sa.bindparam("p_now"))
)


@dataclasses.dataclass(frozen=True)
class HostReport:
    """The last snapshot applied for a host, when the host last reported, the
    desired-state generation it last said it applied, and its desired state's
    generation now (0: never bumped)."""

    snapshot_hash: str | None
    last_report_at: dt.datetime | None
    observed_generation: int | None = None
    desired_generation: int = 0

    def moved(self, generation: int | None) -> bool:
        """Whether a report's ``observed_generation`` is news."""
        return generation is not None and (
            self.observed_generation is None or generation > self.observed_generation
        )


def host_report(conn: Connection, hostname: str) -> HostReport | None:
    """One indexed read (every report runs it); None for a host never seen."""
    row = conn.execute(_HOST_REPORT, {"hostname": hostname}).first()
    if row is None:
        return None
    return HostReport(
        row.snapshot_hash, row.last_report_at, row.observed_generation, int(row[3] or 0)
    )


# The same read with the version of what it answers from (exosuit/db/changes.py), in one
# statement: one snapshot, so the version is never newer than the row.
_HOST_REPORT_VERSIONED = _HOST_REPORT.add_columns(
    changes.version_query(changes.HOST_REPORTS).label("version")
)


def host_report_versioned(conn: Connection, hostname: str) -> tuple[int, HostReport] | None:
    """``host_report`` and the ``HOST_REPORTS`` version it was read at, in one indexed
    read; None for a host never seen."""
    row = conn.execute(_HOST_REPORT_VERSIONED, {"hostname": hostname}).first()
    if row is None:
        return None
    report = HostReport(
        row.snapshot_hash, row.last_report_at, row.observed_generation, int(row[3] or 0)
    )
    return int(row.version), report


def _usage_json(usage: dict[str, Any] | None) -> str | None:
    return None if not usage else canonical_json(usage)


def touch_host(
    conn: Connection,
    hostname: str,
    snapshot_hash: str,
    resolution: float,
    *,
    usage: dict[str, Any] | None = None,
    observed_generation: int | None = None,
) -> bool:
    """An unchanged report: move the host's ``last_report_at`` to now, with the report's
    ``usage``, if it is older than ``resolution`` seconds (so a quiet host does not look
    stale and its usage is at most that old, at one write per ``resolution`` per host
    rather than one per report); and record ``observed_generation`` if it moved. Each a
    compare-and-set: of several API processes, one writes. Whether the report time
    moved."""
    now = models.utcnow()
    if observed_generation is not None:
        _observe(conn, hostname, observed_generation, now)
    params = {
        "p_hostname": hostname,
        "p_hash": snapshot_hash,
        "p_now": now,
        "p_before": now - dt.timedelta(seconds=resolution),
        "p_usage": _usage_json(usage),
    }
    return bool(conn.execute(_TOUCH_HOST, params).rowcount)


def _observe(conn: Connection, hostname: str, generation: int, now: dt.datetime) -> None:
    """The agent applied the desired state of ``generation`` (its driver overrides, and the
    discovery asked, if any): recorded if it moved, and the discoveries it answers
    received."""
    params = {"p_hostname": hostname, "p_generation": generation, "p_now": now}
    if conn.execute(_OBSERVE, params).rowcount:
        discoveries.mark_received(conn, hostname, generation, now)


# A device's fields an audit record of its appearance or disappearance names.
_BRIEF = ("identity", "type", "vendor", "model", "driver_name", "status", "activation", "presence")


def _device_values(device: dict[str, Any]) -> dict[str, Any]:
    values = {f: device.get(f) for f in _DEVICE_FIELDS}
    values["std_board_info"] = canonical_json(device.get("std_board_info") or {})
    values["vendor_board_info"] = canonical_json(device.get("vendor_board_info") or {})
    if device.get("missing_since"):
        # The agent no longer finds it but keeps it for its removal grace.
        values["presence"] = "missing"
        values["presence_reason"] = (
            f"not found by the host's discovery since {device['missing_since']}; removed "
            "when the agent's removal grace ends unless it comes back"
        )
    else:
        values["presence"] = "present"
        values["presence_reason"] = None
    return values


_UPDATE_SERVICE = (
    sa.update(svc)
    .where(svc.c.id == sa.bindparam("p_id"))
    .values(enabled=sa.bindparam("p_enabled"), details=sa.bindparam("p_details"))
)


# Where the device sits, as its driver reported it: also an attribute of each of its
# deployables (source agent, where known), so that Cyborg's attribute API and a
# deployable's attributes show it (doc/devices.md, "Topology").
TOPOLOGY_ATTRIBUTES = ("numa_node", "pcie_root", "iommu_group")


def _with_topology(device: dict[str, Any]) -> dict[str, Any]:
    """The device with its known topology fields among each deployable's attributes (a
    driver's own attribute of one of those names gives way)."""
    known = [
        {"key": key, "value": str(device[key])}
        for key in TOPOLOGY_ATTRIBUTES
        if device.get(key) is not None
    ]
    if not known:
        return device
    deployables = [
        {
            **deployable,
            "attributes": [
                a for a in deployable["attributes"] if a["key"] not in TOPOLOGY_ATTRIBUTES
            ]
            + known,
        }
        for deployable in device["deployables"]
    ]
    return {**device, "deployables": deployables}


def _services(device: dict[str, Any]) -> list[dict[str, Any]]:
    """The device's services as reported, the first of each (kind, name)."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for service in device.get("services") or ():
        seen.setdefault((service["kind"], service["name"]), service)
    return list(seen.values())


def _service_row(device_id: int, service: dict[str, Any]) -> dict[str, Any]:
    return {
        "device_id": device_id,
        "kind": service["kind"],
        "name": service["name"],
        "enabled": bool(service["enabled"]),
        "details": canonical_json(service.get("details") or {}),
    }


def _inserted_id(result: CursorResult[*tuple[Any, ...]]) -> int:
    """The primary key of the row a single-row INSERT inserted."""
    key = result.inserted_primary_key
    assert key is not None  # None only for an INSERT of no row
    inserted_id: int = key[0]
    return inserted_id


class _Applier:
    def __init__(
        self,
        conn: Connection,
        hostname: str,
        now: dt.datetime,
        new_devices: NewDevices,
        drained: bool = False,
    ) -> None:
        self.conn = conn
        self.hostname = hostname
        self.now = now
        self.new_devices = new_devices
        # A drained host's new devices start maintaining too (exosuit/db/drain.py).
        self.new_status = "maintaining" if drained else "enabled"
        self.result = ApplyResult(changed=True)
        # device id → the services reported (existing devices; new ones are inserted)
        self.services: dict[int, list[dict[str, Any]]] = {}
        # The audit records of this report, by action: written at the end, in bulk.
        self.audit: dict[str, list[audit.Change]] = {}
        # What the known devices hold, read at once (_read_under): device id → its
        # control-path id, device id → deployables, deployable id → the agent's attributes,
        # deployable id → attach handles.
        self.cpids: dict[int, int] = {}
        self.deployables: dict[int, list[sa.Row[*tuple[Any, ...]]]] = {}
        self.attributes: dict[int, list[sa.Row[*tuple[Any, ...]]]] = {}
        self.handles: dict[int, list[sa.Row[*tuple[Any, ...]]]] = {}

    def _audit(self, action: str, uuid: str, before: Any, after: Any) -> None:
        self.audit.setdefault(action, []).append(audit.Change(uuid, before, after, self.hostname))

    # -- devices ---------------------------------------------------------------------
    def apply(self, devices: list[dict[str, Any]]) -> None:
        existing = {
            row.identity: row
            for row in self.conn.execute(_HOST_DEVICES, {"hostname": self.hostname})
        }
        seen = set()
        new, updates = [], []
        for device in map(_with_topology, devices):
            identity = device_identity(device["controlpath_id"])
            if identity in seen:
                continue  # a driver reported one device twice: the first wins
            seen.add(identity)
            row = existing.get(identity)
            if row is None:
                new.append((identity, device))
            else:
                updates.append((row, device, identity))
        if updates:
            self._read_under(updates)
        for row, device, identity in updates:
            self._update_device(row, device, identity)
        for identity, row in existing.items():
            if identity not in seen:
                self._remove_device(row)
        if new:
            self._create_devices(new)
        if self.services:
            self._sync_services()
        for action, recorded in self.audit.items():
            audit.record_many(self.conn, action, "device", recorded)

    def _read_under(self, updates: list[tuple[sa.Row[*tuple[Any, ...]], Any, str]]) -> None:
        """What the host's known devices hold (control-path ids, deployables, the agent's
        attributes, attach handles), read in four statements whatever their number,
        before their differences are applied."""
        params = {"hostname": self.hostname}
        for device_id, cpid_id in self.conn.execute(_HOST_CPIDS, params):
            self.cpids.setdefault(device_id, cpid_id)  # the first, by id
        for row in self.conn.execute(_HOST_DEPLOYABLES, params):
            self.deployables.setdefault(row.device_id, []).append(row)
        for row in self.conn.execute(_HOST_ATTRIBUTES, params):
            self.attributes.setdefault(row.deployable_id, []).append(row)
        for row in self.conn.execute(_HOST_HANDLES, params):
            self.handles.setdefault(row.deployable_id, []).append(row)

    def _create_devices(self, new: list[tuple[str, dict[str, Any]]]) -> None:
        """Insert new devices and everything under them: a few statements per table,
        whatever the number of devices (a booting fleet reports many at once)."""
        device_rows = [
            {
                "uuid": str(uuidlib.uuid4()),
                "hostname": self.hostname,
                "identity": identity,
                "status": self.new_status,
                "activation": self.new_devices.of(device),
                "created_at": self.now,
                **_device_values(device),
                **health.reported(None, device, self.now),
            }
            for identity, device in new
        ]
        device_ids = bulk.insert_rows(self.conn, dev, device_rows, ids=True)
        for row, (_, device) in zip(device_rows, new, strict=True):
            after = {k: row[k] for k in _BRIEF if k in row}
            after["deployables"] = [d["name"] for d in device["deployables"]]
            self._audit("appear", row["uuid"], None, after)
            held = health.hold_record(row)  # reported unhealthy from the first: held back
            if held is not None:
                self._audit("health.hold", row["uuid"], *held)
        service_rows = [
            _service_row(device_id, service)
            for device_id, (_, device) in zip(device_ids, new, strict=True)
            for service in _services(device)
        ]
        bulk.insert_rows(self.conn, svc, service_rows)
        cpid_rows = [
            {
                "uuid": str(uuidlib.uuid4()),
                "device_id": device_id,
                "cpid_type": device["controlpath_id"]["cpid_type"],
                "cpid_info": canonical_json(device["controlpath_id"]["cpid_info"]),
                "created_at": self.now,
            }
            for device_id, (_, device) in zip(device_ids, new, strict=True)
        ]
        cpid_ids = bulk.insert_rows(self.conn, cpid, cpid_rows, ids=True)
        deployable_rows, owners = [], []
        for device_id, cpid_id, (identity, device) in zip(device_ids, cpid_ids, new, strict=True):
            for deployable in device["deployables"]:
                deployable_rows.append(
                    {
                        "uuid": str(uuidlib.uuid4()),
                        "name": deployable["name"],
                        "num_accelerators": deployable["num_accelerators"],
                        "device_id": device_id,
                        "rp_uuid": rp_uuid(self.hostname, identity, deployable["name"]),
                        "driver_name": deployable.get("driver_name"),
                        "created_at": self.now,
                    }
                )
                owners.append((cpid_id, deployable))
        deployable_ids = bulk.insert_rows(self.conn, dep, deployable_rows, ids=True)
        if deployable_rows:
            changes.mark(self.conn, changes.DEPLOYABLES)  # their attributes come with them
        attribute_rows, handle_rows = [], []
        for deployable_id, (cpid_id, deployable) in zip(deployable_ids, owners, strict=True):
            for item in deployable["attributes"]:
                attribute_rows.append(
                    {
                        "uuid": str(uuidlib.uuid4()),
                        "deployable_id": deployable_id,
                        "key": item["key"],
                        "value": item["value"],
                        "source": "agent",
                        "created_at": self.now,
                    }
                )
            infos = set()
            for handle in deployable["attach_handles"]:
                info = canonical_json(handle["attach_info"])
                if info in infos:
                    continue
                infos.add(info)
                handle_rows.append(
                    {
                        "uuid": str(uuidlib.uuid4()),
                        "deployable_id": deployable_id,
                        "cpid_id": cpid_id,
                        "in_use": False,
                        "attach_type": handle["attach_type"],
                        "attach_info": info,
                        "created_at": self.now,
                    }
                )
        bulk.insert_rows(self.conn, attr, attribute_rows)
        bulk.insert_rows(self.conn, ah, handle_rows)
        self.result.created += len(new)

    def _insert_cpid(self, device_id: int, controlpath_id: dict[str, Any]) -> int:
        return _inserted_id(
            self.conn.execute(
                sa.insert(cpid).values(
                    uuid=str(uuidlib.uuid4()),
                    device_id=device_id,
                    cpid_type=controlpath_id["cpid_type"],
                    cpid_info=canonical_json(controlpath_id["cpid_info"]),
                    created_at=self.now,
                )
            )
        )

    def _update_device(
        self, row: sa.Row[*tuple[Any, ...]], device: dict[str, Any], identity: str
    ) -> None:
        self.services[row.id] = _services(device)
        values = _device_values(device)
        changed = {k: v for k, v in values.items() if getattr(row, k) != v}
        reported = health.reported(row, device, self.now)
        changed.update(reported)
        held = health.hold_record(reported, row)
        if held is not None:
            self._audit("health.hold", row.uuid, *held)
        if changed:
            before = {k: getattr(row, k) for k in changed}
            self._audit("update", row.uuid, before, dict(changed))
            changed["updated_at"] = self.now
            self.conn.execute(sa.update(dev).where(dev.c.id == row.id).values(**changed))
            self.result.updated += 1
        cpid_id = self.cpids.get(row.id)
        if cpid_id is None:
            cpid_id = self._insert_cpid(row.id, device["controlpath_id"])
        existing = {d.name: d for d in self.deployables.get(row.id, ())}
        renamed = self._renamed(existing, device["deployables"])
        names = {current.name for current in renamed.values()}
        for deployable in device["deployables"]:
            names.add(deployable["name"])
            current = existing.get(deployable["name"]) or renamed.get(deployable["name"])
            if current is None:
                self._create_deployable(row.id, cpid_id, identity, deployable)
            else:
                self._update_deployable(current, cpid_id, deployable)
        for name, current in existing.items():
            if name not in names:
                self._remove_deployable(current)

    def _renamed(
        self, existing: dict[str, sa.Row[*tuple[Any, ...]]], wanted: list[dict[str, Any]]
    ) -> dict[str, sa.Row[*tuple[Any, ...]]]:
        """Reported deployables under a new name that hold the attach handles of one the
        report no longer names: the same deployable, renamed (rows imported from Cyborg
        keep Cyborg's names, which Exosuit's drivers may spell otherwise). Each keeps
        its uuid and rp_uuid and takes the new name. New name → the existing row."""
        reported = {d["name"] for d in wanted}
        old = {r.id: r for name, r in existing.items() if name not in reported}
        new = [d for d in wanted if d["name"] not in existing]
        if not old or not new:
            return {}  # the common case: no query at all
        infos: dict[int, set[str]] = {i: set() for i in old}
        for handle in self.conn.execute(
            sa.select(ah.c.deployable_id, ah.c.attach_info).where(ah.c.deployable_id.in_(old))
        ):
            infos[handle.deployable_id].add(handle.attach_info)
        matched = {}
        for deployable in new:
            reported_infos = {
                canonical_json(h["attach_info"]) for h in deployable["attach_handles"]
            }
            same = [r for r in old.values() if infos[r.id] & reported_infos]
            if len(same) != 1:
                continue  # none, or ambiguous: a new deployable
            current = same[0]
            del old[current.id]
            self.conn.execute(
                sa.update(dep)
                .where(dep.c.id == current.id)
                .values(name=deployable["name"], updated_at=self.now)
            )
            changes.mark(self.conn, changes.DEPLOYABLES)
            self.result.updated += 1
            matched[deployable["name"]] = current
        return matched

    def _held_handles(self, device_id: int) -> Sequence[sa.Row[*tuple[Any, ...]]]:
        return self.conn.execute(
            sa.select(ah.c.uuid, arq.c.uuid.label("arq_uuid"), arq.c.instance_uuid)
            .select_from(
                ah.join(dep, ah.c.deployable_id == dep.c.id).join(
                    arq, arq.c.attach_handle_id == ah.c.id
                )
            )
            .where(dep.c.device_id == device_id)
        ).all()

    def _lock_handles(self, where: sa.ColumnElement[bool]) -> None:
        # Lock the attach handles before deciding whether any is held: a bind that
        # took one concurrently has then committed (binds skip locked handles), so
        # the check sees it, and no handle is deleted under an ARQ that holds it.
        self.conn.execute(sa.select(ah.c.id).where(where).with_for_update())

    def _remove_device(self, row: sa.Row[*tuple[Any, ...]]) -> None:
        self._lock_handles(
            ah.c.deployable_id.in_(sa.select(dep.c.id).where(dep.c.device_id == row.id))
        )
        held = self._held_handles(row.id)
        if not held:
            self.conn.execute(
                sa.update(arq)
                .where(
                    arq.c.deployable_id.in_(sa.select(dep.c.id).where(dep.c.device_id == row.id))
                )
                .values(deployable_id=None)
            )
            self.conn.execute(sa.delete(dev).where(dev.c.id == row.id))
            changes.mark(self.conn, changes.DEPLOYABLES)  # its deployables go with it
            self.result.deleted += 1
            before = {k: getattr(row, k) for k in _BRIEF}
            self._audit("disappear", row.uuid, before, None)
            return
        if row.presence == "lost":
            return
        holders = ", ".join(
            f"attach handle {h.uuid} held by ARQ {h.arq_uuid}"
            + (f" (instance {h.instance_uuid})" if h.instance_uuid else "")
            for h in held
        )
        reason = (
            f"missing from the host's report of {self.now.isoformat()}Z while in use: "
            f"{holders}; it is deleted once released"
        )
        self.conn.execute(
            sa.update(dev)
            .where(dev.c.id == row.id)
            .values(presence="lost", presence_reason=reason, updated_at=self.now)
        )
        self.result.lost += 1
        after = {"presence": "lost", "presence_reason": reason}
        self._audit("lost", row.uuid, {"presence": row.presence}, after)

    # -- services --------------------------------------------------------------------
    def _sync_services(self) -> None:
        """Make each existing device's services those reported, matched by (kind, name):
        a service that stays keeps its row (and its id, a list's marker)."""
        existing: dict[int, dict[tuple[str, str], sa.Row[*tuple[Any, ...]]]] = {}
        for stored in self.conn.execute(
            sa.select(svc)
            .join(dev, dev.c.id == svc.c.device_id)
            .where(dev.c.hostname == self.hostname)
        ):
            existing.setdefault(stored.device_id, {})[(stored.kind, stored.name)] = stored
        inserts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        gone: list[int] = []
        for device_id, wanted in self.services.items():
            current = existing.get(device_id, {})
            for service in wanted:
                key = (service["kind"], service["name"])
                row = current.pop(key) if key in current else None
                values = _service_row(device_id, service)
                if row is None:
                    inserts.append(values)
                elif (row.enabled, row.details) != (values["enabled"], values["details"]):
                    updates.append(
                        {
                            "p_id": row.id,
                            "p_enabled": values["enabled"],
                            "p_details": values["details"],
                        }
                    )
            gone.extend(r.id for r in current.values())
        if gone:
            self.conn.execute(sa.delete(svc).where(svc.c.id.in_(gone)))
        if updates:
            self.conn.execute(_UPDATE_SERVICE, updates)
        if inserts:
            self.conn.execute(_INSERT[svc], inserts)

    # -- deployables -----------------------------------------------------------------
    def _create_deployable(
        self, device_id: int, cpid_id: int, identity: str, deployable: dict[str, Any]
    ) -> None:
        deployable_id = _inserted_id(
            self.conn.execute(
                sa.insert(dep).values(
                    uuid=str(uuidlib.uuid4()),
                    name=deployable["name"],
                    num_accelerators=deployable["num_accelerators"],
                    device_id=device_id,
                    rp_uuid=rp_uuid(self.hostname, identity, deployable["name"]),
                    driver_name=deployable.get("driver_name"),
                    created_at=self.now,
                )
            )
        )
        changes.mark(self.conn, changes.DEPLOYABLES)
        self._sync_attributes(deployable_id, deployable["attributes"])
        self._sync_handles(deployable_id, cpid_id, deployable["attach_handles"])

    def _update_deployable(
        self, current: sa.Row[*tuple[Any, ...]], cpid_id: int, deployable: dict[str, Any]
    ) -> None:
        values: dict[str, Any] = {}
        if current.num_accelerators != deployable["num_accelerators"]:
            values["num_accelerators"] = deployable["num_accelerators"]
        if current.driver_name != deployable.get("driver_name"):
            values["driver_name"] = deployable.get("driver_name")
        if values:
            self.conn.execute(
                sa.update(dep).where(dep.c.id == current.id).values(updated_at=self.now, **values)
            )
            changes.mark(self.conn, changes.DEPLOYABLES)
            self.result.updated += 1
        self._sync_attributes(current.id, deployable["attributes"])
        self._sync_handles(current.id, cpid_id, deployable["attach_handles"])

    def _remove_deployable(self, current: sa.Row[*tuple[Any, ...]]) -> None:
        self._lock_handles(ah.c.deployable_id == current.id)
        held = self.conn.execute(
            sa.select(sa.func.count())
            .select_from(ah)
            .where(ah.c.deployable_id == current.id, ah.c.in_use.is_(True))
        ).scalar()
        if held:
            # Keep it (and the handles held, marked lost) until released; free handles go.
            self._remove_handles(ah.c.deployable_id == current.id)
            return
        self.conn.execute(
            sa.update(arq).where(arq.c.deployable_id == current.id).values(deployable_id=None)
        )
        self.conn.execute(sa.delete(dep).where(dep.c.id == current.id))
        changes.mark(self.conn, changes.DEPLOYABLES)
        self.result.deleted += 1

    # -- attributes and attach handles -----------------------------------------------
    def _sync_attributes(self, deployable_id: int, wanted: list[dict[str, str]]) -> None:
        existing = {a.key: a for a in self.attributes.get(deployable_id, ())}
        keys = set()
        for item in wanted:
            keys.add(item["key"])
            current = existing.get(item["key"])
            if current is None:
                self.conn.execute(
                    sa.insert(attr).values(
                        uuid=str(uuidlib.uuid4()),
                        deployable_id=deployable_id,
                        key=item["key"],
                        value=item["value"],
                        source="agent",
                        created_at=self.now,
                    )
                )
                changes.mark(self.conn, changes.DEPLOYABLES)
            elif current.value != item["value"]:
                self.conn.execute(
                    sa.update(attr)
                    .where(attr.c.id == current.id)
                    .values(value=item["value"], updated_at=self.now)
                )
                changes.mark(self.conn, changes.DEPLOYABLES)
        gone = [a.id for k, a in existing.items() if k not in keys]
        if gone:
            self.conn.execute(sa.delete(attr).where(attr.c.id.in_(gone)))
            changes.mark(self.conn, changes.DEPLOYABLES)

    def _sync_handles(self, deployable_id: int, cpid_id: int, wanted: list[dict[str, Any]]) -> None:
        existing = {h.attach_info: h for h in self.handles.get(deployable_id, ())}
        infos = set()
        for handle in wanted:
            info = canonical_json(handle["attach_info"])
            if info in infos:
                continue
            infos.add(info)
            current = existing.get(info)
            if current is None:
                self.conn.execute(
                    sa.insert(ah).values(
                        uuid=str(uuidlib.uuid4()),
                        deployable_id=deployable_id,
                        cpid_id=cpid_id,
                        in_use=False,
                        attach_type=handle["attach_type"],
                        attach_info=info,
                        created_at=self.now,
                    )
                )
            elif (current.attach_type, current.presence) != (handle["attach_type"], "present"):
                self.conn.execute(
                    sa.update(ah)
                    .where(ah.c.id == current.id)
                    .values(
                        attach_type=handle["attach_type"], presence="present", updated_at=self.now
                    )
                )
        gone = [
            h.id
            for i, h in existing.items()
            if i not in infos and (not h.in_use or h.presence != "lost")
        ]
        if gone:
            self._remove_handles(ah.c.id.in_(gone))

    def _remove_handles(self, where: sa.ColumnElement[bool]) -> None:
        """Delete the free handles the host no longer reports; mark the held ones lost
        (never bound again; deleted when released). Locked first, so that a bind
        cannot take one between the two statements."""
        self._lock_handles(where)
        self.conn.execute(sa.delete(ah).where(where, ah.c.in_use.is_(False)))
        self.conn.execute(
            sa.update(ah)
            .where(where, ah.c.in_use.is_(True), ah.c.presence == "present")
            .values(presence="lost", updated_at=self.now)
        )


def apply_snapshot(
    conn: Connection,
    hostname: str,
    snapshot: dict[str, Any],
    *,
    new_devices: NewDevices = ALL_READY,
    expect_new: bool = False,
) -> ApplyResult:
    """Make the database equal to ``snapshot`` for ``hostname``: its devices (with their
    services), its drivers (``drivers``, when it has them), the generation its agent
    observed and its usage.

    Returns ``changed=False`` without writing anything but the observed generation
    when the snapshot's hash equals the last one applied for this host. Raises
    InventoryInvalid, before anything is written, for a snapshot that cannot be
    applied (``snapshot_errors``: two deployables of one device with one name).
    ``new_devices``: how the devices reported for the first time start.
    ``expect_new``: the caller found no row of the host (a first report): its row is
    inserted first, not looked for first (the same outcome, a round trip or two fewer).
    """
    errors = snapshot_errors(snapshot.get("devices") or [])
    if errors:
        raise exceptions.InventoryInvalid(hostname=hostname, reason="; ".join(errors))
    now = models.utcnow()
    host, new_host = _lock_host(conn, hostname, now, expect_new)
    observed = snapshot.get("observed_generation")
    if observed is not None:
        _observe(conn, hostname, observed, now)
    if host.snapshot_hash == snapshot["hash"]:
        return ApplyResult(changed=False)
    applier = _Applier(conn, hostname, now, new_devices, host.drained_at is not None)
    applier.apply(snapshot["devices"])
    if "drivers" in snapshot:
        drivers.record_reported(conn, hostname, snapshot["drivers"], now)
    values = {
        "snapshot_hash": snapshot["hash"],
        "last_report_at": now,
        "agent_version": snapshot.get("agent_version"),
        "driver_errors": json.dumps(snapshot.get("driver_errors") or []),
        "usage": _usage_json(snapshot.get("usage")),
        "usage_at": now,
    }
    conn.execute(_UPDATE_HOST, {"host_id": host.id, "updated_at": now, **values})
    changes.mark(conn, changes.HOST_REPORTS)  # its snapshot hash
    # The host's providers in Placement follow (exosuit/placement), in this transaction.
    # A host first seen in this transaction has no pending sync to coalesce with (a
    # duplicate would only cost one more sync run).
    enqueue_sync(conn, hostname, coalesce=not new_host)
    return applier.result


def _lock_host(
    conn: Connection, hostname: str, now: dt.datetime, expect_new: bool = False
) -> tuple[sa.Row[*tuple[Any, ...]], bool]:
    """The host's row, locked, created first for a new host; and whether this
    transaction inserted it.

    Reports of one host are applied one at a time: two at once would both insert
    what is new (a device twice, or an attach handle twice). The second waits
    here and then sees what the first committed. A new host's row is inserted
    with "on conflict do nothing" (no savepoint: two round trips fewer per host
    in a boot storm); a concurrent first report of the same host waits on the
    unique index, then finds the row. ``expect_new``: try the insert first, which
    returns the row it inserted (locked until the commit) where the database has
    RETURNING of such an insert (PostgreSQL, SQLite): one round trip for a new host.
    """
    if not expect_new:
        host = conn.execute(_LOCK_HOST, {"hostname": hostname}).first()
        if host is not None:
            return host, False
    params = {"hostname": hostname, "created_at": now}
    returning = _insert_host_returning(conn.dialect.name)
    if returning is not None:
        inserted = conn.execute(returning, params).first()
        changes.mark(conn, changes.HOST_REPORTS)  # a new host's row (or none: it existed)
        if inserted is not None:
            return inserted, True
        return conn.execute(_LOCK_HOST, {"hostname": hostname}).one(), False
    if expect_new:  # no RETURNING here: look as before (a report racing the first one)
        host = conn.execute(_LOCK_HOST, {"hostname": hostname}).first()
        if host is not None:
            return host, False
    conn.execute(
        insert_if_absent(conn.dialect.name, hosts, ("hostname", "created_at"), "hostname"), params
    )
    changes.mark(conn, changes.HOST_REPORTS)  # a new host's row
    # The row exists now: inserted here, or committed by the insert waited for.
    return conn.execute(_LOCK_HOST, {"hostname": hostname}).one(), True


@functools.cache
def _insert_host_returning(dialect: str) -> sa.Insert | None:
    """A new host's insert-if-absent returning the row it inserted (none when the row
    existed), where the dialect has it."""
    if dialect not in ("postgresql", "sqlite"):
        return None  # MariaDB's ON DUPLICATE KEY UPDATE returns the row either way
    statement = insert_if_absent(dialect, hosts, ("hostname", "created_at"), "hostname")
    return statement.returning(*hosts.c)


_LOCK_HOST = sa.select(hosts).where(hosts.c.hostname == sa.bindparam("hostname")).with_for_update()
