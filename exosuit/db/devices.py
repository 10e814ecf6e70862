"""Devices (one physical card each): queries, enable/disable, an operator's labels, and
deleting a lost device (doc/devices.md)."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NotRequired, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import audit, changes, drain, models, services
from exosuit.db.pagination import Page, paginate
from exosuit.db.placement import enqueue_sync
from exosuit.schemas import canonical_json
from exosuit.schemas import labels as labels_rules

__all__ = [
    "USAGE_LABELS",
    "DeviceRow",
    "LabelOutcome",
    "delete_lost",
    "get",
    "list_devices",
    "set_labels",
    "set_status",
    "usage_series",
    "with_details",
]

t = models.devices
hosts = models.hosts
dep = models.deployables
ah = models.attach_handles
arq = models.accelerator_requests
claims = models.claims
SORT_COLUMNS = {
    "created_at": t.c.created_at,
    "uuid": t.c.uuid,
    "hostname": t.c.hostname,
    "type": t.c.type,
    "vendor": t.c.vendor,
}
# Exact-match filters, in the order microversions added them (status 2.3, activation 2.7).
FILTERS = ("type", "vendor", "hostname", "status", "activation")


class DeviceRow(TypedDict):
    """A device as the API shows it: a row of ``devices`` (models.Device says what each
    column holds), with what ``details`` and ``maintenance`` add when asked."""

    id: int
    uuid: str
    type: str
    vendor: str
    model: str
    std_board_info: str | None
    vendor_board_info: str | None
    hostname: str
    identity: str
    status: str
    status_reason: str | None
    presence: str
    presence_reason: str | None
    driver_name: str | None
    plugin: str | None
    pci_address: str | None
    numa_node: int | None
    firmware_version: str | None
    activation: str
    activation_reason: str | None
    activation_generation: int | None
    partition_layout: str | None
    partition_state: str | None
    partition_reason: str | None
    partition_generation: int | None
    partition_on_demand: bool
    health_state: str
    health_reason: str | None
    health_since: dt.datetime | None
    health_held: str | None
    pcie_root: str | None
    iommu_group: int | None
    labels: str | None
    created_at: dt.datetime
    updated_at: dt.datetime | None
    # details=True (with_details)
    services: NotRequired[list[services.DeviceService]]
    usage: NotRequired[dict[str, Any] | None]  # figure → value, as its host reported it
    usage_seen_at: NotRequired[dt.datetime | None]
    # maintenance=True (exosuit/db/drain.py's with_maintenance)
    holders: NotRequired[list[drain.Holder]]
    maintenance: NotRequired[str | None]


def _has_label(conn: Connection, key: str, value: str) -> sa.ColumnElement[bool]:
    """Whether a device's stored labels hold ``key`` = ``value``, compared byte for byte.

    The stored text is canonical JSON (exosuit/schemas/labels.py): the pair appears in it
    as ``"key":"value"`` right after ``{`` or ``,`` and right before ``,`` or ``}``, and
    nowhere else (inside a string every ``"`` is escaped). NOTE: LIKE ignores case on
    SQLite and MariaDB: a position is looked for instead, under MariaDB's binary collation
    (as exosuit/db/images.py compares names).
    """
    pair = canonical_json({key: value})[1:-1]  # "key":"value"
    column: sa.ColumnElement[Any] = t.c.labels
    if conn.dialect.name in ("mysql", "mariadb"):
        column = column.collate("utf8mb4_bin")
    find = sa.func.strpos if conn.dialect.name == "postgresql" else sa.func.instr
    return sa.or_(
        *(find(column, f"{a}{pair}{b}") > 0 for a in "{," for b in ",}"),
    )


def list_devices(
    conn: Connection,
    *,
    filters: dict[str, str],
    labels: Mapping[str, str] | None = None,
    page: Page | None = None,
    details: bool = False,
    maintenance: bool = False,
) -> list[DeviceRow]:
    """A page of devices; ``labels``: only those with every one of these labels;
    ``details``: with their services and usage (``with_details``); ``maintenance``: with
    their holders and maintenance state (exosuit/db/drain.py)."""
    stmt = sa.select(t)
    for name, value in filters.items():
        stmt = stmt.where(t.c[name] == value)
    for key, value in (labels or {}).items():
        stmt = stmt.where(_has_label(conn, key, value))
    stmt = paginate(conn, stmt, t, page, SORT_COLUMNS)
    devices = [dict(r._mapping) for r in conn.execute(stmt)]
    if maintenance:
        drain.with_maintenance(conn, devices)
    rows = cast(list[DeviceRow], devices)  # the table's columns: DeviceRow's keys
    return with_details(conn, rows) if details else rows


def get(
    conn: Connection, uuid: str, *, details: bool = False, maintenance: bool = False
) -> DeviceRow:
    row = conn.execute(sa.select(t).where(t.c.uuid == uuid)).first()
    if row is None:
        raise exceptions.DeviceNotFound(uuid=uuid)
    found = dict(row._mapping)
    if maintenance:
        drain.with_maintenance(conn, [found])
    device = cast(DeviceRow, found)  # the table's columns: DeviceRow's keys
    return with_details(conn, [device])[0] if details else device


def with_details(conn: Connection, devices: list[DeviceRow]) -> list[DeviceRow]:
    """``devices`` with their ``services`` and their ``usage`` as their host last
    reported it (None when it reported none for them) and ``usage_seen_at``: two more
    reads, whatever the number of devices."""
    offered = services.of_devices(conn, [d["id"] for d in devices])
    names = sorted({d["hostname"] for d in devices})
    usage = {
        r.hostname: (json.loads(r.usage) if r.usage else {}, r.usage_at)
        for r in conn.execute(
            sa.select(hosts.c.hostname, hosts.c.usage, hosts.c.usage_at).where(
                hosts.c.hostname.in_(names)
            )
        )
    }
    for device in devices:
        device["services"] = offered[device["id"]]
        figures, seen_at = usage.get(device["hostname"], ({}, None))
        device["usage"] = figures.get(device["identity"])
        device["usage_seen_at"] = seen_at if device["usage"] is not None else None
    return devices


def set_status(conn: Connection, uuid: str, status: str) -> DeviceRow:
    """enabled or maintaining. A disabled device takes no new binds. An operator's
    change clears the reason Exosuit gave when it disabled the device itself."""
    before = conn.execute(
        sa.select(t.c.status, t.c.status_reason).where(t.c.uuid == uuid).with_for_update()
    ).first()
    updated = conn.execute(
        sa.update(t)
        .where(t.c.uuid == uuid)
        .values(status=status, status_reason=None, updated_at=models.utcnow())
    ).rowcount
    if not updated:
        raise exceptions.DeviceNotFound(uuid=uuid)
    device = get(conn, uuid)
    if before is not None and (before.status, before.status_reason) != (status, None):
        action = "enable" if status == "enabled" else "disable"
        was = {"status": before.status, "status_reason": before.status_reason}
        audit.record(conn, action, "device", uuid, was, {"status": status}, host=device["hostname"])
    # Its providers in Placement follow (all reserved while disabled), in this transaction.
    enqueue_sync(conn, device["hostname"])
    return device


# -- labels (2.10) --------------------------------------------------------------------------


class LabelOutcome(TypedDict):
    """What an operator's labelling did to one device: its labels now, and whether they
    ``changed`` or were already so (``unchanged``)."""

    uuid: str
    hostname: str
    labels: dict[str, str]
    outcome: str


def _checked(set_: Mapping[str, str], unset: Collection[str]) -> None:
    """DeviceLabelsInvalid for nothing asked, a key or value the rules refuse, or a key
    both set and unset."""
    if not set_ and not unset:
        raise exceptions.DeviceLabelsInvalid(
            reason='nothing to do: give "set" {key: value} and/or "unset" [key]'
        )
    try:
        for key, value in set_.items():
            labels_rules.check_value(labels_rules.check_key(key), value)
        for key in unset:
            labels_rules.check_key(key)
    except labels_rules.LabelInvalid as error:
        raise exceptions.DeviceLabelsInvalid(reason=str(error)) from None
    both = sorted(set(set_) & set(unset))
    if both:
        raise exceptions.DeviceLabelsInvalid(reason=f"{', '.join(both)}: both set and unset")


def set_labels(
    conn: Connection,
    uuids: Sequence[str],
    *,
    set_: Mapping[str, str],
    unset: Collection[str] = (),
) -> list[LabelOutcome]:
    """Set the labels ``set_`` and remove the keys ``unset`` (absent ones: nothing to
    remove) on every device of ``uuids``, all or none. Raises DeviceLabelsInvalid (a key
    or value the rules refuse, a key both set and unset, a device that would have more
    than MAX_LABELS) and DeviceNotFound (naming every uuid that names no device) before
    anything is written. Each device changed is audited (``label``, its labels before and
    after). The outcomes in the devices' order."""
    _checked(set_, unset)
    wanted = sorted({u.lower() for u in uuids})
    rows = conn.execute(
        sa.select(t.c.id, t.c.uuid, t.c.hostname, t.c.labels)
        .where(t.c.uuid.in_(wanted))
        .order_by(t.c.id)
        .with_for_update()
    ).all()
    missing = sorted(set(wanted) - {r.uuid for r in rows})
    if missing:
        raise exceptions.DeviceNotFound(uuid=", ".join(missing))
    now = models.utcnow()
    outcomes: list[LabelOutcome] = []
    changed: list[audit.Change] = []
    for r in rows:
        before = labels_rules.decode(r.labels)
        after = {k: v for k, v in before.items() if k not in unset} | dict(set_)
        if len(after) > labels_rules.MAX_LABELS:
            raise exceptions.DeviceLabelsInvalid(
                reason=f"device {r.uuid} would have {len(after)} labels; at most "
                f"{labels_rules.MAX_LABELS}"
            )
        outcome = "unchanged" if after == before else "changed"
        if after != before:
            conn.execute(
                sa.update(t)
                .where(t.c.id == r.id)
                .values(labels=labels_rules.encode(after), updated_at=now)
            )
            changed.append(audit.Change(r.uuid, {"labels": before}, {"labels": after}, r.hostname))
        outcomes.append(
            {"uuid": r.uuid, "hostname": r.hostname, "labels": after, "outcome": outcome}
        )
    audit.record_many(conn, "label", "device", changed)
    return outcomes


# -- deleting a lost device (2.10) ------------------------------------------------------------

_LOST_BRIEF = ("identity", "type", "vendor", "model", "driver_name", "status", "presence")
_MISSING = (
    "its host's agent still reports it, within its removal grace: the report that drops it "
    "deletes it (or keeps it lost while an attach handle is held), unless it comes back"
)
_PRESENT = (
    "its host's agent reports it: a device is deleted by the first report that no longer "
    "has it (remove it from the host, or uninstall its driver), and only a lost one (gone "
    "from its host while held) by hand"
)


def _arq_holders(conn: Connection, device_id: int) -> list[str]:
    """The ARQs (and their instance or claim) that hold attach handles of the device, its
    handles locked first (a concurrent bind has committed, or waits and then finds the
    device gone)."""
    of_device = ah.c.deployable_id.in_(sa.select(dep.c.id).where(dep.c.device_id == device_id))
    conn.execute(sa.select(ah.c.id).where(of_device).with_for_update())
    rows = conn.execute(
        sa.select(ah.c.uuid, arq.c.uuid.label("arq_uuid"), arq.c.instance_uuid)
        .add_columns(claims.c.uuid.label("claim_uuid"))
        .select_from(
            ah.join(arq, arq.c.attach_handle_id == ah.c.id).outerjoin(
                claims, arq.c.claim_id == claims.c.id
            )
        )
        .where(of_device)
        .order_by(ah.c.id)
    )
    held = []
    for h in rows:
        who = f"attach handle {h.uuid} held by ARQ {h.arq_uuid}"
        if h.claim_uuid:
            who += f" of claim {h.claim_uuid}"
        elif h.instance_uuid:
            who += f" of instance {h.instance_uuid}"
        held.append(who)
    return held


def delete_lost(conn: Connection, uuid: str) -> None:
    """Delete a lost device (gone from its host's report) that nothing holds: its
    deployables, attributes, attach handles and services go with it, its host's Placement
    sync is queued (its providers leave), and it is audited (``delete``). Raises
    DeviceNotFound, DeviceNotLost (present, or missing within its agent's removal grace:
    the reports decide) and DeviceInUse (an ARQ holds one of its attach handles: the
    message names them)."""
    hostname = conn.execute(sa.select(t.c.hostname).where(t.c.uuid == uuid.lower())).scalar()
    if hostname is not None:
        # Its host's row first, as a report of the host locks it: a report that finds the
        # device again either committed (and the device is present now) or waits.
        conn.execute(sa.select(hosts.c.id).where(hosts.c.hostname == hostname).with_for_update())
    row = conn.execute(sa.select(t).where(t.c.uuid == uuid.lower()).with_for_update()).first()
    if row is None:
        raise exceptions.DeviceNotFound(uuid=uuid)
    if row.presence != "lost":
        reason = _MISSING if row.presence == "missing" else _PRESENT
        raise exceptions.DeviceNotLost(uuid=row.uuid, presence=row.presence, reason=reason)
    held = _arq_holders(conn, row.id)
    if held:
        raise exceptions.DeviceInUse(
            f"Device {row.uuid} is lost but held: {'; '.join(held)}. Release them first "
            "(unbind or delete the ARQ, release the claim): the device is then deleted "
            "by itself."
        )
    of_device = sa.select(dep.c.id).where(dep.c.device_id == row.id)
    conn.execute(
        sa.update(arq).where(arq.c.deployable_id.in_(of_device)).values(deployable_id=None)
    )
    conn.execute(sa.delete(t).where(t.c.id == row.id))
    changes.mark(conn, changes.DEPLOYABLES)  # its deployables go with it
    enqueue_sync(conn, row.hostname)  # its providers leave Placement
    before = {k: getattr(row, k) for k in _LOST_BRIEF}
    before["labels"] = labels_rules.decode(row.labels)
    audit.record(conn, "delete", "device", row.uuid, before, None, host=row.hostname)


# The labels of a device's usage gauges (exosuit/api/handlers/metrics.py).
USAGE_LABELS = ("hostname", "device_uuid", "type", "vendor", "model", "pci_address")


def usage_series(
    conn: Connection, *, stale_after: float
) -> dict[str, list[tuple[tuple[str, ...], float]]]:
    """Each figure of the devices' usage (``{figure: [(labels, value), ...]}``, labels as
    ``USAGE_LABELS``), from the hosts whose usage is at most ``stale_after`` seconds old:
    a host that stopped reporting shows none rather than its last figures forever."""
    since = models.utcnow() - dt.timedelta(seconds=stale_after)
    reported = {
        r.hostname: json.loads(r.usage)
        for r in conn.execute(
            sa.select(hosts.c.hostname, hosts.c.usage).where(
                hosts.c.usage.is_not(None), hosts.c.usage_at >= since
            )
        )
    }
    series: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    if not reported:
        return series
    rows = conn.execute(
        sa.select(t.c.hostname, t.c.identity, t.c.uuid, t.c.type, t.c.vendor, t.c.model)
        .add_columns(t.c.pci_address)
        .where(t.c.hostname.in_(sorted(reported)))
        .order_by(t.c.hostname, t.c.id)
    )
    for r in rows:
        figures = reported[r.hostname].get(r.identity) or {}
        labels = (r.hostname, r.uuid, r.type, r.vendor, r.model, r.pci_address or "")
        for name, value in figures.items():
            if isinstance(value, int | float) and math.isfinite(value):
                series.setdefault(name, []).append((labels, float(value)))
    return series
