"""Programs: loading an image onto a deployable, as desired state for its host's agent.

A program is asked for by an operator (``start``: the whole device) or by a bind
(``queue_for_arq``: the ARQ waits, holding its attach handle), and run by the
host's agent, which reports its progress (``record_report``). doc/programming.md
is the contract.

    pending ──► fetching ──► programming ──► verifying ──► done
       └────────────┴─────────────┴───────────────┴──────► failed

Every state change is one compare-and-set (``UPDATE … WHERE state = …``), and so
is the deployable's ``program_uuid``, set while the program runs (``WHERE
program_uuid IS NULL``) and cleared when it ends (``WHERE program_uuid = :it``):
at most one program runs on a deployable. A program refuses a device whose attach
handles are held, after locking them (as exosuit/db/inventory.py does), so a
concurrent bind either committed first (and is seen) or waits and then sees
``program_uuid`` (exosuit/db/arqs.py looks again after taking its handle).

Each change of what a host must run bumps ``hosts.desired_generation`` (the
agent's ETag) and queues the host's Placement sync: a deployable being programmed
is fully reserved (exosuit/placement/providers.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import uuid as uuidlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import audit, changes, models
from exosuit.db.placement import enqueue_sync

__all__ = [
    "DONE",
    "ENDED",
    "FAILED",
    "RUNNING",
    "STATES",
    "SWEEP",
    "Image",
    "Loaded",
    "Report",
    "Started",
    "desired_state",
    "expired",
    "fail",
    "fail_for_arq",
    "generation",
    "get",
    "latest_of_deployable",
    "program_formats",
    "queue_for_arq",
    "record_report",
    "running_for_arq",
    "running_programs",
    "start",
]

PENDING = "pending"
FETCHING = "fetching"
PROGRAMMING = "programming"
VERIFYING = "verifying"
DONE = "done"
FAILED = "failed"
RUNNING = (PENDING, FETCHING, PROGRAMMING, VERIFYING)
ENDED = (DONE, FAILED)
STATES = RUNNING + ENDED
# The states in which the agent may have touched the device.
_TOUCHING = (PROGRAMMING, VERIFYING)
ALREADY_LOADED = "already loaded"

# The periodic conductor job that fails programs the agent did not finish in time
# (exosuit/conductor/programs.py).
SWEEP = "program_timeout"

prog = models.programs
dep = models.deployables
dev = models.devices
cpid = models.controlpath_ids
attr = models.attributes
ah = models.attach_handles
arq = models.accelerator_requests
claims = models.claims
hosts = models.hosts
images = models.images


@dataclasses.dataclass(frozen=True)
class Image:
    """What a program loads, as its source described it (exosuit.glance.sources.ImageRef)."""

    uuid: str
    source: str  # exosuit | glance
    format: str
    size: int
    sha256: str
    function_id: str | None = None
    interface_id: str | None = None


@dataclasses.dataclass(frozen=True)
class Loaded:
    """What the agent read back from the device after loading."""

    function_id: str | None = None
    interface_id: str | None = None
    image_uuid: str | None = None  # when the driver knows it


@dataclasses.dataclass(frozen=True)
class Report:
    """One progress report of the agent (PUT /agent/v1/hosts/{hostname}/programs/{uuid})."""

    state: str
    reason: str | None = None
    restored: bool | None = None
    loaded: Loaded | None = None


@dataclasses.dataclass(frozen=True)
class Started:
    """What ``start`` did: ``created`` False when it found the same program running, or
    the image already loaded (a ``done`` program that changed nothing)."""

    program: dict[str, Any]
    created: bool


_SELECT = (
    sa.select(
        prog,
        dep.c.uuid.label("deployable_uuid"),
        dev.c.uuid.label("device_uuid"),
    )
    .select_from(
        prog.outerjoin(dep, prog.c.deployable_id == dep.c.id).outerjoin(
            dev, dep.c.device_id == dev.c.id
        )
    )
    .order_by(prog.c.id)
)
_Q_GET = _SELECT.where(prog.c.uuid == sa.bindparam("p_uuid"))
_Q_LOCK = sa.select(prog).where(prog.c.uuid == sa.bindparam("p_uuid")).with_for_update()
_Q_DEPLOYABLE = (
    sa.select(
        dep.c.id,
        dep.c.uuid,
        dep.c.name,
        dep.c.driver_name,
        dep.c.bitstream_id,
        dep.c.program_uuid,
        dep.c.device_id,
        dev.c.hostname,
        dev.c.status,
        dev.c.presence,
        dev.c.uuid.label("device_uuid"),
    )
    .select_from(dep.join(dev, dep.c.device_id == dev.c.id))
    .where(dep.c.id == sa.bindparam("p_id"))
)
_Q_LOCK_DEPLOYABLE = (
    sa.select(dep.c.id).where(dep.c.uuid == sa.bindparam("p_uuid")).with_for_update()
)
_Q_FORMATS = sa.select(attr.c.value, attr.c.source).where(
    attr.c.deployable_id == sa.bindparam("p_id"), attr.c.key == "program_formats"
)
_Q_LOCK_DEVICE_HANDLES = (
    sa.select(ah.c.id)
    .where(
        ah.c.deployable_id.in_(sa.select(dep.c.id).where(dep.c.device_id == sa.bindparam("p_dev")))
    )
    .with_for_update()
)
_Q_HELD = (
    sa.select(
        ah.c.id,
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
    .where(dep.c.device_id == sa.bindparam("p_dev"), ah.c.in_use.is_(True))
    .order_by(ah.c.id)
)
_Q_SET_RUNNING = (
    sa.update(dep)
    .where(dep.c.id == sa.bindparam("p_id"), dep.c.program_uuid.is_(None))
    .values(program_uuid=sa.bindparam("p_program"), updated_at=sa.bindparam("p_now"))
)
_Q_BUMP = (
    sa.update(hosts)
    .where(hosts.c.hostname == sa.bindparam("p_hostname"))
    .values(desired_generation=hosts.c.desired_generation + 1)
)
_Q_STATE = (
    sa.update(prog)
    .where(prog.c.id == sa.bindparam("p_id"), prog.c.state == sa.bindparam("p_from"))
    .values(state=sa.bindparam("p_to"), updated_at=sa.bindparam("p_now"))
)
_Q_END = (
    sa.update(prog)
    .where(prog.c.id == sa.bindparam("p_id"), prog.c.state.in_(RUNNING))
    .values(
        state=sa.bindparam("p_to"),
        reason=sa.bindparam("p_reason"),
        restored=sa.bindparam("p_restored"),
        finished_at=sa.bindparam("p_now"),
        updated_at=sa.bindparam("p_now"),
    )
)
_Q_CLEAR_RUNNING = sa.update(dep).where(
    dep.c.id == sa.bindparam("p_id"), dep.c.program_uuid == sa.bindparam("p_program")
)


def _program_dict(row: sa.Row[*tuple[Any, ...]]) -> dict[str, Any]:
    return dict(row._mapping)


def get(conn: Connection, uuid: str) -> dict[str, Any]:
    """A program with its deployable's and device's uuids (None once they are gone)."""
    row = conn.execute(_Q_GET, {"p_uuid": uuid}).first()
    if row is None:
        raise exceptions.ProgramNotFound(uuid=uuid)
    return _program_dict(row)


def latest_of_deployable(conn: Connection, deployable_uuid: str) -> dict[str, Any]:
    """The deployable's latest program. DeployableNotFound, or ProgramNotFound when it
    was never programmed through Exosuit."""
    found = conn.execute(sa.select(dep.c.id).where(dep.c.uuid == deployable_uuid)).scalar()
    if found is None:
        raise exceptions.DeployableNotFound(uuid=deployable_uuid)
    row = conn.execute(
        _SELECT.where(prog.c.deployable_id == found).order_by(None).order_by(prog.c.id.desc())
    ).first()
    if row is None:
        raise exceptions.ProgramNotFound(uuid=f"of deployable {deployable_uuid}")
    return _program_dict(row)


def running_for_arq(conn: Connection, arq_uuid: str) -> str | None:
    """The uuid of the running program a bind waits for, if any."""
    found: str | None = conn.execute(
        sa.select(prog.c.uuid).where(prog.c.arq_uuid == arq_uuid, prog.c.state.in_(RUNNING))
    ).scalar()
    return found


def generation(conn: Connection, hostname: str) -> int:
    """The host's desired-state generation (0 for a host never seen)."""
    value = conn.execute(
        sa.select(hosts.c.desired_generation).where(hosts.c.hostname == hostname)
    ).scalar()
    return int(value or 0)


