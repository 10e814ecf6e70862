"""Standalone claims (microversion 2.8, doc/standalone.md): devices Exosuit binds itself.

A claim is a set of ordinary ARQs (``accelerator_requests.claim_id``) that Exosuit
binds without Nova, so a device handed to a container is held exactly like one bound
to a VM: each ARQ holds one attach handle (UNIQUE), every transition is a
compare-and-set, and each bind makes the checks of exosuit/db/arqs.py (device present,
enabled, ready, not being programmed; the profile group matched as Placement would:
exosuit/db/offers.py). ``create`` picks the devices, in one transaction, all or
nothing, all groups on one host: for each host with candidates (deployables matching
the group, their device ready and not being programmed, a free handle), each unit
inserts its ARQ BindStarted and binds it (``arqs.bind_for_claim``); a bind that loses
(its handle taken meanwhile, the device gone) tries the next candidate, and a host
that cannot serve every unit gives back what it took before the next is tried. Nothing
found: ClaimUnsatisfiable, and the transaction (claim and ARQs) rolls back.

A claim's state is its ARQs' (never stored, so no transition can be missed):

    released_at set ──────────────────────────► released
    an ARQ BindFailed (its program failed) ────► failed
    an ARQ BindStarted (its program runs) ─────► pending
    otherwise ─────────────────────────────────► bound

``release`` deletes its ARQs (handles freed) and marks it released in one transaction,
idempotently; with ``placement`` it queues the deletion of its Placement allocation
(``RELEASE_ALLOCATION``, handled by exosuit/placement/claim_allocations.py) in that transaction.
The conductor's ``claim_expiry`` job releases the claims past ``expires_at`` and
purges released ones after ``[claims] retention`` (exosuit/conductor/claim_expiry.py).
A ``container`` claim is in its host's desired state (exosuit/db/desired_state.py):
its make and its release bump the host's generation; its agent writes CDI spec files
and reports (``record_cdi``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import arqs, audit, candidates, jobs, models, offers
from exosuit.db import programs as programs_db
from exosuit.db.desired_state import bump, cdi_id
from exosuit.db.pagination import Page, paginate
from exosuit.schemas import profile_groups
from exosuit.schemas.profile_groups import ProfileGroup

__all__ = [
    "BOUND",
    "CDI_STATES",
    "EXPIRY",
    "FAILED",
    "PENDING",
    "RELEASED",
    "RELEASE_ALLOCATION",
    "SORT_COLUMNS",
    "STATES",
    "ClaimRequest",
    "Created",
    "DryRun",
    "Scope",
    "abandon",
    "allocation",
    "create",
    "dry_run",
    "expired",
    "get",
    "list_claims",
    "program_groups",
    "purge_released",
    "record_cdi",
    "release",
    "release_expired",
    "renew",
]

PENDING = "pending"
BOUND = "bound"
FAILED = "failed"
RELEASED = "released"
STATES = (PENDING, BOUND, FAILED, RELEASED)
CDI_STATES = ("pending", "written", "failed")

# The periodic conductor job that releases expired claims (exosuit/conductor/claim_expiry.py).
EXPIRY = "claim_expiry"
# The job that deletes a released claim's Placement allocation
# (exosuit/placement/claim_allocations.py).
RELEASE_ALLOCATION = "placement_claim_release"

# Hosts one create tries at most (those with candidates for every group, by name).
MAX_HOSTS = 32

claims = models.claims
arq = models.accelerator_requests
dp = models.device_profiles
dep = models.deployables
dev = models.devices
ah = models.attach_handles
attr = models.attributes
hosts = models.hosts


def _arq_in(state: str) -> sa.Exists:
    return sa.exists().where(arq.c.claim_id == claims.c.id, arq.c.state == state)


STATE = sa.case(
    (claims.c.released_at.is_not(None), RELEASED),
    (_arq_in(arqs.BIND_FAILED), FAILED),
    (_arq_in(arqs.BIND_STARTED), PENDING),
    else_=BOUND,
)
_FAILED_REASON = (
    sa.select(arq.c.reason)
    .where(arq.c.claim_id == claims.c.id, arq.c.state == arqs.BIND_FAILED)
    .order_by(arq.c.id)
    .limit(1)
    .scalar_subquery()
)
_SELECT = sa.select(
    claims,
    STATE.label("state"),
    sa.func.coalesce(claims.c.reason, _FAILED_REASON).label("state_reason"),
)
SORT_COLUMNS: dict[str, sa.ColumnElement[Any]] = {
    "created_at": claims.c.created_at,
    "uuid": claims.c.uuid,
    "hostname": sa.func.coalesce(claims.c.hostname, ""),
}
_Q_DEVICES = (
    sa.select(
        arq.c.claim_id,
        arq.c.uuid.label("arq_uuid"),
        arq.c.state.label("arq_state"),
        dev.c.uuid.label("device_uuid"),
        dev.c.type.label("device_type"),
        dep.c.uuid.label("deployable_uuid"),
        dep.c.rp_uuid,
        ah.c.uuid.label("attach_handle_uuid"),
        ah.c.attach_type,
        ah.c.attach_info,
    )
    .select_from(
        arq.outerjoin(ah, ah.c.id == arq.c.attach_handle_id)
        .outerjoin(dep, dep.c.id == ah.c.deployable_id)
        .outerjoin(dev, dev.c.id == dep.c.device_id)
    )
    .where(arq.c.claim_id.in_(sa.bindparam("p_ids", expanding=True)))
    .order_by(arq.c.claim_id, arq.c.id)
)
_Q_LOCK = sa.select(claims).where(claims.c.uuid == sa.bindparam("p_uuid")).with_for_update()
_Q_SET_RELEASED = (
    sa.update(claims)
    .where(claims.c.id == sa.bindparam("p_id"), claims.c.released_at.is_(None))
    .values(
        released_at=sa.bindparam("p_now"),
        updated_at=sa.bindparam("p_now"),
        consumer_key=None,
        reason=sa.bindparam("p_reason"),
    )
)


@dataclasses.dataclass(frozen=True)
class Scope:
    """Which claims a caller sees: one project, or all (``project_id`` None)."""

    project_id: str | None


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """What POST /v2/claims asks: a profile's devices (``profile_name``) or the named
    attach handles (``handles``, their uuids), on ``hostname`` or any one host."""

    project_id: str | None
    user_id: str | None = None
    profile_name: str | None = None
    handles: tuple[str, ...] = ()
    hostname: str | None = None
    consumer: str | None = None
    expires_in: int | None = None
    container: bool = False
    numa_node: int | None = None
    dry_run: bool = False


@dataclasses.dataclass(frozen=True)
class Created:
    """What ``create`` did: ``created`` False when it found the live claim of the same
    consumer (the call is idempotent for a consumer)."""

    claim: dict[str, Any]
    created: bool


@dataclasses.dataclass(frozen=True)
class _Unit:
    """One ARQ to bind: a unit of a profile group, or a named attach handle."""

    group_index: int = 0
    group: ProfileGroup = ProfileGroup()
    handle: tuple[int, str] | None = None  # id, uuid
    rp_uuid: str | None = None


# -- reading ----------------------------------------------------------------------------


def _claims(conn: Connection, rows: Sequence[sa.Row[*tuple[Any, ...]]]) -> list[dict[str, Any]]:
    """The rows as CLAIM dicts, their devices read in one statement."""
    devices: dict[int, list[dict[str, Any]]] = {r.id: [] for r in rows}
    if rows:
        for d in conn.execute(_Q_DEVICES, {"p_ids": list(devices)}):
            devices[d.claim_id].append(dict(d._mapping))
    found = []
    for row in rows:
        claim = dict(row._mapping)
        claim["reason"] = claim.pop("state_reason")
        claim["devices"] = [
            _device(d, claim["uuid"], index, claim["container"])
            for index, d in enumerate(devices[row.id])
        ]
        found.append(claim)
    return found


def _device(d: Mapping[str, Any], claim_uuid: str, index: int, container: bool) -> dict[str, Any]:
    held = d["attach_handle_uuid"] is not None
    return {
        "arq_uuid": d["arq_uuid"],
        "arq_state": d["arq_state"],
        "device_uuid": d["device_uuid"],
        "device_type": d["device_type"],
        "deployable_uuid": d["deployable_uuid"],
        "rp_uuid": d["rp_uuid"],
        "attach_handle_uuid": d["attach_handle_uuid"],
        "attach_handle_type": d["attach_type"],
        "attach_handle_info": json.loads(d["attach_info"]) if held else None,
        "cdi_device": cdi_id(d["device_type"], claim_uuid, index) if container and held else None,
    }


def _scoped(stmt: sa.Select[*tuple[Any, ...]], scope: Scope) -> sa.Select[*tuple[Any, ...]]:
    if scope.project_id is not None:
        stmt = stmt.where(claims.c.project_id == scope.project_id)
    return stmt


def get(conn: Connection, uuid: str, scope: Scope) -> dict[str, Any]:
    """The claim (ClaimNotFound if ``scope`` does not see it)."""
    row = conn.execute(_scoped(_SELECT, scope).where(claims.c.uuid == uuid.lower())).first()
    if row is None:
        raise exceptions.ClaimNotFound(uuid=uuid)
    return _claims(conn, [row])[0]


def list_claims(
    conn: Connection,
    scope: Scope,
    *,
    project_id: str | None = None,
    hostname: str | None = None,
    states: Iterable[str] | None = None,
    consumer: str | None = None,
    page: Page | None = None,
) -> list[dict[str, Any]]:
    """The claims ``scope`` sees, filtered, newest first by default."""
    stmt = _scoped(_SELECT, scope)
    if project_id is not None:
        stmt = stmt.where(claims.c.project_id == project_id)
    if hostname is not None:
        stmt = stmt.where(claims.c.hostname == hostname)
    if states is not None:
        stmt = stmt.where(STATE.in_(list(states)))
    if consumer is not None:
        stmt = stmt.where(claims.c.consumer == consumer)
    visible = None if scope.project_id is None else claims.c.project_id == scope.project_id
    stmt = paginate(conn, stmt, claims, page, SORT_COLUMNS, visible=visible)
    return _claims(conn, conn.execute(stmt).all())


def allocation(conn: Connection, claim: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """What the claim holds, as Placement allocations: resource provider → resource
    class → units (one per ARQ holding a handle), the class by exosuit/db/offers.py's
    rule (the one the Placement sync writes providers with)."""
    rps = sorted({d["rp_uuid"] for d in claim["devices"] if d["attach_handle_uuid"]})
    if not rps:
        return {}
    rows = conn.execute(
        sa.select(dep.c.id, dep.c.rp_uuid, dev.c.type)
        .select_from(dep.join(dev, dep.c.device_id == dev.c.id))
        .where(dep.c.rp_uuid.in_(rps))
    ).all()
    attributes = _offers(conn, [r.id for r in rows])
    classes = {r.rp_uuid: offers.offered(attributes[r.id], r.type)[0] for r in rows}
    found: dict[str, dict[str, int]] = {}
    for d in claim["devices"]:
        if d["attach_handle_uuid"] and d["rp_uuid"] in classes:
            per_rp = found.setdefault(d["rp_uuid"], {})
            rc = classes[d["rp_uuid"]]
            per_rp[rc] = per_rp.get(rc, 0) + 1
    return found


# -- candidates --------------------------------------------------------------------------

_Q_OFFERS = sa.select(attr.c.deployable_id, attr.c.key, attr.c.value, attr.c.source).where(
    attr.c.deployable_id.in_(sa.bindparam("p_ids", expanding=True)),
    sa.or_(attr.c.key == "rc", attr.c.key.startswith("trait")),
)


def _offers(conn: Connection, ids: Sequence[int]) -> dict[int, list[offers.Attribute]]:
    """The rc and trait* attributes of deployables, by id."""
    attributes: dict[int, list[offers.Attribute]] = {i: [] for i in ids}
    if ids:
        for a in conn.execute(_Q_OFFERS, {"p_ids": list(ids)}):
            attributes[a.deployable_id].append((a.key, a.value, a.source))
    return attributes


def _evaluate(
    conn: Connection,
    request: ClaimRequest,
    units: Sequence[_Unit],
    *,
    exclude: Iterable[str] = (),
    programs: Mapping[int, arqs.ProgramNeed] | None = None,
    stale_after: float | None = None,
) -> candidates.Evaluation:
    """Every deployable (of ``request.hostname``, or every host) judged for the units
    (exosuit/db/candidates.py): the verdicts, and the hosts that can serve them."""
    groups: dict[int, ProfileGroup] = {}
    needed: dict[int, int] = {}
    for unit in units:
        groups[unit.group_index] = unit.group
        needed[unit.group_index] = needed.get(unit.group_index, 0) + 1
    prefer = {
        index: frozenset(x for x in (need.bitstream_id, need.image and need.image.uuid) if x)
        for index, need in (programs or {}).items()
    }
    found = candidates.read(conn, hostname=request.hostname, stale_after=stale_after)
    return candidates.evaluate(
        groups,
        list(needed.items()),
        found,
        candidates.Constraints.of(groups.values(), request.numa_node),
        exclude=exclude,
        prefer=prefer,
    )


# -- create ------------------------------------------------------------------------------


def _consumer_key(project_id: str | None, consumer: str) -> str:
    return hashlib.sha256(json.dumps([project_id, consumer]).encode()).hexdigest()


def _profile_units(
    conn: Connection, name: str, handles_per_unit: Mapping[str, int], max_arqs: int | None
) -> tuple[int, str, list[_Unit]]:
    """(profile id, its stored name, one unit per ARQ its groups make)."""
    row = conn.execute(sa.select(dp.c.id, dp.c.name, dp.c.profile_json).where(dp.c.name == name))
    profile = row.first()
    if profile is None:
        raise exceptions.DeviceProfileNotFound(ident=name)
    groups = [profile_groups.read(g) for g in json.loads(profile.profile_json).get("groups", [])]
    units = [
        _Unit(group_index=index, group=group)
        for index, group in enumerate(groups)
        for _ in range(group.units(handles_per_unit))
    ]
    if max_arqs is not None and len(units) > max_arqs:
        raise exceptions.LimitExceeded(
            what=f"Device profile {name} makes {len(units)} accelerator requests",
            limit=max_arqs,
            option="[api] max_arqs_per_request",
        )
    if not units:
        raise exceptions.Invalid(reason=f"device profile {name} requests no resources")
    return profile.id, profile.name, units


def _handle_units(conn: Connection, uuids: Sequence[str]) -> tuple[str, list[_Unit]]:
    """(their host, one unit per named attach handle); AttachHandleNotFound for an
    unknown one, ClaimUnsatisfiable when they are on several hosts."""
    wanted = [u.lower() for u in uuids]
    rows = {
        r.uuid: r
        for r in conn.execute(
            sa.select(ah.c.id, ah.c.uuid, dep.c.rp_uuid, dev.c.hostname)
            .select_from(ah.join(dep, dep.c.id == ah.c.deployable_id))
            .join(dev, dev.c.id == dep.c.device_id)
            .where(ah.c.uuid.in_(wanted))
        )
    }
    missing = [u for u in wanted if u not in rows]
    if missing:
        raise exceptions.AttachHandleNotFound(uuid=", ".join(missing))
    on = sorted({r.hostname for r in rows.values()})
    if len(on) > 1:
        raise exceptions.ClaimUnsatisfiable(
            reason=f"the attach handles are on hosts {', '.join(on)}: a claim takes devices "
            "of one host"
        )
    units = [_Unit(handle=(rows[u].id, u), rp_uuid=rows[u].rp_uuid) for u in wanted]
    return on[0], units


def program_groups(conn: Connection, profile_name: str) -> dict[int, ProfileGroup]:
    """Group index → group, for the groups of the profile that ask for an image
    (``accel:bitstream_id``, ``accel:function_id``): what a caller resolves first."""
    row = conn.execute(sa.select(dp.c.profile_json).where(dp.c.name == profile_name)).first()
    if row is None:
        raise exceptions.DeviceProfileNotFound(ident=profile_name)
    groups = [profile_groups.read(g) for g in json.loads(row.profile_json).get("groups", [])]
    return {i: g for i, g in enumerate(groups) if g.loads_image}


def _live_of_consumer(conn: Connection, key: str) -> sa.Row[*tuple[Any, ...]] | None:
    stmt = sa.select(claims, STATE.label("state")).where(claims.c.consumer_key == key)
    return conn.execute(stmt.with_for_update()).first()


def _insert(
    conn: Connection, request: ClaimRequest, uuid: str, profile: str | None, placement: bool
) -> int | None:
    """The claim's row (None: the consumer's live claim was made meanwhile)."""
    now = models.utcnow()
    expires_at = None
    if request.expires_in is not None:
        expires_at = now + dt.timedelta(seconds=request.expires_in)
    values = {
        "uuid": uuid,
        "project_id": request.project_id,
        "user_id": request.user_id,
        "consumer": request.consumer,
        "consumer_key": None
        if request.consumer is None
        else _consumer_key(request.project_id, request.consumer),
        "hostname": request.hostname,
        "device_profile_name": profile,
        "container": request.container,
        "cdi_state": "pending" if request.container else None,
        "placement": placement,
        "expires_at": expires_at,
        "created_at": now,
    }
    try:
        # A savepoint: a concurrent claim of the same consumer that committed first
        # fails this insert only (UNIQUE consumer_key), not the transaction.
        with conn.begin_nested():
            result = conn.execute(sa.insert(claims).values(**values))
    except sa.exc.IntegrityError:
        if values["consumer_key"] is None:
            raise
        return None
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def create(
    conn: Connection,
    request: ClaimRequest,
    *,
    skip_locked: bool,
    handles_per_unit: Mapping[str, int] | None = None,
    max_arqs: int | None = None,
    programs: Mapping[int, arqs.ProgramNeed] | None = None,
    exclude: Iterable[str] = (),
    uuid: str | None = None,
    placement: bool = False,
    stale_after: float | None = None,
) -> Created:
    """Make a claim: bind every unit of the profile (or every named handle) on one host,
    all or nothing. Returns the claim (bound, or pending while a program runs).

    Idempotent for a consumer: its live claim (pending or bound) is returned instead
    (``created`` False); a failed one is released first. Raises DeviceProfileNotFound,
    AttachHandleNotFound, HostNotFound (``hostname`` never seen), LimitExceeded (more
    ARQs than ``max_arqs``), ClaimUnsatisfiable (nothing held: the reasons), and
    ProgramsToResolve before writing anything when a group asks for an image that
    ``programs`` (group index → what to load) does not resolve. ``exclude``: resource
    providers not to use (Placement refused them); ``uuid``: the claim's, for a retry;
    ``stale_after``: a host whose agent last reported longer ago is not used. The devices
    are chosen by exosuit/db/candidates.py, the constraints of the profile across its
    groups honoured; the refusal names why in one sentence (``Evaluation.summary``).
    """
    if request.profile_name is not None and programs is None:
        if program_groups(conn, request.profile_name):
            raise arqs.ProgramsToResolve(request.profile_name)
    if request.consumer is not None:
        live = _live_of_consumer(conn, _consumer_key(request.project_id, request.consumer))
        if live is not None and live.state != FAILED:
            return Created(get(conn, live.uuid, Scope(None)), created=False)
        if live is not None:
            _release_row(conn, live, "failed; its consumer claimed again")
    _check_host(conn, request.hostname)
    uuid = uuid or str(uuidlib.uuid4())
    if request.profile_name is not None:
        profile_id, profile, units = _profile_units(
            conn, request.profile_name, handles_per_unit or {}, max_arqs
        )
        evaluation = _evaluate(
            conn, request, units, exclude=exclude, programs=programs, stale_after=stale_after
        )
        plan = evaluation.plan
    else:
        profile_id, profile = None, None
        on, units = _handle_units(conn, request.handles)
        if request.hostname not in (None, on):
            raise exceptions.ClaimUnsatisfiable(
                reason=f"the attach handles are on host {on}, not {request.hostname}"
            )
        evaluation = None
        plan = {on: [candidates.Option({}, ())]}
    if not plan:
        assert evaluation is not None
        raise exceptions.ClaimUnsatisfiable(reason=evaluation.summary(_where(request)))
    claim_id = _insert(conn, request, uuid, profile, placement)
    if claim_id is None:  # the consumer's claim, made meanwhile
        live = _live_of_consumer(conn, _consumer_key(request.project_id, request.consumer or ""))
        if live is None:
            raise exceptions.ClaimUnsatisfiable(reason="a concurrent claim of this consumer")
        return Created(get(conn, live.uuid, Scope(None)), created=False)
    binder = _Binder(conn, claim_id, request.project_id, profile_id, skip_locked, programs or {})
    binder.constraints = candidates.Constraints.of(u.group for u in units if u.handle is None)
    reasons = []
    for hostname, options in list(plan.items())[:MAX_HOSTS]:
        reason = binder.bind_host(hostname, units, options)
        if reason is None:
            conn.execute(sa.update(claims).where(claims.c.id == claim_id).values(hostname=hostname))
            if request.container:
                bump(conn, [hostname])
            claim = get(conn, uuid, Scope(None))
            _record_created(conn, claim)
            return Created(claim, created=True)
        reasons.append(f"host {hostname}: {reason}")
    raise exceptions.ClaimUnsatisfiable(reason="; ".join(reasons))


def _where(request: ClaimRequest) -> str:
    return f"host {request.hostname}" if request.hostname else "any host"


@dataclasses.dataclass(frozen=True)
class DryRun:
    """What a claim would do now (``dry_run``): the verdict on every host and deployable
    considered, the devices it would take (unit by unit: group index, candidate), why
    it would be refused (None: it would not), and the live claim of its consumer that
    it would return instead (None: none)."""

    evaluation: candidates.Evaluation
    chosen: tuple[tuple[int, candidates.Candidate], ...]
    refusal: str | None
    consumer_claim: str | None


def dry_run(
    conn: Connection,
    request: ClaimRequest,
    *,
    handles_per_unit: Mapping[str, int] | None = None,
    max_arqs: int | None = None,
    stale_after: float | None = None,
) -> DryRun:
    """``create``'s choice for a profile's claim, writing nothing: DeviceProfileNotFound,
    HostNotFound and LimitExceeded as ``create``. Images a group asks for are not
    looked up (a deployable that holds one is not preferred)."""
    assert request.profile_name is not None
    live = None
    if request.consumer is not None:
        key = _consumer_key(request.project_id, request.consumer)
        found = conn.execute(_SELECT.where(claims.c.consumer_key == key)).first()
        live = found.uuid if found is not None and found.state != FAILED else None
    _check_host(conn, request.hostname)
    _, _, units = _profile_units(conn, request.profile_name, handles_per_unit or {}, max_arqs)
    evaluation = _evaluate(conn, request, units, stale_after=stale_after)
    if not evaluation.plan:
        return DryRun(evaluation, (), evaluation.summary(_where(request)), live)
    first = next(iter(evaluation.plan.values()))[0]
    return DryRun(evaluation, first.assignment, None, live)


def _check_host(conn: Connection, hostname: str | None) -> None:
    """HostNotFound for a host name no agent ever reported."""
    if hostname is None:
        return
    known = sa.select(hosts.c.hostname).where(hosts.c.hostname == hostname)
    # Compared here too: MariaDB's collation ignores case.
    if conn.execute(known).scalar() != hostname:
        raise exceptions.HostNotFound(hostname=hostname)


def _record_created(conn: Connection, claim: Mapping[str, Any]) -> None:
    brief = ("state", "hostname", "consumer", "device_profile_name", "project_id", "expires_at")
    after = {k: claim.get(k) for k in brief}
    after["devices"] = [d.get("device_uuid") for d in claim["devices"]]
    audit.record(conn, "create", "claim", claim["uuid"], None, after, host=claim["hostname"])


class _Binder:
    """Binds a claim's units on one host after another (in ``create``'s transaction)."""

    def __init__(
        self,
        conn: Connection,
        claim_id: int,
        project_id: str | None,
        profile_id: int | None,
        skip_locked: bool,
        programs: Mapping[int, arqs.ProgramNeed],
    ) -> None:
        self.conn = conn
        self.claim_id = claim_id
        self.project_id = project_id
        self.profile_id = profile_id
        self.skip_locked = skip_locked
        self.programs = programs
        # The profile's constraints across its groups (each bind checks them again).
        self.constraints = candidates.Constraints()

    def bind_host(
        self,
        hostname: str,
        units: list[_Unit],
        options: Sequence[candidates.Option],
    ) -> str | None:
        """Bind every unit on ``hostname``, one option after another (each one NUMA node,
        PCIe root … when the profile asks); None, or why not (nothing is then held)."""
        reason: str | None = "no option left"
        for option in options:
            reason = self._bind_option(hostname, units, option)
            if reason is None:
                return None
        return reason

    def _bind_option(
        self, hostname: str, units: list[_Unit], option: candidates.Option
    ) -> str | None:
        """Bind every unit with the option's candidates, its assignment first."""
        exhausted: set[str] = set()
        devices: set[int] = set()
        for position, unit in enumerate(units):
            if unit.handle is not None:
                assert unit.rp_uuid is not None
                error = self._bind(hostname, unit, unit.rp_uuid)
                reason = None if error is None else self._held(unit.handle[1], error)
            else:
                first = option.assignment[position][1]
                others = [c for c in option.by_group[unit.group_index] if c is not first]
                reason = "no candidate left"
                for candidate in (first, *others):
                    if candidate.rp_uuid in exhausted:
                        continue
                    if self.constraints.distinct_devices and candidate.device_id in devices:
                        continue
                    error = self._bind(hostname, unit, candidate.rp_uuid)
                    if error is None:
                        devices.add(candidate.device_id)
                        reason = None
                        break
                    exhausted.add(candidate.rp_uuid)  # it will not serve this claim
                    reason = error
            if reason is not None:
                _give_back(self.conn, self.claim_id, f"its claim could not be made on {hostname}")
                return reason
        return None

    def _bind(self, hostname: str, unit: _Unit, rp_uuid: str) -> str | None:
        """One ARQ bound to ``rp_uuid``'s deployable: None, or why not (the ARQ gone)."""
        uuid = str(uuidlib.uuid4())
        self.conn.execute(
            sa.insert(arq).values(
                uuid=uuid,
                project_id=self.project_id,
                state=arqs.BIND_STARTED,
                device_profile_id=self.profile_id,
                device_profile_group_id=unit.group_index,
                hostname=hostname,
                device_rp_uuid=rp_uuid,
                claim_id=self.claim_id,
                created_at=models.utcnow(),
            )
        )
        state, error = arqs.bind_for_claim(
            self.conn,
            uuid,
            hostname,
            rp_uuid,
            unit.group,
            skip_locked=self.skip_locked,
            need=self.programs.get(unit.group_index) if unit.handle is None else None,
            project_id=self.project_id,
            named=unit.handle,
            constraints=self.constraints if unit.handle is None else None,
        )
        if state == arqs.BIND_FAILED:
            self.conn.execute(sa.delete(arq).where(arq.c.uuid == uuid))
            return error or "the bind failed"
        return None

    def _held(self, handle_uuid: str, error: str) -> str:
        """``error``, naming the holder of the attach handle if it is held."""
        holder = self.conn.execute(
            sa.select(arq.c.uuid, arq.c.instance_uuid, claims.c.uuid.label("claim_uuid"))
            .select_from(
                arq.join(ah, ah.c.id == arq.c.attach_handle_id).outerjoin(
                    claims, claims.c.id == arq.c.claim_id
                )
            )
            .where(ah.c.uuid == handle_uuid, arq.c.claim_id.is_distinct_from(self.claim_id))
        ).first()
        if holder is None:
            return error
        if holder.claim_uuid is not None:
            return f"attach handle {handle_uuid} is held by claim {holder.claim_uuid}"
        who = f"ARQ {holder.uuid}"
        if holder.instance_uuid:
            who += f" of instance {holder.instance_uuid}"
        return f"attach handle {handle_uuid} is held by {who}"


