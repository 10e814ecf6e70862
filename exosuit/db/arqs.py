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
(``finish_host_work``) or its deadline passes (``time_out_binds``). Every bind
queues Nova's notification in its own transaction (exosuit/nova/events.py).
"""

from __future__ import annotations

import dataclasses
import json
import uuid as uuidlib

import sqlalchemy as sa

from exosuit import exceptions
from exosuit.db import models
from exosuit.db.pagination import Page, paginate
from exosuit.nova import events as nova_events

__all__ = [
    "BIND_SOURCES",
    "RESOLVED",
    "Binding",
    "BindResult",
    "bind",
    "create",
    "delete_by_instance",
    "delete_by_uuids",
    "finish_host_work",
    "get",
    "list_arqs",
    "time_out_binds",
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

_SELECT = (
    sa.select(
        arq,
        dp.c.name.label("device_profile_name"),
        ah.c.uuid.label("attach_handle_uuid"),
        ah.c.attach_type.label("attach_handle_type"),
        ah.c.attach_info.label("attach_handle_info"),
    )
    .select_from(arq.join(dp, arq.c.device_profile_id == dp.c.id).outerjoin(
        ah, arq.c.attach_handle_id == ah.c.id))
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


@dataclasses.dataclass
class BindResult:
    arq: dict
    error: str | None = None


def _to_dict(row) -> dict:
    data = dict(row._mapping)
    info = data.get("attach_handle_info")
    data["attach_handle_info"] = json.loads(info) if info else {}
    if data["state"] != BOUND:
        data["attach_handle_type"] = ""
        data["attach_handle_info"] = {}
        data["attach_handle_uuid"] = None
    return data


def _scoped(stmt, scope: Scope):
    if scope.project_id is not None:
        stmt = stmt.where(arq.c.project_id == scope.project_id)
    return stmt


# NOTE: the statements of the create/bind/unbind/delete paths are built once, with
# bound parameters: SQLAlchemy then skips building each statement and computing its
# cache key at every call, which cost more than the database round trip itself. The
# SQL is the same. Scoped statements come in pairs: all projects, one (p_project).
def _prebuilt(stmt) -> tuple:
    return stmt, stmt.where(arq.c.project_id == sa.bindparam("p_project"))


def _execute(conn, pair: tuple, scope: Scope, params: dict):
    if scope.project_id is None:
        return conn.execute(pair[0], params)
    return conn.execute(pair[1], {**params, "p_project": scope.project_id})


_UUIDS = sa.bindparam("p_uuids", expanding=True)
_NOW = sa.bindparam("p_now")
_Q_PROFILE = sa.select(dp.c.id, dp.c.profile_json).where(dp.c.name == sa.bindparam("p_name"))
_Q_INSERT = sa.insert(arq)
_Q_CREATED = _SELECT.where(arq.c.uuid.in_(_UUIDS))
_Q_GET = _prebuilt(_SELECT.where(arq.c.uuid == sa.bindparam("p_uuid")))
_Q_INSTANCE_STATES = _prebuilt(
    sa.select(arq.c.uuid, arq.c.state).where(arq.c.instance_uuid == sa.bindparam("p_instance")))
# Locked (see _rows_for_update).
_Q_ROWS = _prebuilt(sa.select(arq).where(arq.c.uuid.in_(_UUIDS)).with_for_update())
_Q_BY_INSTANCE = _prebuilt(
    sa.select(arq).where(arq.c.instance_uuid == sa.bindparam("p_instance"))
    .with_for_update())
_Q_BOUND_UUIDS = _prebuilt(
    sa.select(arq.c.uuid).where(arq.c.uuid.in_(_UUIDS), arq.c.instance_uuid.is_not(None)))
_Q_DEPLOYABLE = (
    sa.select(dep.c.id, dep.c.name, dep.c.bitstream_id, dev.c.hostname, dev.c.status,
              dev.c.presence, dev.c.uuid.label("device_uuid"))
    .select_from(dep.join(dev, dep.c.device_id == dev.c.id))
    .where(dep.c.rp_uuid == sa.bindparam("p_rp_uuid"))
)
_Q_FREE_HANDLE = (
    sa.select(ah.c.id)
    .where(ah.c.deployable_id == sa.bindparam("p_deployable_id"), ah.c.in_use.is_(False),
           ah.c.presence == "present")
    .order_by(ah.c.id)
    .limit(1)
)
_Q_FREE_HANDLE_SKIP_LOCKED = _Q_FREE_HANDLE.with_for_update(skip_locked=True)
_Q_TAKE_HANDLE = (
    sa.update(ah)
    .where(ah.c.id == sa.bindparam("p_id"), ah.c.in_use.is_(False))
    .values(in_use=True, updated_at=_NOW)
)
_Q_RELEASE_HANDLE = (
    sa.update(ah)
    .where(ah.c.id == sa.bindparam("p_id"), ah.c.in_use.is_(True))
    .values(in_use=False, updated_at=_NOW)
)
_Q_DELETE_LOST_HANDLE = sa.delete(ah).where(ah.c.id == sa.bindparam("p_id"),
                                            ah.c.presence == "lost")
_Q_DEVICE_OF_HANDLE = (
    sa.select(dev.c.id, dev.c.presence)
    .select_from(ah.join(dep, ah.c.deployable_id == dep.c.id).join(
        dev, dep.c.device_id == dev.c.id))
    .where(ah.c.id == sa.bindparam("p_id"))
)
_Q_OTHERS_BOUND = (
    sa.select(arq.c.uuid).where(
        arq.c.instance_uuid == sa.bindparam("p_instance"),
        arq.c.state.in_((BIND_STARTED, BOUND)),
        arq.c.uuid.not_in(_UUIDS),
    ).limit(1)
)
_Q_START_BIND = (
    sa.update(arq)
    .where(arq.c.uuid == sa.bindparam("p_uuid"), arq.c.state.in_(BIND_SOURCES))
    .values(state=BIND_STARTED, hostname=sa.bindparam("p_hostname"),
            device_rp_uuid=sa.bindparam("p_rp_uuid"), instance_uuid=sa.bindparam("p_instance"),
            reason=None, updated_at=_NOW)
)
_Q_START_BIND_WITH_PROJECT = _Q_START_BIND.values(project_id=sa.bindparam("p_project_id"))
_Q_END_BIND = (
    sa.update(arq)
    .where(arq.c.uuid == sa.bindparam("p_uuid"), arq.c.state == BIND_STARTED)
)
_Q_BOUND = _Q_END_BIND.values(state=BOUND, attach_handle_id=sa.bindparam("p_handle_id"),
                              deployable_id=sa.bindparam("p_deployable_id"), updated_at=_NOW)
_Q_BIND_FAILED = _Q_END_BIND.values(state=BIND_FAILED, reason=sa.bindparam("p_reason"),
                                    updated_at=_NOW)
_Q_PROFILE_GROUPS = sa.select(dp.c.id, dp.c.profile_json).where(
    dp.c.id.in_(sa.bindparam("p_ids", expanding=True)))
# Host-side work: the ARQ holds its handle while BindStarted, until the host's report.
_Q_WAIT_FOR_HOST = _Q_END_BIND.values(attach_handle_id=sa.bindparam("p_handle_id"),
                                      deployable_id=sa.bindparam("p_deployable_id"),
                                      updated_at=_NOW)
_Q_HOST_DONE = _Q_END_BIND.values(state=BOUND, updated_at=_NOW)
_Q_HOST_FAILED = _Q_END_BIND.where(arq.c.instance_uuid == sa.bindparam("p_instance")).values(
    state=BIND_FAILED, reason=sa.bindparam("p_reason"), attach_handle_id=None,
    deployable_id=None, updated_at=_NOW)
_Q_UNBIND = (
    sa.update(arq)
    .where(arq.c.id == sa.bindparam("p_id"), arq.c.state.in_(UNBIND_SOURCES))
    .values(state=UNBOUND, hostname=None, device_rp_uuid=None, instance_uuid=None,
            attach_handle_id=None, deployable_id=None, updated_at=_NOW)
)
_Q_DELETE = sa.delete(arq).where(arq.c.id == sa.bindparam("p_id"))


def units_per_group(group: dict, handles_per_unit: dict[str, int]) -> int:
    """How many ARQs a profile group makes: the sum of its resource amounts, times
    N when the group requires a trait configured in ``attach_handles_per_unit``."""
    count = sum(int(v) for k, v in group.items() if k.startswith("resources:"))
    for trait, factor in handles_per_unit.items():
        if group.get(f"trait:{trait}") == "required":
            count *= factor
    return count


def create(conn, *, profile_name: str, project_id: str | None,
           handles_per_unit: dict[str, int]) -> list[dict]:
    """Create the ARQs of every group of the named profile (state Initial)."""
    row = conn.execute(_Q_PROFILE, {"p_name": profile_name}).first()
    if row is None:
        raise exceptions.DeviceProfileNotFound(ident=profile_name)
    groups = json.loads(row.profile_json).get("groups", [])
    now = models.utcnow()
    values = []
    for group_id, group in enumerate(groups):
        for _ in range(units_per_group(group, handles_per_unit)):
            values.append({
                "uuid": str(uuidlib.uuid4()),
                "project_id": project_id,
                "state": INITIAL,
                "device_profile_id": row.id,
                "device_profile_group_id": group_id,
                "created_at": now,
            })
    if not values:
        raise exceptions.Invalid(
            reason=f"device profile {profile_name} requests no resources"
        )
    conn.execute(_Q_INSERT, values)
    uuids = [v["uuid"] for v in values]
    rows = conn.execute(_Q_CREATED, {"p_uuids": uuids}).all()
    order = {u: i for i, u in enumerate(uuids)}
    return sorted((_to_dict(r) for r in rows), key=lambda a: order[a["uuid"]])


def get(conn, uuid: str, scope: Scope) -> dict:
    row = _execute(conn, _Q_GET, scope, {"p_uuid": uuid}).first()
    if row is None:
        raise exceptions.AcceleratorRequestNotFound(uuid=uuid)
    return _to_dict(row)


def list_arqs(conn, scope: Scope, *, instance: str | None = None,
              states: tuple[str, ...] | None = None, hostname: str | None = None,
              device_profile_name: str | None = None, page: Page | None = None) -> list[dict]:
    stmt = _scoped(_SELECT, scope)
    if instance is not None:
        stmt = stmt.where(arq.c.instance_uuid == instance)
    if states is not None:
        stmt = stmt.where(arq.c.state.in_(states))
    if hostname is not None:
        stmt = stmt.where(arq.c.hostname == hostname)
    if device_profile_name is not None:
        stmt = stmt.where(dp.c.name == device_profile_name)
    stmt = paginate(conn, stmt, arq, page, SORT_COLUMNS)
    return [_to_dict(r) for r in conn.execute(stmt)]


def instance_states(conn, instance: str, scope: Scope) -> list[tuple[str, str]]:
    rows = _execute(conn, _Q_INSTANCE_STATES, scope, {"p_instance": instance})
    return [tuple(r) for r in rows]


def _rows_for_update(conn, uuids: list[str], scope: Scope) -> dict[str, sa.Row]:
    # Locked: a bind, unbind or delete of one of them running meanwhile has committed
    # when this returns, so the rows acted on are current (an unbind or delete that
    # acted on a stale row would leave the handle a concurrent bind took in use).
    rows = _execute(conn, _Q_ROWS, scope, {"p_uuids": uuids})
    return {row.uuid: row for row in rows}


def _check_found(rows: dict, uuids: list[str]) -> None:
    missing = [u for u in uuids if u not in rows]
    if missing:
        raise exceptions.AcceleratorRequestNotFound(uuid=", ".join(missing))


def _find_deployable(conn, binding: Binding) -> tuple[sa.Row | None, str | None]:
    """The deployable a bind names, or the reason it cannot take the bind."""
    row = conn.execute(_Q_DEPLOYABLE, {"p_rp_uuid": binding.device_rp_uuid}).first()
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
    return row, None


def _take_handle(conn, deployable_id: int, skip_locked: bool) -> int | None:
    """Take a free attach handle of the deployable with a compare-and-set."""
    stmt = _Q_FREE_HANDLE_SKIP_LOCKED if skip_locked else _Q_FREE_HANDLE
    while True:
        candidate = conn.execute(stmt, {"p_deployable_id": deployable_id}).scalar()
        if candidate is None:
            return None
        taken = conn.execute(
            _Q_TAKE_HANDLE, {"p_id": candidate, "p_now": models.utcnow()}
        ).rowcount
        if taken == 1:
            return candidate


def _release_handle(conn, handle_id: int | None) -> None:
    if handle_id is None:
        return
    conn.execute(_Q_RELEASE_HANDLE, {"p_id": handle_id, "p_now": models.utcnow()})
    _collect_lost_device(conn, handle_id)
    # A handle its host stopped reporting while it was held goes once released.
    conn.execute(_Q_DELETE_LOST_HANDLE, {"p_id": handle_id})


def _collect_lost_device(conn, handle_id: int) -> None:
    """A lost device is deleted once its last held attach handle is released."""
    row = conn.execute(_Q_DEVICE_OF_HANDLE, {"p_id": handle_id}).first()
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
            sa.update(arq).where(arq.c.deployable_id.in_(
                sa.select(dep.c.id).where(dep.c.device_id == row.id)
            )).values(deployable_id=None)
        )
        conn.execute(sa.delete(dev).where(dev.c.id == row.id))
        # Its providers leave Placement now, not at the next drift repair.
        from exosuit.placement.state import enqueue_sync

        enqueue_sync(conn, locked.hostname)


def bind(conn, bindings: list[Binding], scope: Scope, *, skip_locked: bool,
         bind_timeout: float = 60.0) -> list[BindResult]:
    """Bind ARQs: all move to BindStarted or none does; then each ends Bound or BindFailed,
    or stays BindStarted while its host works for it (up to ``bind_timeout`` seconds).

    Raises AcceleratorRequestNotFound, ARQBadState or InstanceAlreadyBound (and
    changes nothing) when the request itself is wrong. A bind that cannot be
    satisfied (unknown provider, wrong host, disabled or lost device, no free
    attach handle) leaves its ARQ BindFailed with the reason, and is reported
    in the result. Nova's notification of each instance's binds is queued here.
    """
    uuids = [b.uuid for b in bindings]
    rows = _rows_for_update(conn, uuids, scope)
    _check_found(rows, uuids)
    results: dict[str, BindResult] = {}
    pending = []
    for binding in bindings:
        row = rows[binding.uuid]
        same = (row.hostname, row.device_rp_uuid, row.instance_uuid) == (
            binding.hostname, binding.device_rp_uuid, binding.instance_uuid)
        if row.state in (BOUND, BIND_STARTED) and same:
            # The same bind again (done, or waiting for its host): nothing to do.
            continue
        if row.state not in BIND_SOURCES:
            raise exceptions.ARQBadState(uuid=row.uuid, state=row.state,
                                         expected=" or ".join(BIND_SOURCES))
        pending.append(binding)
    for instance in {b.instance_uuid for b in pending}:
        others = conn.execute(_Q_OTHERS_BOUND, {"p_instance": instance, "p_uuids": uuids}).first()
        if others is not None:
            raise exceptions.InstanceAlreadyBound(instance=instance)
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
            raise exceptions.ARQBadState(uuid=binding.uuid, state=state,
                                         expected=" or ".join(BIND_SOURCES))
    groups = _profile_groups(conn, [rows[b.uuid] for b in pending])
    for binding in pending:
        row = rows[binding.uuid]
        group = groups.get((row.device_profile_id, row.device_profile_group_id), {})
        error = _complete_bind(conn, binding, skip_locked, group)
        results[binding.uuid] = BindResult(arq={}, error=error)
    out = []
    for uuid in uuids:
        result = results.get(uuid) or BindResult(arq={})
        result.arq = get(conn, uuid, Scope(None))
        out.append(result)
    _queue_notifications(conn, pending, results, bind_timeout)
    return out


def _profile_groups(conn, rows) -> dict[tuple[int, int], dict]:
    """(profile id, group index) → the group, for the profiles of ``rows``."""
    ids = sorted({row.device_profile_id for row in rows})
    if not ids:
        return {}
    groups = {}
    for profile in conn.execute(_Q_PROFILE_GROUPS, {"p_ids": ids}):
        for index, group in enumerate(json.loads(profile.profile_json).get("groups", [])):
            groups[(profile.id, index)] = group
    return groups


def _needs_host_work(group: dict, deployable) -> bool:
    """Whether the host must work before the bind is Bound (doc/arq-states.md): the
    group asks for a bitstream the deployable does not have, or for a function, as
    Cyborg programs FPGAs during a bind."""
    wanted = group.get("accel:bitstream_id")
    if wanted is not None and wanted != deployable.bitstream_id:
        return True
    return "accel:function_id" in group


def _queue_notifications(conn, pending: list[Binding], results: dict[str, BindResult],
                         bind_timeout: float) -> None:
    """One Nova notification job per instance of this bind (exosuit/nova/events.py)."""
    rounds: dict[str, list[tuple[str, str | None]]] = {}
    for binding in pending:
        state = results[binding.uuid].arq["state"]
        status = None if state == BIND_STARTED else (
            nova_events.COMPLETED if state == BOUND else nova_events.FAILED)
        rounds.setdefault(binding.instance_uuid, []).append((binding.uuid, status))
    for instance, statuses in rounds.items():
        nova_events.enqueue_round(conn, instance, statuses, bind_timeout=bind_timeout)


def _complete_bind(conn, binding: Binding, skip_locked: bool, group: dict) -> str | None:
    deployable, error = _find_deployable(conn, binding)
    handle_id = None
    if deployable is not None:
        handle_id = _take_handle(conn, deployable.id, skip_locked)
        if handle_id is None:
            error = f"no free attach handle on deployable {deployable.name}"
        else:
            # Look again now that the handle is ours: an agent report that marked the
            # device lost meanwhile has committed (it locks the handles before it
            # decides), so this read sees it; a later one waits for this bind.
            _, error = _find_deployable(conn, binding)
            if error is not None:
                _release_handle(conn, handle_id)
                handle_id = None
    now = models.utcnow()
    if error is None:
        stmt = _Q_WAIT_FOR_HOST if _needs_host_work(group, deployable) else _Q_BOUND
        conn.execute(stmt, {"p_uuid": binding.uuid, "p_handle_id": handle_id,
                            "p_deployable_id": deployable.id, "p_now": now})
        return None
    conn.execute(_Q_BIND_FAILED, {"p_uuid": binding.uuid, "p_reason": error, "p_now": now})
    return error


def unbind(conn, uuids: list[str], scope: Scope) -> list[dict]:
    """Unbind ARQs: release their attach handles, clear the binding, state Unbound."""
    rows = _rows_for_update(conn, uuids, scope)
    _check_found(rows, uuids)
    for uuid in uuids:
        row = rows[uuid]
        if row.state not in UNBIND_SOURCES:
            raise exceptions.ARQBadState(uuid=uuid, state=row.state,
                                         expected=" or ".join(UNBIND_SOURCES))
    for uuid in uuids:
        _unbind_one(conn, rows[uuid])
    return [get(conn, u, Scope(None)) for u in uuids]


def _unbind_one(conn, row) -> None:
    won = conn.execute(_Q_UNBIND, {"p_id": row.id, "p_now": models.utcnow()}).rowcount
    if won == 1:
        _release_handle(conn, row.attach_handle_id)
        _abandon_host_work(conn, row)


def _delete_rows(conn, rows) -> None:
    for row in rows:
        deleted = conn.execute(_Q_DELETE, {"p_id": row.id}).rowcount
        if deleted == 1:
            _release_handle(conn, row.attach_handle_id)
            _abandon_host_work(conn, row)


def _abandon_host_work(conn, row) -> None:
    """A bind waiting for its host that is unbound or deleted has failed: Nova hears so
    now, not at the deadline."""
    if row.state == BIND_STARTED:
        nova_events.record_resolution(conn, row.instance_uuid, row.uuid, nova_events.FAILED)


def delete_by_uuids(conn, uuids: list[str], scope: Scope) -> list[str]:
    """Delete the ARQs that exist (releasing their handles); return the missing uuids."""
    rows = _rows_for_update(conn, uuids, scope)
    _delete_rows(conn, rows.values())
    return [u for u in uuids if u not in rows]


def bound_uuids(conn, uuids: list[str], scope: Scope) -> list[str]:
    """Those of ``uuids`` that belong to an instance (need a service token to delete)."""
    return [r.uuid for r in _execute(conn, _Q_BOUND_UUIDS, scope, {"p_uuids": uuids})]


def delete_by_instance(conn, instance: str, scope: Scope) -> int:
    """Delete every ARQ of the instance (idempotent); return how many."""
    rows = _execute(conn, _Q_BY_INSTANCE, scope, {"p_instance": instance}).all()
    _delete_rows(conn, rows)
    return len(rows)


def finish_host_work(conn, hostname: str, uuid: str, *, error: str | None) -> dict:
    """The agent of ``hostname`` reports the work a BindStarted ARQ waits for: done
    (``error`` None: Bound) or failed (BindFailed with ``error``, handle released).
    Nova's notification learns it in this transaction.

    Idempotent: the same report again returns the ARQ unchanged. Raises
    AcceleratorRequestNotFound for an ARQ that does not exist or is not bound to
    this host, and ARQBadState when it waits for nothing (e.g. it timed out).
    """
    row = _rows_for_update(conn, [uuid], Scope(None)).get(uuid)
    if row is None or row.hostname != hostname:
        raise exceptions.AcceleratorRequestNotFound(uuid=uuid)
    if (row.state, error is None) in ((BOUND, True), (BIND_FAILED, False)):
        return get(conn, uuid, Scope(None))
    if row.state != BIND_STARTED:
        raise exceptions.ARQBadState(uuid=uuid, state=row.state, expected=BIND_STARTED)
    now = models.utcnow()
    if error is None:
        conn.execute(_Q_HOST_DONE, {"p_uuid": uuid, "p_now": now})
        status = nova_events.COMPLETED
    else:
        conn.execute(_Q_HOST_FAILED, {"p_uuid": uuid, "p_instance": row.instance_uuid,
                                      "p_reason": f"host {hostname}: {error}", "p_now": now})
        _release_handle(conn, row.attach_handle_id)
        status = nova_events.FAILED
    nova_events.record_resolution(conn, row.instance_uuid, uuid, status)
    return get(conn, uuid, Scope(None))


def time_out_binds(conn, instance_uuid: str, uuids: list[str], *,
                   reason: str) -> dict[str, str | None]:
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
            won = conn.execute(_Q_HOST_FAILED, {"p_uuid": uuid, "p_instance": instance_uuid,
                                                "p_reason": reason, "p_now": now}).rowcount
            if won == 1:
                _release_handle(conn, row.attach_handle_id)
                states[uuid] = BIND_FAILED
    return states