# -- starting ------------------------------------------------------------------------------


def program_formats(conn: Connection, deployable_id: int) -> list[str] | None:
    """The image formats the deployable's driver loads (its ``program_formats``
    attribute; an operator's wins over the agent's); None when it cannot program."""
    value = None
    for row in conn.execute(_Q_FORMATS, {"p_id": deployable_id}):
        if value is None or row.source == "api":
            value = row.value
    if value is None:
        return None
    return [f.strip() for f in value.split(",") if f.strip()]


def _deployable(conn: Connection, deployable_id: int) -> sa.Row[*tuple[Any, ...]]:
    return conn.execute(_Q_DEPLOYABLE, {"p_id": deployable_id}).one()


def _refusal(
    conn: Connection, deployable: sa.Row[*tuple[Any, ...]], image: Image
) -> exceptions.ExosuitError | None:
    """Why the deployable cannot load the image now (unavailable, unsupported), or None."""
    uuid = deployable.uuid
    if deployable.presence != "present":
        return exceptions.ProgramUnavailable(
            uuid=uuid, reason=f"device {deployable.device_uuid} is {deployable.presence}"
        )
    if deployable.status != "enabled":
        return exceptions.ProgramUnavailable(
            uuid=uuid,
            reason=f"device {deployable.device_uuid} is disabled (status {deployable.status})",
        )
    formats = program_formats(conn, deployable.id)
    if formats is None:
        return exceptions.ProgramUnsupported(
            uuid=uuid, reason=f"its driver {deployable.driver_name} cannot program it"
        )
    if image.format not in formats:
        return exceptions.ProgramUnsupported(
            uuid=uuid,
            reason=f"image {image.uuid} is in format {image.format}; its driver "
            f"{deployable.driver_name} loads {', '.join(formats) or 'none'}",
        )
    return None