# -- release, renew, expiry ---------------------------------------------------------------


def _give_back(conn: Connection, claim_id: int, why: str) -> None:
    """Undo what a claim that is not made took: the programs queued for its ARQs fail
    (``why``: their deployables are free again), its ARQs go (handles released)."""
    waiting = conn.execute(
        sa.select(arq.c.uuid).where(arq.c.claim_id == claim_id, arq.c.state == arqs.BIND_STARTED)
    ).scalars()
    for uuid in list(waiting):
        programs_db.fail_for_arq(conn, uuid, why)
    arqs.delete_of_claim(conn, claim_id)


def _release_row(
    conn: Connection, row: sa.Row[*tuple[Any, ...]], reason: str, *, action: str = "release"
) -> bool:
    """Release a locked claim row: its ARQs deleted (handles freed), marked released;
    its host's desired state and its Placement allocation follow; recorded as
    ``action`` (``release``, ``expire``). False if it was."""
    arqs.delete_of_claim(conn, row.id)
    now = models.utcnow()
    params = {"p_id": row.id, "p_now": now, "p_reason": reason}
    if conn.execute(_Q_SET_RELEASED, params).rowcount != 1:
        return False
    _released(conn, row.uuid, row.hostname, row.container, row.placement)
    before = {"released_at": None, "expires_at": row.expires_at}
    after = {"released_at": now, "reason": reason}
    audit.record(conn, action, "claim", row.uuid, before, after, host=row.hostname)
    return True


