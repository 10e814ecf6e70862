"""Apply a host's inventory snapshot: the difference, in one transaction.

Identity: a device by its control-path id within its host, a deployable by its
name within its device, an attribute by its key, an attach handle by its
attach info. An attach handle held by an ARQ is never deleted: one that
disappears while held is marked ``lost`` (never bound again) and deleted when
released; a device that disappears while one of its handles is held is marked
``lost`` (with the reason) and deleted when the last handle is released.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import uuid as uuidlib

import sqlalchemy as sa

from exosuit.db import models
from exosuit.placement.state import enqueue_sync
from exosuit.schemas import canonical_json

__all__ = ["ApplyResult", "apply_snapshot", "host_hash", "rp_uuid"]

dev = models.devices
cpid = models.controlpath_ids
dep = models.deployables
attr = models.attributes
ah = models.attach_handles
arq = models.accelerator_requests
hosts = models.hosts

# Resource provider UUIDs derive from (host, device identity, deployable name):
# the same across restarts and re-discovery.
_RP_NAMESPACE = uuidlib.UUID("6f0b3a52-4c55-4f4e-9a39-4d2f6b3c8e11")

_DEVICE_FIELDS = ("type", "vendor", "model", "driver_name", "pci_address", "numa_node",
                  "firmware_version")


# Statements of a new host's inserts, built once (building one and computing its
# cache key cost about as much as running it).
_INSERT = {t: sa.insert(t) for t in (dev, cpid, dep, attr, ah)}
_INSERT_RETURNING_ID = {
    t: sa.insert(t).returning(t.c.id, sort_by_parameter_order=True) for t in (dev, cpid, dep)}
_HOST_DEVICES = sa.select(dev).where(dev.c.hostname == sa.bindparam("hostname"))
_UPDATE_HOST = sa.update(hosts).where(hosts.c.id == sa.bindparam("host_id")).values(
    {c: sa.bindparam(c) for c in ("snapshot_hash", "last_report_at", "agent_version",
                                  "driver_errors", "updated_at")})
_IDS_BY_UUID = {
    t: sa.select(t.c.uuid, t.c.id).where(t.c.uuid.in_(sa.bindparam("uuids", expanding=True)))
    for t in (dev, cpid, dep)}


@dataclasses.dataclass
class ApplyResult:
    changed: bool
    created: int = 0
    updated: int = 0
    deleted: int = 0
    lost: int = 0


def device_identity(controlpath_id: dict) -> str:
    return canonical_json(controlpath_id)


def rp_uuid(hostname: str, identity: str, deployable_name: str) -> str:
    return str(uuidlib.uuid5(_RP_NAMESPACE, f"{hostname}\n{identity}\n{deployable_name}"))


# Built once: every unchanged agent report runs it (building it cost a third of
# the request's CPU).
_HOST_HASH = sa.select(hosts.c.snapshot_hash).where(
    hosts.c.hostname == sa.bindparam("hostname"))


def host_hash(conn, hostname: str) -> str | None:
    return conn.execute(_HOST_HASH, {"hostname": hostname}).scalar()


def _device_values(device: dict) -> dict:
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


class _Applier:
    def __init__(self, conn, hostname: str, now) -> None:
        self.conn = conn
        self.hostname = hostname
        self.now = now
        self.result = ApplyResult(changed=True)

    # -- devices ---------------------------------------------------------------------
    def apply(self, devices: list[dict]) -> None:
        existing = {
            row.identity: row
            for row in self.conn.execute(_HOST_DEVICES, {"hostname": self.hostname})
        }
        seen = set()
        new = []
        for device in devices:
            identity = device_identity(device["controlpath_id"])
            if identity in seen:
                continue  # a driver reported one device twice: the first wins
            seen.add(identity)
            row = existing.get(identity)
            if row is None:
                new.append((identity, device))
            else:
                self._update_device(row, device, identity)
        for identity, row in existing.items():
            if identity not in seen:
                self._remove_device(row)
        if new:
            self._create_devices(new)

    def _create_devices(self, new: list[tuple[str, dict]]) -> None:
        """Insert new devices and everything under them: a few statements per table,
        whatever the number of devices (a booting fleet reports many at once)."""
        device_rows = [
            {"uuid": str(uuidlib.uuid4()), "hostname": self.hostname, "identity": identity,
             "status": "enabled", "created_at": self.now, **_device_values(device)}
            for identity, device in new
        ]
        device_ids = self._insert_returning_ids(dev, device_rows)
        cpid_rows = [
            {"uuid": str(uuidlib.uuid4()), "device_id": device_id,
             "cpid_type": device["controlpath_id"]["cpid_type"],
             "cpid_info": canonical_json(device["controlpath_id"]["cpid_info"]),
             "created_at": self.now}
            for device_id, (_, device) in zip(device_ids, new, strict=True)
        ]
        cpid_ids = self._insert_returning_ids(cpid, cpid_rows)
        deployable_rows, owners = [], []
        for device_id, cpid_id, (identity, device) in zip(device_ids, cpid_ids, new,
                                                            strict=True):
            for deployable in device["deployables"]:
                deployable_rows.append({
                    "uuid": str(uuidlib.uuid4()), "name": deployable["name"],
                    "num_accelerators": deployable["num_accelerators"],
                    "device_id": device_id,
                    "rp_uuid": rp_uuid(self.hostname, identity, deployable["name"]),
                    "driver_name": deployable.get("driver_name"), "created_at": self.now,
                })
                owners.append((cpid_id, deployable))
        deployable_ids = self._insert_returning_ids(dep, deployable_rows)
        attribute_rows, handle_rows = [], []
        for deployable_id, (cpid_id, deployable) in zip(deployable_ids, owners, strict=True):
            for item in deployable["attributes"]:
                attribute_rows.append({
                    "uuid": str(uuidlib.uuid4()), "deployable_id": deployable_id,
                    "key": item["key"], "value": item["value"], "source": "agent",
                    "created_at": self.now,
                })
            infos = set()
            for handle in deployable["attach_handles"]:
                info = canonical_json(handle["attach_info"])
                if info in infos:
                    continue
                infos.add(info)
                handle_rows.append({
                    "uuid": str(uuidlib.uuid4()), "deployable_id": deployable_id,
                    "cpid_id": cpid_id, "in_use": False, "attach_type": handle["attach_type"],
                    "attach_info": info, "created_at": self.now,
                })
        if attribute_rows:
            self.conn.execute(_INSERT[attr], attribute_rows)
        if handle_rows:
            self.conn.execute(_INSERT[ah], handle_rows)
        self.result.created += len(new)

    def _insert_returning_ids(self, table: sa.Table, rows: list[dict]) -> list[int]:
        if not rows:
            return []
        if self.conn.dialect.insert_executemany_returning_sort_by_parameter_order:
            return [r.id for r in self.conn.execute(_INSERT_RETURNING_ID[table], rows)]
        # Without ordered RETURNING: insert, then read the ids back by uuid.
        self.conn.execute(_INSERT[table], rows)
        uuids = [r["uuid"] for r in rows]
        found = dict(self.conn.execute(_IDS_BY_UUID[table], {"uuids": uuids}).all())
        return [found[u] for u in uuids]

    def _insert_cpid(self, device_id: int, controlpath_id: dict) -> int:
        return self.conn.execute(
            sa.insert(cpid).values(uuid=str(uuidlib.uuid4()), device_id=device_id,
                                   cpid_type=controlpath_id["cpid_type"],
                                   cpid_info=canonical_json(controlpath_id["cpid_info"]),
                                   created_at=self.now)
        ).inserted_primary_key[0]

    def _update_device(self, row, device: dict, identity: str) -> None:
        values = _device_values(device)
        changes = {k: v for k, v in values.items() if getattr(row, k) != v}
        if changes:
            changes["updated_at"] = self.now
            self.conn.execute(sa.update(dev).where(dev.c.id == row.id).values(**changes))
            self.result.updated += 1
        cpid_id = self.conn.execute(
            sa.select(cpid.c.id).where(cpid.c.device_id == row.id).order_by(cpid.c.id)
        ).scalar()
        if cpid_id is None:
            cpid_id = self._insert_cpid(row.id, device["controlpath_id"])
        existing = {
            d.name: d for d in self.conn.execute(sa.select(dep).where(dep.c.device_id == row.id))
        }
        names = set()
        for deployable in device["deployables"]:
            names.add(deployable["name"])
            current = existing.get(deployable["name"])
            if current is None:
                self._create_deployable(row.id, cpid_id, identity, deployable)
            else:
                self._update_deployable(current, cpid_id, deployable)
        for name, current in existing.items():
            if name not in names:
                self._remove_deployable(current)

    def _held_handles(self, device_id: int) -> list:
        return self.conn.execute(
            sa.select(ah.c.uuid, arq.c.uuid.label("arq_uuid"), arq.c.instance_uuid)
            .select_from(ah.join(dep, ah.c.deployable_id == dep.c.id)
                         .join(arq, arq.c.attach_handle_id == ah.c.id))
            .where(dep.c.device_id == device_id)
        ).all()

    def _lock_handles(self, where) -> None:
        # Lock the attach handles before deciding whether any is held: a bind that
        # took one concurrently has then committed (binds skip locked handles), so
        # the check sees it, and no handle is deleted under an ARQ that holds it.
        self.conn.execute(sa.select(ah.c.id).where(where).with_for_update())

    def _remove_device(self, row) -> None:
        self._lock_handles(ah.c.deployable_id.in_(
            sa.select(dep.c.id).where(dep.c.device_id == row.id)))
        held = self._held_handles(row.id)
        if not held:
            self.conn.execute(
                sa.update(arq).where(arq.c.deployable_id.in_(
                    sa.select(dep.c.id).where(dep.c.device_id == row.id))
                ).values(deployable_id=None)
            )
            self.conn.execute(sa.delete(dev).where(dev.c.id == row.id))
            self.result.deleted += 1
            return
        if row.presence == "lost":
            return
        holders = ", ".join(
            f"attach handle {h.uuid} held by ARQ {h.arq_uuid}"
            + (f" (instance {h.instance_uuid})" if h.instance_uuid else "")
            for h in held
        )
        reason = (f"missing from the host's report of {self.now.isoformat()}Z while in use: "
                  f"{holders}; it is deleted once released")
        self.conn.execute(sa.update(dev).where(dev.c.id == row.id).values(
            presence="lost", presence_reason=reason, updated_at=self.now))
        self.result.lost += 1

    # -- deployables -----------------------------------------------------------------
    def _create_deployable(self, device_id: int, cpid_id: int, identity: str,
                           deployable: dict) -> None:
        deployable_id = self.conn.execute(
            sa.insert(dep).values(
                uuid=str(uuidlib.uuid4()), name=deployable["name"],
                num_accelerators=deployable["num_accelerators"], device_id=device_id,
                rp_uuid=rp_uuid(self.hostname, identity, deployable["name"]),
                driver_name=deployable.get("driver_name"), created_at=self.now)
        ).inserted_primary_key[0]
        self._sync_attributes(deployable_id, deployable["attributes"])
        self._sync_handles(deployable_id, cpid_id, deployable["attach_handles"])

    def _update_deployable(self, current, cpid_id: int, deployable: dict) -> None:
        changes = {}
        if current.num_accelerators != deployable["num_accelerators"]:
            changes["num_accelerators"] = deployable["num_accelerators"]
        if current.driver_name != deployable.get("driver_name"):
            changes["driver_name"] = deployable.get("driver_name")
        if changes:
            self.conn.execute(sa.update(dep).where(dep.c.id == current.id)
                              .values(updated_at=self.now, **changes))
            self.result.updated += 1
        self._sync_attributes(current.id, deployable["attributes"])
        self._sync_handles(current.id, cpid_id, deployable["attach_handles"])

    def _remove_deployable(self, current) -> None:
        self._lock_handles(ah.c.deployable_id == current.id)
        held = self.conn.execute(
            sa.select(sa.func.count()).select_from(ah).where(
                ah.c.deployable_id == current.id, ah.c.in_use.is_(True))
        ).scalar()
        if held:
            # Keep it (and the handles held, marked lost) until released; free handles go.
            self._remove_handles(ah.c.deployable_id == current.id)
            return
        self.conn.execute(sa.update(arq).where(arq.c.deployable_id == current.id)
                          .values(deployable_id=None))
        self.conn.execute(sa.delete(dep).where(dep.c.id == current.id))
        self.result.deleted += 1

    # -- attributes and attach handles -----------------------------------------------
    def _sync_attributes(self, deployable_id: int, wanted: list[dict]) -> None:
        existing = {
            a.key: a for a in self.conn.execute(
                sa.select(attr).where(attr.c.deployable_id == deployable_id,
                                      attr.c.source == "agent"))
        }
        keys = set()
        for item in wanted:
            keys.add(item["key"])
            current = existing.get(item["key"])
            if current is None:
                self.conn.execute(sa.insert(attr).values(
                    uuid=str(uuidlib.uuid4()), deployable_id=deployable_id, key=item["key"],
                    value=item["value"], source="agent", created_at=self.now))
            elif current.value != item["value"]:
                self.conn.execute(sa.update(attr).where(attr.c.id == current.id)
                                  .values(value=item["value"], updated_at=self.now))
        gone = [a.id for k, a in existing.items() if k not in keys]
        if gone:
            self.conn.execute(sa.delete(attr).where(attr.c.id.in_(gone)))

    def _sync_handles(self, deployable_id: int, cpid_id: int, wanted: list[dict]) -> None:
        existing = {
            h.attach_info: h for h in self.conn.execute(
                sa.select(ah).where(ah.c.deployable_id == deployable_id))
        }
        infos = set()
        for handle in wanted:
            info = canonical_json(handle["attach_info"])
            if info in infos:
                continue
            infos.add(info)
            current = existing.get(info)
            if current is None:
                self.conn.execute(sa.insert(ah).values(
                    uuid=str(uuidlib.uuid4()), deployable_id=deployable_id, cpid_id=cpid_id,
                    in_use=False, attach_type=handle["attach_type"], attach_info=info,
                    created_at=self.now))
            elif (current.attach_type, current.presence) != (handle["attach_type"], "present"):
                self.conn.execute(sa.update(ah).where(ah.c.id == current.id).values(
                    attach_type=handle["attach_type"], presence="present",
                    updated_at=self.now))
        gone = [h.id for i, h in existing.items()
                if i not in infos and (not h.in_use or h.presence != "lost")]
        if gone:
            self._remove_handles(ah.c.id.in_(gone))

    def _remove_handles(self, where) -> None:
        """Delete the free handles the host no longer reports; mark the held ones lost
        (never bound again; deleted when released). Locked first, so that a bind
        cannot take one between the two statements."""
        self._lock_handles(where)
        self.conn.execute(sa.delete(ah).where(where, ah.c.in_use.is_(False)))
        self.conn.execute(sa.update(ah).where(where, ah.c.in_use.is_(True),
                                              ah.c.presence == "present")
                          .values(presence="lost", updated_at=self.now))


def apply_snapshot(conn, hostname: str, snapshot: dict) -> ApplyResult:
    """Make the database equal to ``snapshot`` for ``hostname``.

    Returns ``changed=False`` without writing anything when the snapshot's hash
    equals the last one applied for this host.
    """
    now = models.utcnow()
    host, new_host = _lock_host(conn, hostname, now)
    if host.snapshot_hash == snapshot["hash"]:
        return ApplyResult(changed=False)
    applier = _Applier(conn, hostname, now)
    applier.apply(snapshot["devices"])
    values = {
        "snapshot_hash": snapshot["hash"],
        "last_report_at": now,
        "agent_version": snapshot.get("agent_version"),
        "driver_errors": json.dumps(snapshot.get("driver_errors") or []),
    }
    conn.execute(_UPDATE_HOST, {"host_id": host.id, "updated_at": now, **values})
    # The host's providers in Placement follow (exosuit/placement), in this transaction.
    # A host first seen in this transaction has no pending sync to coalesce with (a
    # duplicate would only cost one more sync run).
    enqueue_sync(conn, hostname, coalesce=not new_host)
    return applier.result


def _lock_host(conn, hostname: str, now):
    """The host's row, locked, created first for a new host; and whether this
    transaction found it missing.

    Reports of one host are applied one at a time: two at once would both insert
    what is new (a device twice, or an attach handle twice). The second waits
    here and then sees what the first committed. A new host's row is inserted
    with "on conflict do nothing" (no savepoint: two round trips fewer per host
    in a boot storm); a concurrent first report of the same host waits on the
    unique index, then finds the row.
    """
    host = conn.execute(_LOCK_HOST, {"hostname": hostname}).first()
    if host is not None:
        return host, False
    conn.execute(_insert_host_if_absent(conn.dialect.name),
                 {"hostname": hostname, "created_at": now})
    return conn.execute(_LOCK_HOST, {"hostname": hostname}).first(), True


_LOCK_HOST = sa.select(hosts).where(hosts.c.hostname == sa.bindparam("hostname")) \
    .with_for_update()


@functools.cache  # built once per dialect: in a boot storm every host is new
def _insert_host_if_absent(dialect: str):
    values = {"hostname": sa.bindparam("hostname"), "created_at": sa.bindparam("created_at")}
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql
        return postgresql.insert(hosts).values(values).on_conflict_do_nothing(
            index_elements=[hosts.c.hostname])
    if dialect == "sqlite":
        from sqlalchemy.dialects import sqlite
        return sqlite.insert(hosts).values(values).on_conflict_do_nothing(
            index_elements=[hosts.c.hostname])
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql
        statement = mysql.insert(hosts).values(values)
        # Not INSERT IGNORE: that would also turn real errors into warnings.
        return statement.on_duplicate_key_update(hostname=statement.inserted.hostname)
    raise NotImplementedError(dialect)