def _holders(conn: Connection, device_id: int, *, own_handle: int | None = None) -> list[str]:
    """Who holds attach handles of the device (but ``own_handle``), the handles locked
    first: a bind that took one concurrently has then committed, and is seen."""
    conn.execute(_Q_LOCK_DEVICE_HANDLES, {"p_dev": device_id})
    return [_holder(h) for h in conn.execute(_Q_HELD, {"p_dev": device_id}) if h.id != own_handle]


def _holder(h: sa.Row[*tuple[Any, ...]]) -> str:
    """A held handle's holder, in words: a claim, or an ARQ (of its instance)."""
    if h.claim_uuid:
        return f"claim {h.claim_uuid} (ARQ {h.arq_uuid})"
    return f"ARQ {h.arq_uuid}" + (f" of instance {h.instance_uuid}" if h.instance_uuid else "")


def _insert(
    conn: Connection,
    deployable: sa.Row[*tuple[Any, ...]],
    image: Image,
    *,
    state: str,
    arq_uuid: str | None = None,
    project_id: str | None = None,
    user_id: str | None = None,
    reason: str | None = None,
) -> str:
    now = models.utcnow()
    uuid = str(uuidlib.uuid4())
    conn.execute(
        sa.insert(prog).values(
            uuid=uuid,
            deployable_id=deployable.id,
            hostname=deployable.hostname,
            image_uuid=image.uuid,
            image_source=image.source,
            image_format=image.format,
            image_sha256=image.sha256,
            image_size=image.size,
            function_id=image.function_id,
            image_interface_id=image.interface_id,
            state=state,
            reason=reason,
            previous_image_uuid=deployable.bitstream_id,
            arq_uuid=arq_uuid,
            project_id=project_id,
            user_id=user_id,
            finished_at=now if state in ENDED else None,
            created_at=now,
        )
    )
    return uuid