def _released(
    conn: Connection, uuid: str, hostname: str | None, container: bool, placement: bool
) -> None:
    if container and hostname is not None:
        bump(conn, [hostname])  # its agent removes the CDI spec files
    if placement:
        jobs.enqueue(
            conn,
            RELEASE_ALLOCATION,
            {"consumer": uuid},
            key=f"placement-claim-release:{uuid}",
        )


def release(
    conn: Connection, uuid: str, scope: Scope, *, reason: str = "released"
) -> dict[str, Any]:
    """Release a claim: every ARQ deleted, its handles freed, in this transaction.
    Idempotent: a released claim is returned as it is. ClaimNotFound otherwise."""
    query = _scoped(sa.select(claims), scope).where(claims.c.uuid == uuid.lower())
    row = conn.execute(query.with_for_update()).first()
    if row is None:
        raise exceptions.ClaimNotFound(uuid=uuid)
    if row.released_at is None:
        _release_row(conn, row, reason)
    return get(conn, uuid, Scope(None))


def abandon(conn: Connection, uuid: str, *, allocation_unknown: bool) -> None:
    """Undo a claim Placement did not take: its ARQs deleted (handles freed) and the
    claim itself, as if never made (a retry makes it again with the same uuid). With
    ``allocation_unknown`` (Placement did not answer) its allocation is deleted too."""
    row = conn.execute(_Q_LOCK, {"p_uuid": uuid}).first()
    if row is None:
        return
    _give_back(conn, row.id, "its claim was not allocated in Placement")
    conn.execute(sa.delete(claims).where(claims.c.id == row.id))
    _released(conn, row.uuid, row.hostname, row.container, allocation_unknown)
    why = {"consumer": row.consumer, "reason": "not allocated in Placement"}
    audit.record(conn, "abandon", "claim", row.uuid, why, None, host=row.hostname)


