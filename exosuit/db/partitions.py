"""Partition layouts (doc/devices.md, "Partitions"): how a device is split into slices.

An operator sets a device's layout, one of::

    {"mdev": {"nvidia-222": 4}}          vGPU mdevs: type → count
    {"mig": {"1g.5gb": 7}}               MIG instances: profile → count
    {"vfs": 8}                           SR-IOV VFs

with ``"on_demand": true`` optionally beside it (mdev and MIG: the slices are made for
each bind by the host's agent and removed at its release; ``partition_on_demand``, and
exosuit/db/arqs.py, desired_state.py ``slices``). The layout is desired state: the
device's ``partition_state`` becomes ``applying`` at the host's next desired-state
generation (``partition_generation``), the agent applies it through the driver and
reports ``applied`` or ``failed`` (with the reason) naming that generation
(``record_outcome``); a late outcome for an older layout is refused.

A layout the device cannot make, as its host reported it, is refused
(``PartitionUnsupported``, 400, naming what it can make; ``unsupported``): an mdev type or
MIG profile the device's services do not list, more MIG instances of a profile than its
``max_instances``, more VFs than the VF total it reports.

The slices that exist are the device's attach handles (they come from discovery, so new
mdevs and VFs appear, and are offered to Placement, with the next report). A layout that
would remove a slice in use is refused (``PartitionInUse``, 409): for each slice type,
the layout must keep at least as many as are held; a VF count cannot change at all while
a VF is held (the kernel takes ``sriov_numvfs`` through 0); a device held whole (its own
PCI function) cannot be partitioned. The handles are locked before that is decided, as
exosuit/db/activations.py does, so a concurrent bind has either committed (and is seen)
or waits and then binds against the new layout. A drained device is not required: only
the slices in use matter.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions, schemas
from exosuit.db import audit, models
from exosuit.db import services as services_db
from exosuit.db.desired_state import bump

__all__ = [
    "APPLIED",
    "APPLYING",
    "FAILED",
    "KINDS",
    "OUTCOMES",
    "PartitionView",
    "Slice",
    "get",
    "record_outcome",
    "set_layout",
    "slice_type",
    "unsupported",
]

APPLYING = "applying"
APPLIED = "applied"
FAILED = "failed"
OUTCOMES = (APPLIED, FAILED)
# The partition kinds a layout names (one each).
KINDS = ("mdev", "mig", "vfs")
# The slice type of VFs, and of a device's own function (held whole: never a slice).
VF = "vf"
WHOLE = "whole"

dev = models.devices
dep = models.deployables
ah = models.attach_handles
arq = models.accelerator_requests

_Q_HANDLES = (
    sa.select(ah.c.id, ah.c.uuid, ah.c.attach_type, ah.c.attach_info, ah.c.in_use)
    .select_from(ah.join(dep, ah.c.deployable_id == dep.c.id))
    .where(dep.c.device_id == sa.bindparam("p_id"))
    .order_by(ah.c.id)
)
_Q_SET = (
    sa.update(dev)
    .where(dev.c.id == sa.bindparam("p_id"))
    .values(
        partition_layout=sa.bindparam("p_layout"),
        partition_state=sa.bindparam("p_state"),
        partition_reason=sa.bindparam("p_reason"),
        partition_generation=sa.bindparam("p_generation"),
        partition_on_demand=sa.bindparam("p_on_demand"),
        updated_at=sa.bindparam("p_now"),
    )
)


def slice_type(attach_type: str, attach_info: Mapping[str, Any], address: str | None) -> str:
    """The slice type of an attach handle: an mdev's type (``asked_type``), a MIG
    instance's profile, ``vf`` for a PCI function other than the device's own, ``whole``
    for the device's own function."""
    if attach_type == "MDEV":
        return str(attach_info.get("asked_type") or attach_info.get("mdev_type") or "mdev")
    if attach_type == "MIG":
        return str(attach_info.get("profile") or "mig")
    info = {k: attach_info.get(k) for k in ("domain", "bus", "device", "function")}
    if None not in info.values():
        own = f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
        if address is None or own.lower() != address.lower():
            return VF
    return WHOLE


def _counts(layout: Mapping[str, Any] | None) -> dict[str, int]:
    """Slice type → count a layout asks (VFs as ``vf``)."""
    if not layout:
        return {}
    if "vfs" in layout:
        return {VF: int(layout["vfs"])}
    for kind in ("mdev", "mig"):
        if kind in layout:
            return {str(t): int(n) for t, n in layout[kind].items()}
    return {}


def _row(conn: Connection, uuid: str, *, lock: bool) -> sa.Row[*tuple[Any, ...]]:
    stmt = sa.select(
        dev.c.id,
        dev.c.uuid,
        dev.c.hostname,
        dev.c.pci_address,
        dev.c.partition_layout,
        dev.c.partition_state,
        dev.c.partition_reason,
        dev.c.partition_generation,
        dev.c.partition_on_demand,
        dev.c.std_board_info,
        dev.c.vendor_board_info,
    ).where(dev.c.uuid == uuid.lower())
    row = conn.execute(stmt.with_for_update() if lock else stmt).first()
    if row is None:
        raise exceptions.DeviceNotFound(uuid=uuid)
    return row