def _queue(
    conn: Connection, deployable: sa.Row[*tuple[Any, ...]], image: Image, **who: str | None
) -> str | None:
    """Insert a pending program and make it the deployable's running one (compare-and-
    set); the host's desired state and Placement follow. None when another program
    took the deployable first."""
    uuid = _insert(conn, deployable, image, state=PENDING, **who)
    params = {"p_id": deployable.id, "p_program": uuid, "p_now": models.utcnow()}
    took = conn.execute(_Q_SET_RUNNING, params).rowcount == 1
    changes.mark(conn, changes.DEPLOYABLES)
    if not took:
        conn.execute(sa.delete(prog).where(prog.c.uuid == uuid))
        return None
    _changed(conn, deployable.hostname)
    after = {"program": uuid, "image": image.uuid, "arq_uuid": who.get("arq_uuid")}
    audit.record(
        conn,
        "program.start",
        "deployable",
        deployable.uuid,
        {"image": deployable.bitstream_id},
        after,
        host=deployable.hostname,
    )
    return uuid


def _changed(conn: Connection, hostname: str) -> None:
    """What the host must run changed: a new generation, and its providers' reservation."""
    conn.execute(_Q_BUMP, {"p_hostname": hostname})
    changes.mark(conn, changes.HOST_REPORTS)
    enqueue_sync(conn, hostname)


def start(
    conn: Connection,
    deployable_uuid: str,
    image: Image,
    *,
    project_id: str | None = None,
    user_id: str | None = None,
) -> Started:
    """An operator's program of a whole deployable (doc/programming.md).

    Idempotent: the image already loaded (and nothing running) gives a ``done``
    program that changed nothing; the same image asked again while its program runs
    gives that program. Raises DeployableNotFound, ProgramBusy (another program
    runs), ProgramUnavailable, ProgramUnsupported, ProgramInUse (an attach handle
    of the device is held: drain it first).
    """
    # Locked: two requests for one deployable are decided one after the other.
    found = conn.execute(_Q_LOCK_DEPLOYABLE, {"p_uuid": deployable_uuid}).scalar()
    if found is None:
        raise exceptions.DeployableNotFound(uuid=deployable_uuid)
    deployable = _deployable(conn, found)
    if deployable.program_uuid is not None:
        running = get(conn, deployable.program_uuid)
        same = running["image_uuid"] == image.uuid and running["arq_uuid"] is None
        if same and running["state"] in RUNNING:
            return Started(running, created=False)
        raise exceptions.ProgramBusy(uuid=deployable_uuid, program=deployable.program_uuid)
    if deployable.bitstream_id == image.uuid:
        done = _insert(
            conn,
            deployable,
            image,
            state=DONE,
            reason=ALREADY_LOADED,
            project_id=project_id,
            user_id=user_id,
        )
        return Started(get(conn, done), created=False)
    refusal = _refusal(conn, deployable, image)
    if refusal is not None:
        raise refusal
    holders = _holders(conn, deployable.device_id)
    if holders:
        # The advice before the list, which can be long (a client may cut it).
        raise exceptions.ProgramInUse(
            f"Deployable {deployable_uuid} cannot be programmed while its device is in use; "
            f"drain it first: {'; '.join(holders)}."
        )
    uuid = _queue(conn, deployable, image, project_id=project_id, user_id=user_id)
    if uuid is None:  # cannot happen while the deployable is locked; said rather than assumed
        raise exceptions.ProgramBusy(uuid=deployable_uuid, program="(another)")
    return Started(get(conn, uuid), created=True)