def renew(conn: Connection, uuid: str, scope: Scope, expires_in: int) -> dict[str, Any]:
    """The claim now expires ``expires_in`` seconds from now. ClaimNotFound,
    ClaimReleased."""
    query = _scoped(sa.select(claims), scope).where(claims.c.uuid == uuid.lower())
    row = conn.execute(query.with_for_update()).first()
    if row is None:
        raise exceptions.ClaimNotFound(uuid=uuid)
    if row.released_at is not None:
        when = row.released_at.replace(microsecond=0).isoformat()
        raise exceptions.ClaimReleased(uuid=row.uuid, released_at=f"{when}Z")
    now = models.utcnow()
    expires_at = now + dt.timedelta(seconds=expires_in)
    conn.execute(
        sa.update(claims)
        .where(claims.c.id == row.id, claims.c.released_at.is_(None))
        .values(expires_at=expires_at, updated_at=now)
    )
    before, after = {"expires_at": row.expires_at}, {"expires_at": expires_at}
    audit.record(conn, "renew", "claim", row.uuid, before, after, host=row.hostname)
    return get(conn, uuid, Scope(None))


def expired(conn: Connection, *, limit: int = 500) -> list[str]:
    """Live claims past their ``expires_at``, oldest first."""
    rows = conn.execute(
        sa.select(claims.c.uuid)
        .where(claims.c.released_at.is_(None), claims.c.expires_at < models.utcnow())
        .order_by(claims.c.expires_at, claims.c.id)
        .limit(limit)
    )
    return list(rows.scalars())