class Slice(TypedDict):
    """A slice of a device as its host last reported it: one of its attach handles."""

    attach_handle_uuid: str
    attach_type: str
    type: str  # an mdev type, a MIG profile, vf, or whole
    in_use: bool


class PartitionView(TypedDict):
    """A device's partition layout as the API shows it (``get``)."""

    device_uuid: str
    hostname: str
    layout: dict[str, Any] | None  # None: never set
    state: str | None  # applying | applied | failed
    reason: str | None
    generation: int | None
    slices: list[Slice]


def _slices(conn: Connection, row: sa.Row[*tuple[Any, ...]], *, lock: bool) -> list[Slice]:
    stmt = _Q_HANDLES.with_for_update() if lock else _Q_HANDLES
    slices: list[Slice] = []
    for h in conn.execute(stmt, {"p_id": row.id}):
        info = json.loads(h.attach_info) if h.attach_info else {}
        slices.append(
            {
                "attach_handle_uuid": h.uuid,
                "attach_type": h.attach_type,
                "type": slice_type(h.attach_type, info, row.pci_address),
                "in_use": bool(h.in_use),
            }
        )
    return slices


def _view(row: sa.Row[*tuple[Any, ...]], slices: list[Slice]) -> PartitionView:
    return {
        "device_uuid": row.uuid,
        "hostname": row.hostname,
        "layout": json.loads(row.partition_layout) if row.partition_layout else None,
        "state": row.partition_state,
        "reason": row.partition_reason,
        "generation": row.partition_generation,
        "slices": slices,
    }


def get(conn: Connection, uuid: str) -> PartitionView:
    """``{"device_uuid", "hostname", "layout", "state", "reason", "generation",
    "slices": [{"attach_handle_uuid", "attach_type", "type", "in_use"}]}``: the layout
    set (None: never; the device is left as it is) and how its agent applied it, and the
    slices that exist as the host last reported them. Raises DeviceNotFound."""
    row = _row(conn, uuid, lock=False)
    return _view(row, _slices(conn, row, lock=False))


def refusal(layout: Mapping[str, Any], slices: list[Slice], old: Any) -> str | None:
    """Why ``layout`` would remove a slice in use (None: it would not)."""
    held = Counter(s["type"] for s in slices if s["in_use"])
    if not held:
        return None
    if held.get(WHOLE):
        return "the device is held whole; release it first"
    wanted = _counts(layout)
    if held.get(VF) and "vfs" in layout and _counts(old) != wanted:
        return (
            f"{held[VF]} VF(s) are in use and changing the VF count removes every VF "
            "(sriov_numvfs goes through 0)"
        )
    short = [
        f"{n} slice(s) of type {t} in use, the layout keeps {wanted.get(t, 0)}"
        for t, n in sorted(held.items())
        if wanted.get(t, 0) < n
    ]
    return "; ".join(short) or None


# The service kind (doc/devices.md, Services) that says what slices of a layout's kind a
# device can make, and the detail that bounds a count (a MIG profile's max_instances; an
# mdev type's available_instances changes as mdevs are made, so bounds nothing here).
_SERVICE_OF_KIND = {"mdev": ("vgpu", None), "mig": ("mig", "max_instances")}
_KIND_WORDS = {"mdev": "vGPU (mdev) types", "mig": "MIG profiles"}


def _number(value: Any) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() else None


def _vf_total(services: list[services_db.DeviceService], board: Mapping[str, Any]) -> int | None:
    """The VFs the device reports it can make: its ``sriov`` service's ``total``, or
    ``sriov_totalvfs`` of its board info; None when it reports neither."""
    for service in services:
        if service["kind"] == "sriov":
            total = _number(service["details"].get("total"))
            if total is not None:
                return total
    return _number(board.get("sriov_totalvfs"))


def unsupported(
    layout: Mapping[str, Any],
    services: list[services_db.DeviceService],
    board: Mapping[str, Any],
) -> str | None:
    """Why the device cannot make ``layout``, as its host reported it (its services, its
    board info), naming what it can make; None when it can. An mdev type or a MIG profile
    must be one of the device's ``vgpu`` or ``mig`` services, a MIG count at most its
    ``max_instances``; a VF count at most the VF total the device reports (a device that
    reports none leaves the count to its driver)."""
    if "vfs" in layout:
        total = _vf_total(services, board)
        if total is not None and int(layout["vfs"]) > total:
            return f"it reports at most {total} SR-IOV VFs, not {layout['vfs']}"
        return None
    for kind, (service_kind, bound) in _SERVICE_OF_KIND.items():
        if kind not in layout:
            continue
        offered = {s["name"]: s["details"] for s in services if s["kind"] == service_kind}
        words = _KIND_WORDS[kind]
        listed = ", ".join(sorted(offered)) or "none"
        for name, count in sorted(layout[kind].items()):
            if name not in offered:
                return f"{kind} {name!r} is not one of its {words}: {listed}"
            most = _number(offered[name].get(bound)) if bound else None
            if most is not None and int(count) > most:
                return (
                    f"it makes at most {most} of {kind} {name!r}, not {count} ({words}: {listed})"
                )
    return None