def queue_for_arq(
    conn: Connection,
    deployable_id: int,
    image: Image,
    *,
    arq_uuid: str,
    project_id: str | None,
    own_handle: int,
) -> str | None:
    """A bind's program: queue it for the ARQ that holds ``own_handle`` of the
    deployable. Returns why it cannot be (the bind fails with it), or None."""
    deployable = _deployable(conn, deployable_id)
    refusal = _refusal(conn, deployable, image)
    if refusal is not None:
        return refusal.message
    holders = _holders(conn, deployable.device_id, own_handle=own_handle)
    if holders:
        return (
            f"device {deployable.device_uuid} must be programmed with image {image.uuid} "
            f"but is in use: {'; '.join(holders)}"
        )
    if _queue(conn, deployable, image, arq_uuid=arq_uuid, project_id=project_id) is None:
        return f"deployable {deployable.name} is being programmed for another request"
    return None


# -- reports and endings ----------------------------------------------------------------------


def _id(value: str) -> str:
    """An id as drivers may spell it (a GUID with or without dashes or braces, any case)."""
    return re.sub(r"[^0-9A-Z]", "", value.upper())


def _mismatch(row: sa.Row[*tuple[Any, ...]], loaded: Loaded | None) -> str | None:
    """Why what the agent read back is not the image (ids both sides know), or None."""
    if loaded is None:
        return None
    for what, wanted, found in (
        ("image", row.image_uuid, loaded.image_uuid),
        ("function", row.function_id, loaded.function_id),
        ("interface", row.image_interface_id, loaded.interface_id),
    ):
        if wanted and found and _id(wanted) != _id(found):
            return (
                f"the device reports {what} id {found} after loading image {row.image_uuid}, "
                f"whose {what} id is {wanted}"
            )
    return None


def record_report(
    conn: Connection, hostname: str, uuid: str, report: Report
) -> tuple[dict[str, Any], bool]:
    """The agent of ``hostname`` reports a program's progress; returns the program and
    whether this report ended it.

    Idempotent: the same report again, or an earlier state (a late retry), changes
    nothing. ``done`` whose ``loaded`` ids contradict the image's is recorded as a
    failure (nothing restored: the device is disabled). Raises ProgramNotFound for a
    program not on this host, ProgramEnded for a report that contradicts its end.
    """
    row = conn.execute(_Q_LOCK, {"p_uuid": uuid}).first()
    if row is None or row.hostname != hostname:
        raise exceptions.ProgramNotFound(uuid=uuid)
    if row.state in ENDED:
        if row.state == report.state:
            return get(conn, uuid), False
        raise exceptions.ProgramEnded(uuid=uuid, state=row.state)
    if report.state in RUNNING:
        if RUNNING.index(report.state) > RUNNING.index(row.state):
            params = {"p_id": row.id, "p_from": row.state, "p_to": report.state}
            conn.execute(_Q_STATE, {**params, "p_now": models.utcnow()})
        return get(conn, uuid), False
    if report.state == DONE:
        mismatch = _mismatch(row, report.loaded)
        if mismatch is None:
            _end(conn, row, DONE, report.reason, None)
        else:
            _end(conn, row, FAILED, mismatch, False)
    else:
        reason = report.reason or "the host could not load the image"
        _end(conn, row, FAILED, reason, report.restored)
    return get(conn, uuid), True