def release_expired(conn: Connection, uuid: str) -> bool:
    """Release the claim if it is still past its ``expires_at`` (not renewed or released
    meanwhile); whether it was."""
    row = conn.execute(_Q_LOCK, {"p_uuid": uuid}).first()
    now = models.utcnow()
    if row is None or row.released_at is not None or row.expires_at is None:
        return False
    if row.expires_at >= now:
        return False
    when = row.expires_at.replace(microsecond=0).isoformat()
    return _release_row(conn, row, f"expired at {when}Z", action="expire")


def purge_released(conn: Connection, retention: float, *, limit: int = 500) -> int:
    """Delete claims released more than ``retention`` seconds ago; how many."""
    cutoff = models.utcnow() - dt.timedelta(seconds=retention)
    ids = list(
        conn.execute(
            sa.select(claims.c.id)
            .where(claims.c.released_at < cutoff)
            .order_by(claims.c.id)
            .limit(limit)
        ).scalars()
    )
    if not ids:
        return 0
    return int(conn.execute(sa.delete(claims).where(claims.c.id.in_(ids))).rowcount)


# -- the agent's CDI report --------------------------------------------------------------


def record_cdi(
    conn: Connection,
    hostname: str,
    uuid: str,
    *,
    state: str,
    reason: str | None,
    devices: Sequence[str],
) -> dict[str, Any]:
    """The agent of ``hostname`` wrote the claim's CDI spec files (``written``, naming
    the CDI ids it wrote) or could not (``failed``, why): the claim's ``cdi`` now.
    Idempotent. ClaimNotFound for a claim that is not a live container claim of this
    host (the agent then removes its files); Invalid when ``written`` names other ids
    than the claim's."""
    row = conn.execute(_Q_LOCK, {"p_uuid": uuid.lower()}).first()
    if row is None or row.released_at is not None or not row.container:
        raise exceptions.ClaimNotFound(uuid=uuid)
    if row.hostname != hostname:
        raise exceptions.ClaimNotFound(uuid=uuid)
    if state == "written":
        claim = get(conn, row.uuid, Scope(None))
        expected = sorted(d["cdi_device"] for d in claim["devices"] if d["cdi_device"])
        if sorted(set(devices)) != expected:
            raise exceptions.Invalid(
                reason=f"claim {row.uuid}'s CDI devices are {', '.join(expected) or 'none'}, "
                f"not {', '.join(sorted(devices)) or 'none'}"
            )
    conn.execute(
        sa.update(claims)
        .where(claims.c.id == row.id)
        .values(cdi_state=state, cdi_reason=reason, updated_at=models.utcnow())
    )
    if (row.cdi_state, row.cdi_reason) != (state, reason):  # not the same report again
        before = {"cdi": row.cdi_state, "reason": row.cdi_reason}
        after = {"cdi": state, "reason": reason}
        audit.record(conn, f"cdi.{state}", "claim", row.uuid, before, after, host=hostname)
    return {"state": state, "reason": reason}