def _capabilities(
    conn: Connection, row: sa.Row[*tuple[Any, ...]]
) -> tuple[list[services_db.DeviceService], dict[str, Any]]:
    """The device's services and board info (std and vendor) as its host last reported."""
    board: dict[str, Any] = {}
    for text in (row.vendor_board_info, row.std_board_info):
        try:
            info = json.loads(text) if text else {}
        except ValueError:
            info = {}
        if isinstance(info, dict):
            board.update(info)
    return services_db.of_devices(conn, [row.id])[row.id], board


def set_layout(conn: Connection, uuid: str, layout: Mapping[str, Any]) -> PartitionView:
    """Set the device's partition layout (validated by the API's schema): ``applying`` at
    the host's next desired-state generation. The same layout again while it is applying
    or applied changes nothing (idempotent); after a failure it is applied again.
    Raises DeviceNotFound, PartitionUnsupported (a layout the device's reported services
    cannot make, ``unsupported``), PartitionInUse (a slice in use would go; nothing
    changes).
    Returns ``get``'s view."""
    if layout.get("on_demand") and "vfs" in layout:
        raise exceptions.Invalid(
            reason="a VF layout cannot be on demand: the kernel makes and removes a "
            "device's VFs all at once (sriov_numvfs), never one for one bind"
        )
    row = _row(conn, uuid, lock=True)
    slices = _slices(conn, row, lock=True)
    old = json.loads(row.partition_layout) if row.partition_layout else None
    text = schemas.canonical_json(dict(layout))
    if text == row.partition_layout and row.partition_state in (APPLYING, APPLIED):
        return _view(row, slices)
    cannot = unsupported(layout, *_capabilities(conn, row))
    if cannot is not None:
        raise exceptions.PartitionUnsupported(uuid=row.uuid, reason=cannot)
    why = refusal(layout, slices, old)
    if why is not None:
        held = [s["attach_handle_uuid"] for s in slices if s["in_use"]]
        raise exceptions.PartitionInUse(uuid=row.uuid, reason=why, held=", ".join(held))
    generation = bump(conn, [row.hostname]).get(row.hostname)
    conn.execute(
        _Q_SET,
        {
            "p_id": row.id,
            "p_layout": text,
            "p_state": APPLYING,
            "p_reason": None,
            "p_generation": generation,
            "p_on_demand": bool(layout.get("on_demand")),
            "p_now": models.utcnow(),
        },
    )
    audit.record(
        conn,
        "partition",
        "device",
        row.uuid,
        {"layout": old, "state": row.partition_state},
        {"layout": dict(layout), "state": APPLYING},
        host=row.hostname,
    )
    return _view(_row(conn, uuid, lock=False), slices)


def record_outcome(
    conn: Connection,
    hostname: str,
    uuid: str,
    *,
    generation: int,
    state: str,
    reason: str | None = None,
) -> str:
    """The agent of ``hostname`` applied (``applied``) or could not apply (``failed``)
    the layout its desired state gave for device ``uuid`` at ``generation``. Returns the
    partition state now. Idempotent (the same outcome again changes nothing). Raises
    DeviceNotFound (no such device on that host) or PartitionSuperseded (the operator
    set another layout since: the outcome is dropped)."""
    row = _row(conn, uuid, lock=True)
    if row.hostname != hostname:
        raise exceptions.DeviceNotFound(uuid=uuid)
    if row.partition_generation == generation:
        if row.partition_state == APPLYING:
            why = (reason or "no reason given") if state == FAILED else None
            # The host's generation moves on: its partitions list changed.
            bump(conn, [hostname])
            conn.execute(
                _Q_SET,
                {
                    "p_id": row.id,
                    "p_layout": row.partition_layout,
                    "p_state": state,
                    "p_reason": why,
                    "p_generation": generation,
                    "p_on_demand": row.partition_on_demand,
                    "p_now": models.utcnow(),
                },
            )
            audit.record(
                conn,
                f"partition.{state}",
                "device",
                row.uuid,
                {"state": APPLYING},
                {"state": state, "reason": why},
                host=hostname,
            )
            return state
        if row.partition_state == state:
            return state  # this outcome, recorded already
    raise exceptions.PartitionSuperseded(
        uuid=uuid,
        generation=generation,
        state=row.partition_state,
        current=row.partition_generation,
    )