def fail(conn: Connection, uuid: str, reason: str) -> bool:
    """Fail a running program the agent did not finish (timed out, its bind gone). The
    device is left alone unless the agent may have been loading it: then what it
    holds is unknown, and it is disabled. False when it had ended already."""
    row = conn.execute(_Q_LOCK, {"p_uuid": uuid}).first()
    if row is None or row.state in ENDED:
        return False
    restored = False if row.state in _TOUCHING else None
    return _end(conn, row, FAILED, reason, restored)


def fail_for_arq(conn: Connection, arq_uuid: str, reason: str) -> bool:
    """``fail`` the running program a bind waits for, if any."""
    uuid = running_for_arq(conn, arq_uuid)
    return uuid is not None and fail(conn, uuid, reason)


def _end(
    conn: Connection,
    row: sa.Row[*tuple[Any, ...]],
    state: str,
    reason: str | None,
    restored: bool | None,
) -> bool:
    """End a program (compare-and-set on its running state) and free its deployable:
    done loads its image (``bitstream_id``); a failure that could not restore the
    previous image disables the device with the reason, never half-programmed."""
    now = models.utcnow()
    params = {"p_id": row.id, "p_to": state, "p_reason": reason, "p_now": now}
    if conn.execute(_Q_END, {**params, "p_restored": restored}).rowcount != 1:
        return False
    if row.deployable_id is not None:
        values: dict[str, Any] = {"program_uuid": None, "updated_at": now}
        if state == DONE:
            values["bitstream_id"] = row.image_uuid
        elif restored is False:
            values["bitstream_id"] = None
            _disable_device(conn, row, reason)
        conn.execute(
            _Q_CLEAR_RUNNING.values(**values), {"p_id": row.deployable_id, "p_program": row.uuid}
        )
        changes.mark(conn, changes.DEPLOYABLES)
        _record_end(conn, row, state, reason, values.get("bitstream_id", row.previous_image_uuid))
    _changed(conn, row.hostname)
    return True


def _record_end(
    conn: Connection, row: sa.Row[*tuple[Any, ...]], state: str, reason: str | None, image: Any
) -> None:
    """The audit record of a program's end, on its deployable (``image``: what it holds
    now; a failure that could not restore it disabled the device)."""
    deployable = conn.execute(sa.select(dep.c.uuid).where(dep.c.id == row.deployable_id)).scalar()
    before = {"program": row.uuid, "state": row.state, "image": row.previous_image_uuid}
    after = {"state": state, "reason": reason, "image": image}
    audit.record(conn, "program.end", "deployable", deployable, before, after, host=row.hostname)


def _disable_device(conn: Connection, row: sa.Row[*tuple[Any, ...]], reason: str | None) -> None:
    device_id = sa.select(dep.c.device_id).where(dep.c.id == row.deployable_id).scalar_subquery()
    conn.execute(
        sa.update(dev)
        .where(dev.c.id == device_id)
        .values(
            status="maintaining",
            status_reason=(
                f"program {row.uuid} of image {row.image_uuid} failed and the previous image "
                f"could not be restored: {reason}. Program it again once enabled."
            ),
            updated_at=models.utcnow(),
        )
    )


def expired(conn: Connection, *, program_timeout: float, bind_timeout: float) -> list[str]:
    """Running programs older than their bound: an operator's ``program_timeout``, a
    bind's the longer of the two (its bind's deadline fails it first)."""
    now = models.utcnow()
    operator = now - dt.timedelta(seconds=program_timeout)
    bound = now - dt.timedelta(seconds=max(program_timeout, bind_timeout))
    rows = conn.execute(
        sa.select(prog.c.uuid)
        .where(
            prog.c.state.in_(RUNNING),
            sa.or_(
                sa.and_(prog.c.arq_uuid.is_(None), prog.c.created_at < operator),
                sa.and_(prog.c.arq_uuid.is_not(None), prog.c.created_at < bound),
            ),
        )
        .order_by(prog.c.id)
    )
    return list(rows.scalars())


