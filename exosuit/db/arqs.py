"""Accelerator requests (ARQs) and their attach handles.

Every state change of an ARQ or an attach handle is one compare-and-set
(``UPDATE … WHERE state IN (…)`` / ``WHERE in_use = false``) whose row count
says whether it won. ``accelerator_requests.attach_handle_id`` is UNIQUE, so
even a bug above this layer could not make two ARQs hold one handle.

State table (doc/arq-states.md):

    Initial ──bind──► BindStarted ──► Bound
    Unbound ──bind──┘            └──► BindFailed
    Initial|BindStarted|Bound|BindFailed ──unbind──► Unbound

A bind that needs work on its host (``_needs_host_work``) stays BindStarted,
holding its attach handle, until the host's agent reports the work done
(``finish_host_work``) or its deadline passes (``time_out_binds``): one that programs its
device, and one that takes a slice of a device whose partition layout is on demand (the
agent makes the slice; its release bumps the host's desired state so the agent removes
it). Every bind
queues Nova's notification in its own transaction (exosuit/db/nova.py).

A bind whose profile group asks for an image (``accel:bitstream_id``,
``accel:function_id``) gets it resolved by the caller (``ProgramNeed``: the image
may live in Glance, an HTTP call that has no place in a transaction) and queues a
program holding the ARQ's handle (exosuit/db/programs.py); the program's end makes
the ARQ Bound or BindFailed (``report_program``). No bind takes a handle of a
device while a program runs on it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from typing import Any, NotRequired, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, CursorResult

from exosuit import exceptions
from exosuit.db import audit, candidates, changes, models, offers
from exosuit.db import nova as nova_db
from exosuit.db import programs as programs_db
from exosuit.db.desired_state import bump
from exosuit.db.pagination import Page, paginate
from exosuit.db.placement import enqueue_sync
from exosuit.schemas import labels as device_labels
from exosuit.schemas import profile_groups
from exosuit.schemas.profile_groups import ProfileGroup

__all__ = [
    "BIND_SOURCES",
    "RESOLVED",
    "ArqRow",
    "ArqState",
    "Binding",
    "BindResult",
    "ProgramNeed",
    "ProgramsToResolve",
    "bind",
    "bind_for_claim",
    "create",
    "delete_by_instance",
    "delete_of_claim",
    "delete_by_uuids",
    "finish_host_work",
    "get",
    "list_arqs",
    "program_groups",
    "report_program",
    "time_out_binds",
    "time_out_program",
    "unbind",
]

INITIAL = "Initial"
BIND_STARTED = "BindStarted"
BOUND = "Bound"
BIND_FAILED = "BindFailed"
UNBOUND = "Unbound"
DELETING = "Deleting"

STATES = (INITIAL, BIND_STARTED, BOUND, BIND_FAILED, UNBOUND, DELETING)
BIND_SOURCES = (INITIAL, UNBOUND)
UNBIND_SOURCES = (INITIAL, BIND_STARTED, BOUND, BIND_FAILED, UNBOUND)
# What Nova and ?bind_state=resolved call resolved.
RESOLVED = (BOUND, BIND_FAILED, DELETING)

arq = models.accelerator_requests
dp = models.device_profiles
ah = models.attach_handles
dep = models.deployables
dev = models.devices
attr = models.attributes
claims = models.claims

# The profile name is a correlated subquery (on its own alias of device_profiles) so
# that a marker's sort value is read from its ARQ row alone: selecting dp.name for
# the marker without the list's join paired it with every profile.
_sort_dp = dp.alias("sort_dp")
SORT_COLUMNS = {
    "created_at": arq.c.created_at,
    "uuid": arq.c.uuid,
    "state": arq.c.state,
    "hostname": sa.func.coalesce(arq.c.hostname, ""),
    "instance_uuid": sa.func.coalesce(arq.c.instance_uuid, ""),
    "device_profile_name": sa.select(_sort_dp.c.name)
    .where(_sort_dp.c.id == arq.c.device_profile_id)
    .correlate(arq)
    .scalar_subquery(),
}

_SELECT = sa.select(
    arq,
    dp.c.name.label("device_profile_name"),
    ah.c.uuid.label("attach_handle_uuid"),
    ah.c.attach_type.label("attach_handle_type"),
    ah.c.attach_info.label("attach_handle_info"),
    claims.c.uuid.label("claim_uuid"),
).select_from(
    # A claim's ARQ may have no profile (it named its attach handles: 2.8).
    arq.outerjoin(dp, arq.c.device_profile_id == dp.c.id)
    .outerjoin(ah, arq.c.attach_handle_id == ah.c.id)
    .outerjoin(claims, arq.c.claim_id == claims.c.id)
)


@dataclasses.dataclass(frozen=True)
class Scope:
    """Which ARQs a caller sees: one project, or all (``project_id`` None)."""

    project_id: str | None


@dataclasses.dataclass(frozen=True)
class Binding:
    uuid: str
    hostname: str
    device_rp_uuid: str
    instance_uuid: str
    project_id: str | None = None


@dataclasses.dataclass(frozen=True)
class ProgramNeed:
    """What a bind's profile group asks to be loaded, resolved before the bind:
    ``bitstream_id`` as the group names it (a device that has it needs nothing),
    the ``image`` to load, or the ``error`` that fails the bind."""

    bitstream_id: str | None = None
    image: programs_db.Image | None = None
    error: str | None = None


class ArqRow(TypedDict):
    """An ARQ as the API shows it: a row of ``accelerator_requests`` (models.
    AcceleratorRequest says what each column holds), its profile's name, and its attach
    handle (uuid, type, info decoded) while Bound (None, "" and {} otherwise), and the
    standalone claim that holds it (2.8)."""

    id: NotRequired[int]  # not in a new ARQ (``create``)
    uuid: str
    project_id: str | None
    state: str
    device_profile_id: int | None
    device_profile_group_id: int
    hostname: str | None
    device_rp_uuid: str | None
    instance_uuid: str | None
    attach_handle_id: int | None
    deployable_id: int | None
    reason: str | None
    claim_id: NotRequired[int | None]  # not in a new ARQ (``create``)
    created_at: dt.datetime
    updated_at: dt.datetime | None
    device_profile_name: str | None
    attach_handle_uuid: str | None
    attach_handle_type: str
    attach_handle_info: dict[str, Any]
    claim_uuid: str | None


class ArqState(TypedDict):
    uuid: str
    state: str


@dataclasses.dataclass
class BindResult:
    arq: ArqState  # its uuid and its state after the bind
    error: str | None = None


class ProgramsToResolve(Exception):  # noqa: N818 - a request to the caller, not an error
    """``bind(..., resolve_first=True)`` met a profile group that asks for an image
    ``programs`` does not resolve. Nothing changed: resolve (``program_groups``) and
    bind again."""


def _to_dict(row: sa.Row[*tuple[Any, ...]]) -> ArqRow:
    data = dict(row._mapping)
    info = data.get("attach_handle_info")
    data["attach_handle_info"] = json.loads(info) if info else {}
    if data["state"] != BOUND:
        data["attach_handle_type"] = ""
        data["attach_handle_info"] = {}
        data["attach_handle_uuid"] = None
    return cast(ArqRow, data)  # _SELECT's columns, the handle's info decoded


def _scoped(stmt: sa.Select[*tuple[Any, ...]], scope: Scope) -> sa.Select[*tuple[Any, ...]]:
    if scope.project_id is not None:
        stmt = stmt.where(arq.c.project_id == scope.project_id)
    return stmt


# NOTE: the statements of the create/bind/unbind/delete paths are built once, with
# bound parameters: SQLAlchemy then skips building each statement and computing its
# cache key at every call, which cost more than the database round trip itself. The
# SQL is the same. Scoped statements come in pairs: all projects, one (p_project).
_Pair = tuple[sa.Select[*tuple[Any, ...]], sa.Select[*tuple[Any, ...]]]


def _prebuilt(stmt: sa.Select[*tuple[Any, ...]]) -> _Pair:
    return stmt, stmt.where(arq.c.project_id == sa.bindparam("p_project"))


def _execute(
    conn: Connection, pair: _Pair, scope: Scope, params: dict[str, Any]
) -> CursorResult[*tuple[Any, ...]]:
    if scope.project_id is None:
        return conn.execute(pair[0], params)
    return conn.execute(pair[1], {**params, "p_project": scope.project_id})


_UUIDS: sa.BindParameter[list[str]] = sa.bindparam("p_uuids", expanding=True)
_NOW: sa.BindParameter[dt.datetime] = sa.bindparam("p_now")
# The name as stored: MariaDB's collation finds "Name " for "name".
_Q_PROFILE = sa.select(dp.c.id, dp.c.name, dp.c.profile_json).where(
    dp.c.name == sa.bindparam("p_name")
)
_Q_INSERT = sa.insert(arq)
_Q_GET = _prebuilt(_SELECT.where(arq.c.uuid == sa.bindparam("p_uuid")))
# An instance's ARQs, as list_arqs orders them without a page (paginate: newest first).
_Q_OF_INSTANCE = _prebuilt(
    _SELECT.where(arq.c.instance_uuid == sa.bindparam("p_instance")).order_by(
        arq.c.created_at.desc(), arq.c.id.desc()
    )
)
_Q_INSTANCE_STATES = _prebuilt(
    sa.select(arq.c.uuid, arq.c.state).where(arq.c.instance_uuid == sa.bindparam("p_instance"))
)
# Locked (see _rows_for_update).
_Q_ROWS = _prebuilt(sa.select(arq).where(arq.c.uuid.in_(_UUIDS)).with_for_update())
# The same for a bind, with each ARQ's device profile in the same round trip. Only the ARQs
# are locked (a locking clause does not reach a subquery, on every database): a profile
# never changes, and one that an ARQ names cannot be deleted (RESTRICT).
_ROWS_TO_BIND = sa.select(
    # What bind reads (each column costs the driver a description to parse).
    arq.c.uuid,
    arq.c.state,
    arq.c.hostname,
    arq.c.device_rp_uuid,
    arq.c.instance_uuid,
    arq.c.project_id,
    arq.c.device_profile_id,
    arq.c.device_profile_group_id,
    arq.c.claim_id,
    sa.select(dp.c.profile_json)
    .where(dp.c.id == arq.c.device_profile_id)
    .scalar_subquery()
    .label("profile_json"),
).with_for_update()
_Q_ROWS_TO_BIND = _prebuilt(_ROWS_TO_BIND.where(arq.c.uuid.in_(_UUIDS)))
# One ARQ (what Nova binds): an expanding IN costs SQLAlchemy about 25 µs a statement. With
# it, in the same round trip, _Q_OTHERS_BOUND's question for its instance (p_instance) and
# owner (p_owner, else the ARQ's project): another ARQ bound or binding (not locked, as
# _Q_OTHERS_BOUND does not lock).
_other = arq.alias("other_arq")
_Q_ROW_TO_BIND = _prebuilt(
    _ROWS_TO_BIND.add_columns(
        sa.select(_other.c.uuid)
        .where(
            _other.c.instance_uuid == sa.bindparam("p_instance"),
            _other.c.project_id.is_not_distinct_from(
                sa.func.coalesce(sa.bindparam("p_owner"), arq.c.project_id)
            ),
            sa.or_(_other.c.state == BIND_STARTED, _other.c.state == BOUND),
            _other.c.uuid != arq.c.uuid,
        )
        .correlate(arq)
        .limit(1)
        .scalar_subquery()
        .label("other_bound")
    ).where(arq.c.uuid == sa.bindparam("p_uuid"))
)
# Locked as _Q_ROWS; the columns a delete reads (_delete_rows).
_Q_BY_INSTANCE = _prebuilt(
    sa.select(arq.c.id, arq.c.uuid, arq.c.state, arq.c.instance_uuid, arq.c.attach_handle_id)
    .add_columns(arq.c.hostname)
    .where(arq.c.instance_uuid == sa.bindparam("p_instance"))
    .with_for_update()
)
# Nova's delete of an instance's ARQs in one statement, where the database returns what it
# deleted (PostgreSQL, SQLite, MariaDB 10.5+): it locks the rows as _Q_BY_INSTANCE would.
_DELETED = (
    arq.c.id,
    arq.c.uuid,
    arq.c.state,
    arq.c.instance_uuid,
    arq.c.attach_handle_id,
    arq.c.hostname,
)
_DELETE_OF_INSTANCE = sa.delete(arq).where(arq.c.instance_uuid == sa.bindparam("p_instance"))
_Q_DELETE_OF_INSTANCE = (
    _DELETE_OF_INSTANCE.returning(*_DELETED),
    _DELETE_OF_INSTANCE.where(arq.c.project_id == sa.bindparam("p_project")).returning(*_DELETED),
)
_Q_OF_CLAIM = (
    sa.select(arq.c.id, arq.c.uuid, arq.c.state, arq.c.instance_uuid, arq.c.attach_handle_id)
    .where(arq.c.claim_id == sa.bindparam("p_claim"))
    .order_by(arq.c.id)
    .with_for_update()
)
_Q_BOUND_UUIDS = _prebuilt(
    sa.select(arq.c.uuid).where(arq.c.uuid.in_(_UUIDS), arq.c.instance_uuid.is_not(None))
)
_program_dep = dep.alias("program_dep")
_Q_DEPLOYABLE = (
    sa.select(
        dep.c.id,
        dep.c.name,
        dep.c.rp_uuid,
        dep.c.bitstream_id,
        dev.c.hostname,
        dev.c.status,
        dev.c.presence,
        dev.c.activation,
        dev.c.health_held,
        dev.c.health_reason,
        dev.c.partition_on_demand,
        dev.c.numa_node,
        dev.c.pcie_root,
        dev.c.labels,
        dev.c.uuid.label("device_uuid"),
        dev.c.id.label("device_id"),
        dev.c.type.label("device_type"),
        # A program running on any deployable of the device: no bind takes it meanwhile.
        sa.select(_program_dep.c.program_uuid)
        .where(_program_dep.c.device_id == dev.c.id, _program_dep.c.program_uuid.is_not(None))
        .limit(1)
        .scalar_subquery()
        .label("programming"),
    )
    .select_from(dep.join(dev, dep.c.device_id == dev.c.id))
    .where(dep.c.rp_uuid == sa.bindparam("p_rp_uuid"))
)
# What _find_deployable checks, alone: its look again once a handle is taken.
_Q_DEPLOYABLE_CHECKS = _Q_DEPLOYABLE.with_only_columns(
    *(
        column
        for column in _Q_DEPLOYABLE.selected_columns
        if column.key
        in (
            "hostname",
            "presence",
            "status",
            "activation",
            "health_held",
            "health_reason",
            "device_uuid",
            "programming",
        )
    ),
    maintain_column_froms=True,
)
# The same and, in the same round trip, what the deployable offers (exosuit/db/offers.py):
# one row per rc or trait* attribute (one with NULLs when it has none).
_Q_DEPLOYABLE_OFFER = _Q_DEPLOYABLE.add_columns(
    attr.c.key.label("offer_key"),
    attr.c.value.label("offer_value"),
    attr.c.source.label("offer_source"),
).outerjoin(
    attr,
    sa.and_(
        attr.c.deployable_id == dep.c.id,
        sa.or_(attr.c.key == "rc", attr.c.key.startswith("trait")),
    ),
)
_Q_FREE_HANDLE = (
    sa.select(ah.c.id)
    .where(
        ah.c.deployable_id == sa.bindparam("p_deployable_id"),
        ah.c.in_use.is_(False),
        ah.c.presence == "present",
    )
    .order_by(ah.c.id)
    .limit(1)
)
_Q_FREE_HANDLE_SKIP_LOCKED = _Q_FREE_HANDLE.with_for_update(skip_locked=True)
_Q_TAKE_HANDLE = (
    sa.update(ah)
    .where(ah.c.id == sa.bindparam("p_id"), ah.c.in_use.is_(False))
    .values(in_use=True, updated_at=_NOW)
)
_Q_TAKE_NAMED_HANDLE = _Q_TAKE_HANDLE.where(
    ah.c.deployable_id == sa.bindparam("p_deployable_id"), ah.c.presence == "present"
)
_Q_RELEASE_HANDLE = (
    sa.update(ah)
    .where(ah.c.id == sa.bindparam("p_id"), ah.c.in_use.is_(True))
    .values(in_use=False, updated_at=_NOW)
)
_Q_DELETE_LOST_HANDLE = sa.delete(ah).where(
    ah.c.id == sa.bindparam("p_id"), ah.c.presence == "lost"
)
_Q_DEVICE_OF_HANDLE = (
    sa.select(
        dev.c.id,
        dev.c.presence,
        dev.c.hostname,
        dev.c.partition_on_demand,
        ah.c.presence.label("handle_presence"),
    )
    .select_from(
        ah.join(dep, ah.c.deployable_id == dep.c.id).join(dev, dep.c.device_id == dev.c.id)
    )
    .where(ah.c.id == sa.bindparam("p_id"))
)
# Another ARQ of the instance bound in the same project (an instance and its ARQs share
# one project): ARQs of other projects never count, so that no project can learn of, or
# block, another project's instance (doc/compatibility.md, "Identity and policy").
_OTHERS_BOUND = (
    sa.select(arq.c.uuid)
    .where(
        arq.c.instance_uuid == sa.bindparam("p_instance"),
        arq.c.project_id.is_not_distinct_from(sa.bindparam("p_project")),
        arq.c.state.in_((BIND_STARTED, BOUND)),
    )
    .limit(1)
)
_Q_OTHERS_BOUND = _OTHERS_BOUND.where(arq.c.uuid.not_in(_UUIDS))
_Q_START_BIND = (
    sa.update(arq)
    # (An IN of literals would be an expanding parameter: 20 µs more per statement.)
    .where(arq.c.uuid == sa.bindparam("p_uuid"), sa.or_(*(arq.c.state == s for s in BIND_SOURCES)))
    .values(
        state=BIND_STARTED,
        hostname=sa.bindparam("p_hostname"),
        device_rp_uuid=sa.bindparam("p_rp_uuid"),
        instance_uuid=sa.bindparam("p_instance"),
        reason=None,
        updated_at=_NOW,
    )
)
_Q_START_BIND_WITH_PROJECT = _Q_START_BIND.values(project_id=sa.bindparam("p_project_id"))
_Q_END_BIND = sa.update(arq).where(
    arq.c.uuid == sa.bindparam("p_uuid"), arq.c.state == BIND_STARTED
)
# How a bind ends (_ENDS, keyed by the state after, the origin and whether checked): Bound;
# BindStarted holding its handle while its host works for it (until the host's report);
# BindFailed with the reason. Each is one compare-and-set from where the ARQ stands:
# STARTED, from BindStarted (a claim's ARQ; a bind of several ARQs, which all start first);
# or SOURCE, straight from Initial or Unbound, setting what _Q_START_BIND sets too (a bind of
# one ARQ, whose row ``bind`` locked: a BindStarted between two statements of its
# transaction would be seen by no other); SOURCE_WITH_PROJECT sets project_id as well.
# ``checked``: the look again at the device, once the handle is taken, is in the WHERE
# (_STILL_BINDABLE); a miss is looked at again to say why (_complete_bind).
STARTED, SOURCE, SOURCE_WITH_PROJECT = "started", "source", "source+project"
_END_FROM = {
    STARTED: _Q_END_BIND,
    SOURCE: sa.update(arq).where(
        arq.c.uuid == sa.bindparam("p_uuid"), sa.or_(*(arq.c.state == s for s in BIND_SOURCES))
    ),
}
_END_VALUES: dict[str, dict[str, Any]] = {
    BOUND: {
        "state": BOUND,
        "attach_handle_id": sa.bindparam("p_handle_id"),
        "deployable_id": sa.bindparam("p_deployable_id"),
    },
    BIND_STARTED: {  # waiting for its host, holding the handle
        "attach_handle_id": sa.bindparam("p_handle_id"),
        "deployable_id": sa.bindparam("p_deployable_id"),
    },
    BIND_FAILED: {"state": BIND_FAILED, "reason": sa.bindparam("p_reason")},
}
# What _find_deployable checks with _Q_DEPLOYABLE_CHECKS, as a condition: the deployable
# named is on the host named, its device present, enabled, ready, held back by no health
# check and programmed by no program.
_STILL_BINDABLE = sa.exists(
    sa.select(dep.c.id)
    .select_from(dep.join(dev, dep.c.device_id == dev.c.id))
    .where(
        dep.c.rp_uuid == sa.bindparam("p_rp_uuid"),
        dev.c.hostname == sa.bindparam("p_hostname"),
        dev.c.presence == "present",
        dev.c.status == "enabled",
        dev.c.activation == "ready",
        dev.c.health_held.is_(None),
        ~sa.exists(
            sa.select(_program_dep.c.id).where(
                _program_dep.c.device_id == dev.c.id, _program_dep.c.program_uuid.is_not(None)
            )
        ),
    )
)


def _end(state: str, origin: str, checked: bool) -> sa.Update:
    values = {**_END_VALUES[state], "updated_at": _NOW}
    if origin != STARTED:  # what _Q_START_BIND(_WITH_PROJECT) sets, too
        values.update(
            state=state,
            hostname=sa.bindparam("p_hostname"),
            device_rp_uuid=sa.bindparam("p_rp_uuid"),
            instance_uuid=sa.bindparam("p_instance"),
        )
        if state != BIND_FAILED:
            values["reason"] = None
        if origin == SOURCE_WITH_PROJECT:
            values["project_id"] = sa.bindparam("p_project_id")
    stmt = _END_FROM[SOURCE if origin != STARTED else STARTED]
    if checked:
        stmt = stmt.where(_STILL_BINDABLE)
    return stmt.values(**values)


_ENDS = {
    (state, origin, checked): _end(state, origin, checked)
    for state in _END_VALUES
    for origin in (STARTED, SOURCE, SOURCE_WITH_PROJECT)
    for checked in (False, True)
}
_Q_HOST_DONE = _Q_END_BIND.values(state=BOUND, updated_at=_NOW)
# A claim's ARQ has no instance (NULL): compared as NULL = NULL.
_Q_HOST_FAILED = _Q_END_BIND.where(
    arq.c.instance_uuid.is_not_distinct_from(sa.bindparam("p_instance"))
).values(
    state=BIND_FAILED,
    reason=sa.bindparam("p_reason"),
    attach_handle_id=None,
    deployable_id=None,
    updated_at=_NOW,
)
_Q_UNBIND = (
    sa.update(arq)
    .where(arq.c.id == sa.bindparam("p_id"), arq.c.state.in_(UNBIND_SOURCES))
    .values(
        state=UNBOUND,
        hostname=None,
        device_rp_uuid=None,
        instance_uuid=None,
        attach_handle_id=None,
        deployable_id=None,
        updated_at=_NOW,
    )
)
_Q_DELETE = sa.delete(arq).where(arq.c.id == sa.bindparam("p_id"))


def create(
    conn: Connection,
    *,
    profile_name: str,
    project_id: str | None,
    handles_per_unit: dict[str, int],
    max_arqs: int | None = None,
) -> list[ArqRow]:
    """Create the ARQs of every group of the named profile (state Initial).

    Raises LimitExceeded, creating none, when the profile makes more than ``max_arqs``
    (``[api] max_arqs_per_request``; a profile created before that limit, or imported).
    """
    row = conn.execute(_Q_PROFILE, {"p_name": profile_name}).first()
    if row is None:
        raise exceptions.DeviceProfileNotFound(ident=profile_name)
    groups = [profile_groups.read(g) for g in json.loads(row.profile_json).get("groups", [])]
    count = sum(group.units(handles_per_unit) for group in groups)
    if max_arqs is not None and count > max_arqs:
        raise exceptions.LimitExceeded(
            what=f"Device profile {profile_name} makes {count} accelerator requests",
            limit=max_arqs,
            option="[api] max_arqs_per_request",
        )
    now = models.utcnow()
    values = []
    for group_id, group in enumerate(groups):
        for _ in range(group.units(handles_per_unit)):
            values.append(
                {
                    "uuid": str(uuidlib.uuid4()),
                    "project_id": project_id,
                    "state": INITIAL,
                    "device_profile_id": row.id,
                    "device_profile_group_id": group_id,
                    "created_at": now,
                }
            )
    if not values:
        raise exceptions.Invalid(reason=f"device profile {profile_name} requests no resources")
    try:
        conn.execute(_Q_INSERT, values)
    except sa.exc.IntegrityError as error:  # the profile was deleted since it was read
        raise exceptions.DeviceProfileNotFound(ident=profile_name) from error
    after = {"state": INITIAL, "device_profile_name": row.name}
    audit.record_many(conn, "create", "arq", [audit.Change(v["uuid"], None, after) for v in values])
    return [_created(value, row.name) for value in values]


def _created(values: dict[str, Any], profile_name: str) -> ArqRow:
    """A new ARQ as ``get`` would read it back (without its ``id``), without the read."""
    new = {
        **values,
        "updated_at": None,
        "hostname": None,
        "device_rp_uuid": None,
        "instance_uuid": None,
        "attach_handle_id": None,
        "deployable_id": None,
        "reason": None,
        "device_profile_name": profile_name,
        "attach_handle_uuid": None,
        "attach_handle_type": "",
        "attach_handle_info": {},
        "claim_uuid": None,
    }
    return cast(ArqRow, new)  # create's values and the rest: ArqRow's keys


def get(conn: Connection, uuid: str, scope: Scope) -> ArqRow:
    row = _execute(conn, _Q_GET, scope, {"p_uuid": uuid}).first()
    if row is None:
        raise exceptions.AcceleratorRequestNotFound(uuid=uuid)
    return _to_dict(row)


def list_arqs(
    conn: Connection,
    scope: Scope,
    *,
    instance: str | None = None,
    states: tuple[str, ...] | None = None,
    hostname: str | None = None,
    device_profile_name: str | None = None,
    page: Page | None = None,
    require_resolved: bool = False,
) -> list[ArqRow]:
    """The ARQs ``scope`` sees, filtered. With ``require_resolved`` and an
    ``instance``, raises ARQUnresolved while any ARQ of the instance is unresolved
    (Nova's ``bind_state=resolved``)."""
    if instance is not None and (states, hostname, device_profile_name, page) == (None,) * 4:
        # Nova's poll (``?instance=``, with or without ``bind_state=resolved``): one
        # prebuilt statement, whose rows also say whether all are resolved.
        rows = [
            _to_dict(r) for r in _execute(conn, _Q_OF_INSTANCE, scope, {"p_instance": instance})
        ]
        pending = [r["uuid"] for r in rows if r["state"] not in RESOLVED]
        if require_resolved and pending:
            raise exceptions.ARQUnresolved(instance=instance, uuids=", ".join(pending))
        return rows
    if require_resolved and instance is not None:
        pending = [u for u, s in instance_states(conn, instance, scope) if s not in RESOLVED]
        if pending:
            raise exceptions.ARQUnresolved(instance=instance, uuids=", ".join(pending))
    stmt = _scoped(_SELECT, scope)
    if instance is not None:
        stmt = stmt.where(arq.c.instance_uuid == instance)
    if states is not None:
        stmt = stmt.where(arq.c.state.in_(states))
    if hostname is not None:
        stmt = stmt.where(arq.c.hostname == hostname)
    if device_profile_name is not None:
        stmt = stmt.where(dp.c.name == device_profile_name)
    visible = None if scope.project_id is None else arq.c.project_id == scope.project_id
    stmt = paginate(conn, stmt, arq, page, SORT_COLUMNS, visible=visible)
    return [_to_dict(r) for r in conn.execute(stmt)]


def instance_states(conn: Connection, instance: str, scope: Scope) -> list[tuple[str, str]]:
    rows = _execute(conn, _Q_INSTANCE_STATES, scope, {"p_instance": instance})
    return [tuple(r) for r in rows]


def _rows_for_update(
    conn: Connection, uuids: list[str], scope: Scope
) -> dict[str, sa.Row[*tuple[Any, ...]]]:
    # Locked: a bind, unbind or delete of one of them running meanwhile has committed
    # when this returns, so the rows acted on are current (an unbind or delete that
    # acted on a stale row would leave the handle a concurrent bind took in use).
    rows = _execute(conn, _Q_ROWS, scope, {"p_uuids": uuids})
    return {row.uuid: row for row in rows}


def _check_found(rows: Mapping[str, sa.Row[*tuple[Any, ...]]], uuids: list[str]) -> None:
    missing = [u for u in uuids if u not in rows]
    if missing:
        raise exceptions.AcceleratorRequestNotFound(uuid=", ".join(missing))


def _check_unclaimed(conn: Connection, rows: Iterable[sa.Row[*tuple[Any, ...]]]) -> None:
    """Raise ARQClaimed for an ARQ a claim holds: only its claim binds, unbinds or
    deletes it (exosuit/db/claims.py)."""
    for row in rows:
        if row.claim_id is not None:
            claim = conn.execute(sa.select(claims.c.uuid).where(claims.c.id == row.claim_id))
            raise exceptions.ARQClaimed(uuid=row.uuid, claim=claim.scalar())


def _find_deployable(
    conn: Connection, binding: Binding, stmt: sa.Select[*tuple[Any, ...]] = _Q_DEPLOYABLE
) -> tuple[list[sa.Row[*tuple[Any, ...]]] | None, str | None]:
    """The rows of the deployable a bind names (``stmt``'s: one, or one per attribute it
    offers by), or the reason it cannot take the bind."""
    rows = list(conn.execute(stmt, {"p_rp_uuid": binding.device_rp_uuid}))
    row = rows[0] if rows else None
    if row is None:
        return None, f"no deployable has resource provider {binding.device_rp_uuid}"
    if row.hostname != binding.hostname:
        return None, (
            f"resource provider {binding.device_rp_uuid} is on host {row.hostname}, "
            f"not {binding.hostname}"
        )
    if row.presence != "present":
        return None, f"device {row.device_uuid} is {row.presence} (gone from its host)"
    if row.status != "enabled":
        return None, f"device {row.device_uuid} is disabled (status {row.status})"
    if row.activation != "ready":
        return None, (
            f"device {row.device_uuid} is not ready (activation {row.activation}): an "
            "operator marks it ready before it is offered (doc/devices.md)"
        )
    if row.programming is not None:
        return None, f"device {row.device_uuid} is being programmed (program {row.programming})"
    if row.health_held is not None:
        why = f": {row.health_reason}" if row.health_reason else ""
        return None, (
            f"device {row.device_uuid} is held back as unhealthy (by its {row.health_held})"
            f"{why}; it is offered again once recovered or cleared (doc/devices.md, Health)"
        )
    return rows, None


def _unsatisfied(group: ProfileGroup, rows: list[sa.Row[*tuple[Any, ...]]]) -> str | None:
    """Why the deployable cannot serve the ARQ's profile group, or None: the group's
    resource class (one of them), its required traits and its forbidden ones, against
    what the deployable offers, as Placement would have matched them; then what
    Placement does not know: the device's NUMA node (``accel:numa_node``) and its labels
    (``accel:label:<key>``). Nova's allocation normally guarantees the first; a caller
    naming another provider gets a failed bind, never a device the group did not ask
    for. ``rows``: _Q_DEPLOYABLE_OFFER's."""
    deployable = rows[0]
    if group.selects:
        offer = [
            (r.offer_key, r.offer_value, r.offer_source)
            for r in rows
            if r.offer_key is not None and r.id == deployable.id
        ]
        rc, traits = offers.offered(offer, deployable.device_type)
        reason = group.mismatch(rc, traits)
        if reason is not None:
            return f"deployable {deployable.name} (resource provider {deployable.rp_uuid}) {reason}"
    if not group.accel:
        return None
    device = deployable.device_uuid
    wanted = group.numa_node
    if wanted is not None and deployable.numa_node != wanted:
        node = "an unknown NUMA node" if deployable.numa_node is None else None
        node = node or f"NUMA node {deployable.numa_node}"
        return f"device {device} is on {node}, not {wanted} ({profile_groups.NUMA_NODE})"
    labels = device_labels.decode(deployable.labels)
    for key, value in sorted(group.labels.items()):
        if labels.get(key) != value:
            return f"device {device} lacks label {key}={value} ({profile_groups.LABEL}{key})"
    return None


# The devices the other ARQs of the same request hold (the same claim; else the same
# instance, project and device profile), for the constraints across a profile's groups.
_me = arq.alias("me")
_sibling = arq.alias("sibling")
_Q_SIBLINGS = (
    sa.select(
        _sibling.c.uuid,
        dev.c.id.label("device_id"),
        dev.c.uuid.label("device_uuid"),
        dev.c.numa_node,
        dev.c.pcie_root,
    )
    .select_from(
        _me.join(
            _sibling,
            sa.and_(
                _sibling.c.id != _me.c.id,
                _sibling.c.device_profile_id == _me.c.device_profile_id,
                sa.or_(
                    sa.and_(_me.c.claim_id.is_not(None), _sibling.c.claim_id == _me.c.claim_id),
                    sa.and_(
                        _me.c.claim_id.is_(None),
                        _sibling.c.claim_id.is_(None),
                        _sibling.c.instance_uuid == _me.c.instance_uuid,
                        _sibling.c.project_id.is_not_distinct_from(_me.c.project_id),
                    ),
                ),
            ),
        )
        .join(dep, dep.c.id == _sibling.c.deployable_id)
        .join(dev, dev.c.id == dep.c.device_id)
    )
    .where(_me.c.uuid == sa.bindparam("p_uuid"), _sibling.c.state.in_((BIND_STARTED, BOUND)))
    .order_by(_sibling.c.id)
)


def _apart(
    conn: Connection,
    uuid: str,
    deployable: sa.Row[*tuple[Any, ...]],
    constraints: candidates.Constraints,
) -> str | None:
    """Why the deployable breaks a constraint across the profile's groups
    (``accel:same_numa_node``, ``accel:same_pcie_root``, ``accel:distinct_devices``),
    given the devices the ARQ's siblings already hold (bound before it, in this
    transaction or an earlier one), or None. A device whose NUMA node or PCIe root is
    unknown cannot be shown to share one: refused."""
    device = deployable.device_uuid
    if constraints.same_numa_node and deployable.numa_node is None:
        return f"device {device}'s NUMA node is unknown ({profile_groups.SAME_NUMA_NODE})"
    if constraints.same_pcie_root and deployable.pcie_root is None:
        return f"device {device}'s PCIe root is unknown ({profile_groups.SAME_PCIE_ROOT})"
    for other in conn.execute(_Q_SIBLINGS, {"p_uuid": uuid}):
        held = f"ARQ {other.uuid} of the same request holds device {other.device_uuid}"
        if constraints.same_numa_node and other.numa_node != deployable.numa_node:
            return (
                f"device {device} is on NUMA node {deployable.numa_node}, but {held} on NUMA "
                f"node {other.numa_node} ({profile_groups.SAME_NUMA_NODE})"
            )
        if constraints.same_pcie_root and other.pcie_root != deployable.pcie_root:
            return (
                f"device {device} is under PCIe root {deployable.pcie_root}, but {held} under "
                f"{other.pcie_root} ({profile_groups.SAME_PCIE_ROOT})"
            )
        if constraints.distinct_devices and other.device_id == deployable.device_id:
            return f"{held} already ({profile_groups.DISTINCT_DEVICES})"
    return None


def _take_handle(
    conn: Connection, deployable_id: int, skip_locked: bool, handle_id: int | None = None
) -> int | None:
    """Take a free attach handle of the deployable with a compare-and-set (``handle_id``:
    that one, if it is free and present: a claim that names its handles)."""
    if handle_id is not None:
        taken = conn.execute(
            _Q_TAKE_NAMED_HANDLE,
            {"p_id": handle_id, "p_deployable_id": deployable_id, "p_now": models.utcnow()},
        ).rowcount
        return handle_id if taken == 1 else None
    stmt = _Q_FREE_HANDLE_SKIP_LOCKED if skip_locked else _Q_FREE_HANDLE
    while True:
        candidate: int | None = conn.execute(stmt, {"p_deployable_id": deployable_id}).scalar()
        if candidate is None:
            return None
        taken = conn.execute(_Q_TAKE_HANDLE, {"p_id": candidate, "p_now": models.utcnow()}).rowcount
        if taken == 1:
            return candidate


def _release_handle(conn: Connection, handle_id: int | None) -> None:
    if handle_id is None:
        return
    released = conn.execute(
        _Q_RELEASE_HANDLE, {"p_id": handle_id, "p_now": models.utcnow()}
    ).rowcount
    row = conn.execute(_Q_DEVICE_OF_HANDLE, {"p_id": handle_id}).first()
    if released == 1 and row is not None and row.partition_on_demand:
        # Its slice was made for the holder: the host's agent removes it now.
        bump(conn, [row.hostname])
    _collect_lost_device(conn, row)
    # A handle its host stopped reporting while it was held goes once released. The
    # release locked it (its row, or the database on SQLite), so the presence just read
    # stays true until this commits; without the lock, the delete asks the database.
    if row is not None and (row.handle_presence == "lost" or released != 1):
        conn.execute(_Q_DELETE_LOST_HANDLE, {"p_id": handle_id})


def _collect_lost_device(conn: Connection, row: sa.Row[*tuple[Any, ...]] | None) -> None:
    """A lost device is deleted once its last held attach handle is released (``row``:
    _Q_DEVICE_OF_HANDLE's for the handle just released)."""
    if row is None or row.presence != "lost":
        return
    # Lock the device: of two last holders released at once, the second waits here
    # and then counts with the first's release committed (else neither deletes it).
    locked = conn.execute(
        sa.select(dev.c.presence, dev.c.hostname).where(dev.c.id == row.id).with_for_update()
    ).first()
    if locked is None or locked.presence != "lost":
        return
    still_held = conn.execute(
        sa.select(sa.func.count())
        .select_from(ah.join(dep, ah.c.deployable_id == dep.c.id))
        .where(dep.c.device_id == row.id, ah.c.in_use.is_(True))
    ).scalar()
    if not still_held:
        conn.execute(
            sa.update(arq)
            .where(arq.c.deployable_id.in_(sa.select(dep.c.id).where(dep.c.device_id == row.id)))
            .values(deployable_id=None)
        )
        conn.execute(sa.delete(dev).where(dev.c.id == row.id))
        changes.mark(conn, changes.DEPLOYABLES)  # its deployables go with it
        # Its providers leave Placement now, not at the next drift repair.
        enqueue_sync(conn, locked.hostname)


def bind(
    conn: Connection,
    bindings: list[Binding],
    scope: Scope,
    *,
    skip_locked: bool,
    bind_timeout: float = 60.0,
    programs: Mapping[str, ProgramNeed] | None = None,
    resolve_first: bool = False,
) -> list[BindResult]:
    """Bind ARQs: all move to BindStarted or none does; then each ends Bound or BindFailed,
    or stays BindStarted while its host works for it (up to ``bind_timeout`` seconds).

    Raises AcceleratorRequestNotFound, ARQBadState or InstanceAlreadyBound (another
    ARQ of the instance in the same project is bound or binding) and changes nothing
    when the request itself is wrong. A bind that cannot be
    satisfied (unknown provider, wrong host, disabled, lost or not ready device, no
    free attach handle; a device off its group's ``accel:numa_node`` or labels, or one
    that breaks its profile's constraints across groups with the devices the instance's
    other ARQs hold: doc/nova.md, "Topology constraints") leaves its ARQ BindFailed
    with the reason, and is reported in the result. Nova's notification of each
    instance's binds is queued here.
    ``programs``: by ARQ uuid, what its group asks to be loaded (``program_groups``
    says which ARQs ask). With ``resolve_first``, a group that asks for an image not in
    ``programs`` raises ProgramsToResolve before anything is written: a caller can try
    without looking images up first (most groups ask for none), and look them up when
    asked to.
    """
    uuids = [b.uuid for b in bindings]
    one = len(uuids) == 1
    which: dict[str, Any] = {"p_uuids": uuids}
    if one:
        (first,) = bindings
        which = {"p_uuid": first.uuid, "p_instance": first.instance_uuid, "p_owner": None}
        which["p_owner"] = first.project_id
    # Locked as _rows_for_update locks them.
    to_bind = _Q_ROW_TO_BIND if one else _Q_ROWS_TO_BIND
    rows = {row.uuid: row for row in _execute(conn, to_bind, scope, which)}
    _check_found(rows, uuids)
    _check_unclaimed(conn, rows.values())
    results: dict[str, BindResult] = {}
    pending: list[Binding] = []
    for binding in bindings:
        row = rows[binding.uuid]
        same = (row.hostname, row.device_rp_uuid, row.instance_uuid) == (
            binding.hostname,
            binding.device_rp_uuid,
            binding.instance_uuid,
        )
        if row.state in (BOUND, BIND_STARTED) and same:
            # The same bind again (done, or waiting for its host): nothing to do.
            results[binding.uuid] = BindResult(arq={"uuid": row.uuid, "state": row.state})
            continue
        if row.state not in BIND_SOURCES:
            raise exceptions.ARQBadState(
                uuid=row.uuid, state=row.state, expected=" or ".join(BIND_SOURCES)
            )
        pending.append(binding)
    groups = _profile_groups(rows[b.uuid] for b in pending)
    if resolve_first:
        _check_resolved(pending, rows, groups, programs or {})
    owners = {(b.instance_uuid, b.project_id or rows[b.uuid].project_id) for b in pending}
    for instance, project in sorted(owners, key=str):
        if one:  # asked with the row (_Q_ROW_TO_BIND)
            others = rows[uuids[0]].other_bound
        else:
            params = {"p_instance": instance, "p_project": project, "p_uuids": uuids}
            others = conn.execute(_Q_OTHERS_BOUND, params).first()
        if others is not None:
            raise exceptions.InstanceAlreadyBound(instance=instance)
    across = _constraints(groups)
    # A bind of one ARQ starts and ends in one compare-and-set (_ENDS), unless its
    # profile's constraints across groups need it BindStarted first (_Q_SIBLINGS).
    origin = SOURCE if one and len(pending) == 1 and not across else STARTED
    if origin == STARTED:
        _start_binds(conn, pending)
    for binding in pending:
        row = rows[binding.uuid]
        group = groups.get((row.device_profile_id, row.device_profile_group_id), ProfileGroup())
        need = (programs or {}).get(binding.uuid)
        state, error = _complete_bind(
            conn,
            binding,
            skip_locked,
            group,
            need,
            row.project_id,
            constraints=across.get(row.device_profile_id),
            origin=SOURCE_WITH_PROJECT
            if origin == SOURCE and binding.project_id is not None
            else origin,
        )
        results[binding.uuid] = BindResult(arq={"uuid": binding.uuid, "state": state}, error=error)
        _record_bind(conn, binding, row.state, state, error)
    _queue_notifications(conn, pending, results, bind_timeout)
    return [results[uuid] for uuid in uuids]


def _start_binds(conn: Connection, pending: list[Binding]) -> None:
    """Every ARQ of the bind to BindStarted (each a compare-and-set), or none: raises
    AcceleratorRequestNotFound or ARQBadState for one that moved (none can: ``bind``
    locked them)."""
    now = models.utcnow()
    for binding in pending:
        params = {
            "p_uuid": binding.uuid,
            "p_hostname": binding.hostname,
            "p_rp_uuid": binding.device_rp_uuid,
            "p_instance": binding.instance_uuid,
            "p_now": now,
        }
        stmt = _Q_START_BIND
        if binding.project_id is not None:
            stmt = _Q_START_BIND_WITH_PROJECT
            params["p_project_id"] = binding.project_id
        won = conn.execute(stmt, params).rowcount
        if won != 1:
            state = conn.execute(sa.select(arq.c.state).where(arq.c.uuid == binding.uuid)).scalar()
            if state is None:  # deleted meanwhile
                raise exceptions.AcceleratorRequestNotFound(uuid=binding.uuid)
            raise exceptions.ARQBadState(
                uuid=binding.uuid, state=state, expected=" or ".join(BIND_SOURCES)
            )


def _record_bind(
    conn: Connection, binding: Binding, before: str, state: str, error: str | None
) -> None:
    """The audit record of one ARQ's bind: ``bind.start`` while it waits for its host,
    ``bind.end`` once Bound or BindFailed."""
    after = {
        "state": state,
        "hostname": binding.hostname,
        "device_rp_uuid": binding.device_rp_uuid,
        "instance_uuid": binding.instance_uuid,
    }
    if error is not None:
        after["reason"] = error
    action = "bind.start" if state == BIND_STARTED else "bind.end"
    audit.record(conn, action, "arq", binding.uuid, {"state": before}, after, host=binding.hostname)


def _check_resolved(
    pending: list[Binding],
    rows: Mapping[str, sa.Row[*tuple[Any, ...]]],
    groups: Mapping[tuple[int, int], ProfileGroup],
    programs: Mapping[str, ProgramNeed],
) -> None:
    for binding in pending:
        row = rows[binding.uuid]
        group = groups.get((row.device_profile_id, row.device_profile_group_id))
        if group is not None and group.loads_image and binding.uuid not in programs:
            raise ProgramsToResolve(binding.uuid)


def _profile_groups(
    rows: Iterable[sa.Row[*tuple[Any, ...]]],
) -> dict[tuple[int, int], ProfileGroup]:
    """(profile id, group index) → the group, for the profiles of ``rows`` (which hold
    their profile's ``profile_json``)."""
    groups: dict[tuple[int, int], ProfileGroup] = {}
    parsed: set[int] = set()
    for row in rows:
        if row.device_profile_id not in parsed:
            parsed.add(row.device_profile_id)
            for index, group in enumerate(json.loads(row.profile_json).get("groups", [])):
                groups[(row.device_profile_id, index)] = profile_groups.read(group)
    return groups


def _constraints(
    groups: Mapping[tuple[int, int], ProfileGroup],
) -> dict[int, candidates.Constraints]:
    """Profile id → its constraints across its groups, for the profiles that set any."""
    by_profile: dict[int, list[ProfileGroup]] = {}
    for (profile_id, _), group in groups.items():
        by_profile.setdefault(profile_id, []).append(group)
    found = {p: candidates.Constraints.of(g) for p, g in by_profile.items()}
    return {p: c for p, c in found.items() if c.across}


def _needs_host_work(group: ProfileGroup, deployable: sa.Row[*tuple[Any, ...]]) -> bool:
    """Whether the host must work before the bind is Bound (doc/arq-states.md): the
    group asks for a bitstream the deployable does not have, or for a function, as
    Cyborg programs FPGAs during a bind."""
    wanted = group.bitstream_id
    if wanted is not None and wanted != deployable.bitstream_id:
        return True
    return group.function_id is not None


def _queue_notifications(
    conn: Connection, pending: list[Binding], results: dict[str, BindResult], bind_timeout: float
) -> None:
    """One Nova notification job per instance of this bind (exosuit/db/nova.py)."""
    rounds: dict[str, list[tuple[str, str | None]]] = {}
    for binding in pending:
        state = results[binding.uuid].arq["state"]
        status = (
            None
            if state == BIND_STARTED
            else (nova_db.COMPLETED if state == BOUND else nova_db.FAILED)
        )
        rounds.setdefault(binding.instance_uuid, []).append((binding.uuid, status))
    for instance, statuses in rounds.items():
        nova_db.enqueue_round(conn, instance, statuses, bind_timeout=bind_timeout)


_Q_GROUPS_OF = _prebuilt(
    sa.select(
        arq.c.uuid,
        arq.c.project_id,
        arq.c.device_profile_id,
        arq.c.device_profile_group_id,
        dp.c.profile_json,
    )
    .select_from(arq.join(dp, arq.c.device_profile_id == dp.c.id))
    .where(arq.c.uuid.in_(_UUIDS))
)


def program_groups(
    conn: Connection, uuids: list[str], scope: Scope
) -> dict[str, tuple[str | None, ProfileGroup]]:
    """ARQ uuid → (its project, its profile group), for those of ``uuids`` whose group
    asks for an image (``accel:bitstream_id``, ``accel:function_id``): what a caller
    resolves before ``bind``."""
    rows = list(_execute(conn, _Q_GROUPS_OF, scope, {"p_uuids": uuids}))
    groups = _profile_groups(rows)
    found = {}
    for row in rows:
        group = groups.get((row.device_profile_id, row.device_profile_group_id))
        if group is not None and group.loads_image:
            found[row.uuid] = (row.project_id, group)
    return found


# The attach types of slices an on-demand layout makes (doc/devices.md, "Partitions").
SLICE_TYPES = ("MDEV", "MIG")


def _is_slice(conn: Connection, handle_id: int) -> bool:
    """Whether the attach handle is a slice (an mdev, a MIG instance), not a function."""
    found = conn.execute(sa.select(ah.c.attach_type).where(ah.c.id == handle_id)).scalar()
    return found in SLICE_TYPES


def _wait_or_bind(
    conn: Connection,
    binding: Binding,
    deployable: sa.Row[*tuple[Any, ...]],
    handle_id: int,
    group: ProfileGroup,
    need: ProgramNeed | None,
    project_id: str | None,
) -> tuple[str | None, str | None]:
    """How the bind ends now that it holds a handle: Bound, BindStarted waiting for its
    host (a program queued), or None and the reason it fails. Writes nothing unless
    ``need`` or the device's ``partition_on_demand`` (``_complete_bind`` counts on it)."""
    if need is None:
        if deployable.partition_on_demand and _is_slice(conn, handle_id):
            # The slice is made for this bind: the host's agent makes it (its desired
            # state's ``slices``) and reports the bind done (doc/devices.md, Partitions).
            bump(conn, [deployable.hostname])
            return BIND_STARTED, None
        return (BIND_STARTED if _needs_host_work(group, deployable) else BOUND), None
    loaded = deployable.bitstream_id
    if loaded is not None and loaded in (need.bitstream_id, need.image and need.image.uuid):
        return BOUND, None
    if need.image is None:
        return None, need.error or "no image to load"
    error = programs_db.queue_for_arq(
        conn,
        deployable.id,
        need.image,
        arq_uuid=binding.uuid,
        project_id=binding.project_id or project_id,
        own_handle=handle_id,
    )
    return (None, error) if error is not None else (BIND_STARTED, None)


def _complete_bind(
    conn: Connection,
    binding: Binding,
    skip_locked: bool,
    group: ProfileGroup,
    need: ProgramNeed | None = None,
    project_id: str | None = None,
    named: tuple[int, str] | None = None,
    constraints: candidates.Constraints | None = None,
    origin: str = STARTED,
) -> tuple[str, str | None]:
    """Take a handle (``named``: that one, its id and uuid) and end the bind (its ARQ
    locked, and BindStarted unless ``origin`` says it starts in the same compare-and-set:
    _ENDS): the ARQ's state now (Bound, BindStarted while its host works, or BindFailed)
    and why it failed. ``constraints``: those of its profile across its groups, checked
    against the devices its siblings hold (which needs the ARQ BindStarted already)."""
    found, error = _find_deployable(conn, binding, _Q_DEPLOYABLE_OFFER)
    deployable = found[0] if found else None
    if found:
        error = _unsatisfied(group, found)
    if deployable is not None and error is None and constraints is not None:
        error = _apart(conn, binding.uuid, deployable, constraints) if constraints.across else None
    handle_id = None
    checked = False
    if deployable is not None and error is None:
        handle_id = _take_handle(conn, deployable.id, skip_locked, named and named[0])
        if handle_id is None and named is not None:
            error = f"attach handle {named[1]} is held (or gone from its host)"
        elif handle_id is None:
            error = f"no free attach handle on deployable {deployable.name}"
        elif need is None and not deployable.partition_on_demand:
            # Nothing is written before the end (_wait_or_bind): the look again below
            # is the end's own WHERE, a statement that starts after the handle is ours.
            checked = True
        else:
            # Look again now that the handle is ours: an agent report that marked the
            # device lost meanwhile has committed (it locks the handles before it
            # decides), so this read sees it; a later one waits for this bind.
            _, error = _find_deployable(conn, binding, _Q_DEPLOYABLE_CHECKS)
            if error is not None:
                _release_handle(conn, handle_id)
                handle_id = None
    state = None
    if error is None:
        # _find_deployable returned a deployable and a handle was taken, or else a reason.
        assert deployable is not None and handle_id is not None
        state, error = _wait_or_bind(conn, binding, deployable, handle_id, group, need, project_id)
        if state is None:
            _release_handle(conn, handle_id)
    params: dict[str, Any] = {
        "p_uuid": binding.uuid,
        "p_hostname": binding.hostname,
        "p_rp_uuid": binding.device_rp_uuid,
        "p_instance": binding.instance_uuid,
        "p_now": models.utcnow(),
    }
    if origin == SOURCE_WITH_PROJECT:
        params["p_project_id"] = binding.project_id
    if state is not None:
        assert deployable is not None
        params.update(p_handle_id=handle_id, p_deployable_id=deployable.id)
        won = conn.execute(_ENDS[(state, origin, checked)], params).rowcount
        if won == 0 and checked:
            # The look again failed (or the ARQ moved, which its lock rules out): why.
            _, error = _find_deployable(conn, binding, _Q_DEPLOYABLE_CHECKS)
            if error is None:
                won = conn.execute(_ENDS[(state, origin, False)], params).rowcount
            else:
                _release_handle(conn, handle_id)
        if error is None:
            return _state_after(conn, binding.uuid, won, state), None
    params["p_reason"] = error
    won = conn.execute(_ENDS[(BIND_FAILED, origin, False)], params).rowcount
    return _state_after(conn, binding.uuid, won, BIND_FAILED), error


def bind_for_claim(
    conn: Connection,
    uuid: str,
    hostname: str,
    rp_uuid: str,
    group: ProfileGroup,
    *,
    skip_locked: bool,
    need: ProgramNeed | None = None,
    project_id: str | None = None,
    named: tuple[int, str] | None = None,
    constraints: candidates.Constraints | None = None,
) -> tuple[str, str | None]:
    """End the bind of an ARQ a claim inserted BindStarted on ``hostname``'s
    deployable ``rp_uuid`` (exosuit/db/claims.py): exactly a bind's checks (device
    present, enabled, ready, not being programmed; the profile ``group`` matched), its
    compare-and-set on a free attach handle (``named``: that one) and its program for
    ``need``, without Nova's notification; ``constraints`` across the profile's groups
    against the devices the claim's other ARQs hold. The ARQ's state and why it failed."""
    binding = Binding(uuid, hostname, rp_uuid, instance_uuid="", project_id=project_id)
    return _complete_bind(conn, binding, skip_locked, group, need, project_id, named, constraints)


def _state_after(conn: Connection, uuid: str, won: int, state: str) -> str:
    """``state`` when the compare-and-set that set it won (always, on a row this
    transaction locked and made BindStarted); else the state read back, as it is."""
    if won == 1:
        return state
    return get(conn, uuid, Scope(None))["state"]


def unbind(conn: Connection, uuids: list[str], scope: Scope) -> list[ArqRow]:
    """Unbind ARQs: release their attach handles, clear the binding, state Unbound."""
    rows = _rows_for_update(conn, uuids, scope)
    _check_found(rows, uuids)
    _check_unclaimed(conn, rows.values())
    for uuid in uuids:
        row = rows[uuid]
        if row.state not in UNBIND_SOURCES:
            raise exceptions.ARQBadState(
                uuid=uuid, state=row.state, expected=" or ".join(UNBIND_SOURCES)
            )
    for uuid in uuids:
        _unbind_one(conn, rows[uuid])
    return [get(conn, u, Scope(None)) for u in uuids]


def _unbind_one(conn: Connection, row: sa.Row[*tuple[Any, ...]]) -> None:
    won = conn.execute(_Q_UNBIND, {"p_id": row.id, "p_now": models.utcnow()}).rowcount
    if won == 1:
        _release_handle(conn, row.attach_handle_id)
        _abandon_host_work(conn, row)
        before = {"state": row.state, "hostname": row.hostname, "instance_uuid": row.instance_uuid}
        audit.record(conn, "unbind", "arq", row.uuid, before, {"state": UNBOUND}, host=row.hostname)


def _delete_rows(
    conn: Connection, rows: Iterable[sa.Row[*tuple[Any, ...]]]
) -> list[sa.Row[*tuple[Any, ...]]]:
    """Delete the ARQs of ``rows`` (handles released); those this deleted."""
    done = []
    for row in rows:
        deleted = conn.execute(_Q_DELETE, {"p_id": row.id}).rowcount
        if deleted == 1:
            _release_handle(conn, row.attach_handle_id)
            _abandon_host_work(conn, row)
            done.append(row)
    return done


def _record_deletes(conn: Connection, rows: Iterable[sa.Row[*tuple[Any, ...]]]) -> None:
    changes = [
        audit.Change(r.uuid, {"state": r.state, "instance_uuid": r.instance_uuid}, None, r.hostname)
        for r in rows
    ]
    audit.record_many(conn, "delete", "arq", changes)


def _abandon_host_work(conn: Connection, row: sa.Row[*tuple[Any, ...]]) -> None:
    """A bind waiting for its host that is unbound or deleted has failed: Nova hears so
    now, not at the deadline."""
    if row.state == BIND_STARTED:
        nova_db.record_resolution(conn, row.instance_uuid, row.uuid, nova_db.FAILED)


def delete_by_uuids(
    conn: Connection, uuids: list[str], scope: Scope, *, service_token: bool = True
) -> list[str]:
    """Delete the ARQs that exist (releasing their handles); return the missing uuids.

    Without a ``service_token``, raises ServiceTokenRequired (deleting nothing) when
    any of them is bound to an instance: only Nova deletes those.
    """
    if not service_token and bound_uuids(conn, uuids, scope):
        raise exceptions.ServiceTokenRequired(
            action="Deleting accelerator requests bound to an instance"
        )
    rows = _rows_for_update(conn, uuids, scope)
    _check_unclaimed(conn, rows.values())
    _record_deletes(conn, _delete_rows(conn, rows.values()))
    return [u for u in uuids if u not in rows]


def bound_uuids(conn: Connection, uuids: list[str], scope: Scope) -> list[str]:
    """Those of ``uuids`` that belong to an instance (need a service token to delete)."""
    return [r.uuid for r in _execute(conn, _Q_BOUND_UUIDS, scope, {"p_uuids": uuids})]


def delete_by_instance(conn: Connection, instance: str, scope: Scope) -> int:
    """Delete every ARQ of the instance (idempotent); return how many."""
    if not conn.dialect.delete_returning:  # MySQL: lock, then delete each
        rows = _execute(conn, _Q_BY_INSTANCE, scope, {"p_instance": instance}).all()
        _record_deletes(conn, _delete_rows(conn, rows))
        return len(rows)
    params = {"p_instance": instance}
    stmt = _Q_DELETE_OF_INSTANCE[0]
    if scope.project_id is not None:
        stmt, params["p_project"] = _Q_DELETE_OF_INSTANCE[1], scope.project_id
    deleted = conn.execute(stmt, params).all()
    for row in deleted:  # as _delete_rows does after each delete
        _release_handle(conn, row.attach_handle_id)
        _abandon_host_work(conn, row)
    _record_deletes(conn, deleted)
    return len(deleted)


def delete_of_claim(conn: Connection, claim_id: int) -> int:
    """Delete every ARQ of a claim, releasing their attach handles (the claim's release,
    exosuit/db/claims.py); how many."""
    rows = conn.execute(_Q_OF_CLAIM, {"p_claim": claim_id}).all()
    _delete_rows(conn, rows)
    return len(rows)


def finish_host_work(
    conn: Connection, hostname: str, uuid: str, *, error: str | None, program: bool = False
) -> ArqRow:
    """The agent of ``hostname`` reports the work a BindStarted ARQ waits for: done
    (``error`` None: Bound) or failed (BindFailed with ``error``, handle released).
    Nova's notification learns it in this transaction.

    Idempotent: the same report again returns the ARQ unchanged. Raises
    AcceleratorRequestNotFound for an ARQ that does not exist or is not bound to
    this host, and ARQBadState when it waits for nothing (e.g. it timed out) or
    for a program (whose reports end it: ``program`` True only for those).
    """
    row = _rows_for_update(conn, [uuid], Scope(None)).get(uuid)
    if row is None or row.hostname != hostname:
        raise exceptions.AcceleratorRequestNotFound(uuid=uuid)
    running = None if program else programs_db.running_for_arq(conn, uuid)
    if running is not None:
        raise exceptions.ARQBadState(
            uuid=uuid,
            state=f"{row.state}, waiting for program {running}",
            expected=f"a report on program {running} (PUT …/programs/{running})",
        )
    if (row.state, error is None) in ((BOUND, True), (BIND_FAILED, False)):
        return get(conn, uuid, Scope(None))
    if row.state != BIND_STARTED:
        raise exceptions.ARQBadState(uuid=uuid, state=row.state, expected=BIND_STARTED)
    now = models.utcnow()
    after: dict[str, Any] = {"state": BOUND if error is None else BIND_FAILED}
    if error is None:
        conn.execute(_Q_HOST_DONE, {"p_uuid": uuid, "p_now": now})
        status = nova_db.COMPLETED
    else:
        conn.execute(
            _Q_HOST_FAILED,
            {
                "p_uuid": uuid,
                "p_instance": row.instance_uuid,
                "p_reason": f"host {hostname}: {error}",
                "p_now": now,
            },
        )
        _release_handle(conn, row.attach_handle_id)
        status = nova_db.FAILED
        after["reason"] = f"host {hostname}: {error}"
    nova_db.record_resolution(conn, row.instance_uuid, uuid, status)
    audit.record(conn, "bind.end", "arq", uuid, {"state": row.state}, after, host=hostname)
    return get(conn, uuid, Scope(None))


def time_out_binds(
    conn: Connection, instance_uuid: str, uuids: list[str], *, reason: str
) -> dict[str, str | None]:
    """The deadline of a bind round passed: those of ``uuids`` still BindStarted for
    ``instance_uuid`` become BindFailed (handles released). Returns each ARQ's state
    now (None: deleted)."""
    rows = _rows_for_update(conn, uuids, Scope(None))
    now = models.utcnow()
    states: dict[str, str | None] = {}
    for uuid in uuids:
        row = rows.get(uuid)
        if row is None:
            states[uuid] = None
            continue
        states[uuid] = row.state
        if row.state == BIND_STARTED and row.instance_uuid == instance_uuid:
            won = conn.execute(
                _Q_HOST_FAILED,
                {"p_uuid": uuid, "p_instance": instance_uuid, "p_reason": reason, "p_now": now},
            ).rowcount
            if won == 1:
                _release_handle(conn, row.attach_handle_id)
                programs_db.fail_for_arq(conn, uuid, f"its bind timed out: {reason}")
                states[uuid] = BIND_FAILED
                after = {"state": BIND_FAILED, "reason": reason}
                audit.record(
                    conn, "bind.end", "arq", uuid, {"state": row.state}, after, host=row.hostname
                )
    return states


def report_program(
    conn: Connection, hostname: str, uuid: str, report: programs_db.Report
) -> dict[str, Any]:
    """The agent of ``hostname`` reports a program's progress
    (exosuit/db/programs.py ``record_report``); a bind's program that ends makes its
    ARQ Bound or BindFailed (handle released) through ``finish_host_work``, and Nova
    hears of it. An ARQ that stopped waiting meanwhile (unbound, deleted, timed out)
    is left as it is: the program's end still stands for the device."""
    program, ended = programs_db.record_report(conn, hostname, uuid, report)
    if ended and program["arq_uuid"] is not None:
        _end_bind_of(conn, program)
    return program


def time_out_program(conn: Connection, uuid: str, reason: str) -> bool:
    """Fail a program its host did not finish in time (the conductor's sweep), and the
    bind waiting for it. False when it had ended already."""
    program = programs_db.get(conn, uuid)
    if not programs_db.fail(conn, uuid, reason):
        return False
    if program["arq_uuid"] is not None:
        _end_bind_of(conn, programs_db.get(conn, uuid))
    return True


def _end_bind_of(conn: Connection, program: dict[str, Any]) -> None:
    error = None
    if program["state"] != programs_db.DONE:
        error = f"program {program['uuid']} of image {program['image_uuid']} failed: "
        error += program["reason"] or "no reason given"
    try:
        finish_host_work(conn, program["hostname"], program["arq_uuid"], error=error, program=True)
    except (exceptions.AcceleratorRequestNotFound, exceptions.ARQBadState):
        pass  # it stopped waiting (unbound, deleted, timed out): nothing left to end