# -- the host's desired state ---------------------------------------------------------------

_Q_HOST_STATE = sa.select(
    hosts.c.desired_generation,
    sa.exists()
    .where(prog.c.hostname == sa.bindparam("p_hostname"), prog.c.state.in_(RUNNING))
    .label("busy"),
).where(hosts.c.hostname == sa.bindparam("p_hostname"))
_cpid_of = cpid.alias("cpid_of")
# A device's control-path id (one per device; the first, should there be more).
_first_cpid = (
    sa.select(sa.func.min(_cpid_of.c.id))
    .where(_cpid_of.c.device_id == dev.c.id)
    .correlate(dev)
    .scalar_subquery()
)
_Q_DESIRED = (
    sa.select(
        prog,
        dep.c.name.label("deployable_name"),
        dep.c.driver_name.label("deployable_driver"),
        dev.c.driver_name.label("device_driver"),
        cpid.c.cpid_type,
        cpid.c.cpid_info,
    )
    .select_from(
        prog.join(dep, prog.c.deployable_id == dep.c.id)
        .join(dev, dep.c.device_id == dev.c.id)
        .outerjoin(cpid, sa.and_(cpid.c.device_id == dev.c.id, cpid.c.id == _first_cpid))
    )
    .where(prog.c.hostname == sa.bindparam("p_hostname"), prog.c.state.in_(RUNNING))
    .order_by(prog.c.id)
)


def image_href(image_uuid: str) -> str:
    return f"/agent/v1/images/{image_uuid}/data"


def desired_state(conn: Connection, hostname: str) -> dict[str, Any]:
    """What the host's agent must run: ``{"generation", "programs": [...]}`` (the wire
    shape of doc/programming.md). One indexed read when nothing runs on the host. The
    whole desired state (activations, drivers, discovery too) is
    exosuit/db/desired_state.py's."""
    row = conn.execute(_Q_HOST_STATE, {"p_hostname": hostname}).first()
    if row is None:
        return {"generation": 0, "programs": []}
    programs = running_programs(conn, hostname) if row.busy else []
    return {"generation": int(row.desired_generation or 0), "programs": programs}


def running_programs(conn: Connection, hostname: str) -> list[dict[str, Any]]:
    """The programs of the host that its agent must run, as its desired state lists them."""
    programs = []
    for p in conn.execute(_Q_DESIRED, {"p_hostname": hostname}):
        programs.append(
            {
                "uuid": p.uuid,
                "deployable": p.deployable_name,
                "driver": p.deployable_driver or p.device_driver,
                "controlpath_id": {
                    "cpid_type": p.cpid_type,
                    "cpid_info": json.loads(p.cpid_info) if p.cpid_info else {},
                },
                "image": {
                    "uuid": p.image_uuid,
                    "format": p.image_format,
                    "size": p.image_size,
                    "sha256": p.image_sha256,
                    "function_id": p.function_id,
                    "interface_id": p.image_interface_id,
                    "href": image_href(p.image_uuid),
                },
                "previous_image": _previous(conn, p.previous_image_uuid),
            }
        )
    return programs


def _previous(conn: Connection, image_uuid: str | None) -> dict[str, Any] | None:
    """The image to restore on failure: its hash from the catalogue or from the program
    that loaded it (a Glance image); None when there is none."""
    if image_uuid is None:
        return None
    sha256 = conn.execute(
        sa.select(prog.c.image_sha256)
        .where(prog.c.image_uuid == image_uuid, prog.c.state == DONE)
        .order_by(prog.c.id.desc())
        .limit(1)
    ).scalar()
    if sha256 is None:
        sha256 = conn.execute(
            sa.select(images.c.sha256).where(images.c.uuid == image_uuid)
        ).scalar()
    return {"uuid": image_uuid, "sha256": sha256, "href": image_href(image_uuid)}
