"""Where a claim's devices are chosen, and why every other one is not (doc/devices.md,
"Topology constraints" and "Why not here?").

``read`` reads, in a few statements, every deployable that has a resource provider (on
one host, or on all), with its device's and its host's state, what it offers and, when
none of its attach handles is free, who holds them. ``evaluate`` is pure: for each host
in name order, each deployable's first reason to be passed over for each group of the
profile (the checks in ``ORDER``), then the constraints across the groups
(``accel:same_numa_node``, ``accel:same_pcie_root``, ``accel:distinct_devices``) over the
deployables left, and an assignment of every unit (one ARQ) to a deployable, the one a
bind would try first. The answer is data, ``Verdict``s: the 409 of a refused claim says
them in one sentence (``Evaluation.summary``), the dry run returns them whole.

A hint, as ever: every bind checks its device again under its locks
(exosuit/db/arqs.py), the constraints across groups included.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import models, offers
from exosuit.db.desired_state import READY
from exosuit.schemas import labels as device_labels
from exosuit.schemas import profile_groups
from exosuit.schemas.profile_groups import ProfileGroup

__all__ = [
    "CHOSEN",
    "DRAINED",
    "EXCLUDED",
    "FORBIDDEN_TRAIT",
    "HELD",
    "HOST_VERDICTS",
    "INACTIVE",
    "LABEL",
    "MISSING_TRAIT",
    "NOT_REPORTING",
    "NO_FIT",
    "NUMA_NODE",
    "ORDER",
    "PROGRAMMING",
    "SPARE",
    "TOPOLOGY",
    "UNHEALTHY",
    "UNPAIRED",
    "WRONG_RESOURCE_CLASS",
    "Candidate",
    "Constraints",
    "Evaluation",
    "Holder",
    "Option",
    "Verdict",
    "assign",
    "evaluate",
    "read",
]

# What a deployable or a host is said to be: chosen, not needed (another one serves),
# or the first reason it was passed over, in the order they are checked.
CHOSEN = "chosen"
SPARE = "spare"
NOT_REPORTING = "not_reporting"
DRAINED = "drained"
UNHEALTHY = "unhealthy"
INACTIVE = "inactive"
PROGRAMMING = "programming"
EXCLUDED = "excluded"
WRONG_RESOURCE_CLASS = "wrong_resource_class"
MISSING_TRAIT = "missing_trait"
FORBIDDEN_TRAIT = "forbidden_trait"
NUMA_NODE = "numa_node"
LABEL = "label"
HELD = "held"
TOPOLOGY = "topology"
# Free and fit for its group, on a host where another group finds no device.
UNPAIRED = "unpaired"
# A host: a group of the profile finds no deployable there.
NO_FIT = "no_fit"
ORDER = (
    NOT_REPORTING,
    DRAINED,
    UNHEALTHY,
    INACTIVE,
    PROGRAMMING,
    EXCLUDED,
    WRONG_RESOURCE_CLASS,
    MISSING_TRAIT,
    FORBIDDEN_TRAIT,
    NUMA_NODE,
    LABEL,
    HELD,
    TOPOLOGY,
    UNPAIRED,
)
# What a host is said to be.
HOST_VERDICTS = (CHOSEN, SPARE, NO_FIT, NOT_REPORTING, TOPOLOGY, HELD)
# How the summary names a reason when its deployables differ in the detail.
_GENERIC = {
    NOT_REPORTING: "not reporting",
    DRAINED: "drained",
    UNHEALTHY: "unhealthy",
    INACTIVE: "inactive",
    PROGRAMMING: "being programmed",
    EXCLUDED: "refused by Placement",
    WRONG_RESOURCE_CLASS: "of another resource class",
    MISSING_TRAIT: "missing a required trait",
    FORBIDDEN_TRAIT: "with a forbidden trait",
    NUMA_NODE: "on another NUMA node",
    LABEL: "missing a label",
    HELD: "held",
    TOPOLOGY: "not placed together with the other groups' devices",
    UNPAIRED: "free, but alone on their host",
}
# Holders a verdict or the summary names at most; the different things the summary
# says of one reason at most (beyond: its generic phrase).
MAX_HOLDERS = 3
MAX_SAID = 3

dep = models.deployables
dev = models.devices
ah = models.attach_handles
attr = models.attributes
arq = models.accelerator_requests
claims = models.claims
hosts = models.hosts


@dataclasses.dataclass(frozen=True)
class Holder:
    """What holds an attach handle: an ARQ (of an instance, or of a claim)."""

    arq_uuid: str
    instance_uuid: str | None = None
    claim_uuid: str | None = None

    def __str__(self) -> str:
        if self.claim_uuid is not None:
            return f"claim {self.claim_uuid}"
        if self.instance_uuid:
            return f"ARQ {self.arq_uuid} of instance {self.instance_uuid}"
        return f"ARQ {self.arq_uuid}"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A deployable as a claim sees it. ``blocked``: (reason code, phrase) when its device
    or host takes no bind at all (not reporting, drained, …), else None."""

    hostname: str
    deployable_id: int
    deployable_uuid: str
    name: str
    rp_uuid: str
    bitstream_id: str | None
    device_id: int
    device_uuid: str
    device_type: str
    numa_node: int | None
    pcie_root: str | None
    labels: Mapping[str, str]
    rc: str
    traits: frozenset[str]
    free: int
    holders: tuple[Holder, ...] = ()
    blocked: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Why a host or a deployable was passed over (``code``, one of ``ORDER``; ``NO_FIT``
    for a host), or that it is ``CHOSEN`` or ``SPARE``; ``message``: a short phrase.
    ``device_uuid`` None: the verdict on the host itself. ``group``: the profile group
    the verdict is about (for a deployable: the group it came closest to serving)."""

    hostname: str
    code: str
    message: str
    device_uuid: str | None = None
    deployable_uuid: str | None = None
    rp_uuid: str | None = None
    deployable_name: str | None = None
    group: int | None = None
    holders: tuple[Holder, ...] = ()


@dataclasses.dataclass(frozen=True)
class Constraints:
    """The constraints across a profile's groups: a flag set in any group holds for all
    (doc/devices.md, "Topology constraints"). ``numa_node``: the claim's own."""

    same_numa_node: bool = False
    same_pcie_root: bool = False
    distinct_devices: bool = False
    numa_node: int | None = None

    @classmethod
    def of(cls, groups: Iterable[ProfileGroup], numa_node: int | None = None) -> Constraints:
        groups = list(groups)
        return cls(
            same_numa_node=any(g.flag(profile_groups.SAME_NUMA_NODE) for g in groups),
            same_pcie_root=any(g.flag(profile_groups.SAME_PCIE_ROOT) for g in groups),
            distinct_devices=any(g.flag(profile_groups.DISTINCT_DEVICES) for g in groups),
            numa_node=numa_node,
        )

    @property
    def across(self) -> bool:
        """Whether any constraint holds across the groups."""
        return self.same_numa_node or self.same_pcie_root or self.distinct_devices

    def names(self) -> str:
        keys = (
            (self.same_numa_node, profile_groups.SAME_NUMA_NODE),
            (self.same_pcie_root, profile_groups.SAME_PCIE_ROOT),
            (self.distinct_devices, profile_groups.DISTINCT_DEVICES),
        )
        return ", ".join(key for on, key in keys if on)


@dataclasses.dataclass(frozen=True)
class Option:
    """One way a host serves the claim: the candidates of each group (group index → in the
    order to try them), all on one NUMA node and/or PCIe root when the profile asks, and
    the assignment tried first: a (group index, candidate) per unit, in unit order."""

    by_group: Mapping[int, Sequence[Candidate]]
    assignment: tuple[tuple[int, Candidate], ...]


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What ``evaluate`` found: the verdicts (each host's, then its deployables'), the
    hosts that can serve the claim (host → its options, in the order to try them) and the
    one chosen (the first of them)."""

    verdicts: tuple[Verdict, ...]
    plan: Mapping[str, Sequence[Option]]

    @property
    def chosen(self) -> str | None:
        return next(iter(self.plan), None)

    def summary(self, where: str = "any host") -> str:
        """One sentence: how many deployables were passed over for each reason, the most
        common first, e.g. "No device on any host can take the claim: 3 drained, 2 held
        (by claim X, ARQ Y), 1 on NUMA node 0, not 1." """
        passed = [v for v in self.verdicts if v.device_uuid is not None and v.code in ORDER]
        if not passed:
            if any(v.device_uuid is not None for v in self.verdicts):
                hosts = [v for v in self.verdicts if v.device_uuid is None and v.code != SPARE]
                why = "; ".join(f"host {v.hostname}: {v.message}" for v in hosts)
                return f"No device on {where} can take the claim: {why}."
            return f"No device on {where} can take the claim: none has a resource provider."
        # A reason's deployables together, or by what is said of them when that is one
        # of a few things (NUMA node 0, not 1; a label), the most common first.
        by_code: dict[str, list[Verdict]] = {}
        for verdict in passed:
            by_code.setdefault(verdict.code, []).append(verdict)
        parts: list[tuple[int, int, str]] = []
        for code, found in by_code.items():
            said: dict[str, list[Verdict]] = {}
            for verdict in found:
                said.setdefault(verdict.message, []).append(verdict)
            if code == HELD or len(said) > MAX_SAID:
                said = {"": found}
            for same in said.values():
                parts.append((-len(same), ORDER.index(code), f"{len(same)} {_phrase(code, same)}"))
        return (
            f"No device on {where} can take the claim: {', '.join(p for *_, p in sorted(parts))}."
        )


def _phrase(code: str, verdicts: Sequence[Verdict]) -> str:
    if code == HELD:
        holders = list(dict.fromkeys(str(h) for v in verdicts for h in v.holders))
        if not holders:
            return "held"
        more = ", …" if len(holders) > MAX_HOLDERS else ""
        return f"held (by {', '.join(holders[:MAX_HOLDERS])}{more})"
    messages = {v.message for v in verdicts}
    return messages.pop() if len(messages) == 1 else _GENERIC[code]


# -- reading ------------------------------------------------------------------------------

_program_dep = dep.alias("program_dep")
_FREE = sa.and_(ah.c.deployable_id == dep.c.id, ah.c.in_use.is_(False), ah.c.presence == "present")
_Q_SEEN = (
    sa.select(
        dep.c.id,
        dep.c.uuid,
        dep.c.name,
        dep.c.rp_uuid,
        dep.c.bitstream_id,
        dev.c.id.label("device_id"),
        dev.c.uuid.label("device_uuid"),
        dev.c.type.label("device_type"),
        dev.c.hostname,
        dev.c.status,
        dev.c.presence,
        dev.c.activation,
        dev.c.health_held,
        dev.c.health_reason,
        dev.c.numa_node,
        dev.c.pcie_root,
        dev.c.labels,
        hosts.c.last_report_at,
        sa.select(sa.func.count()).where(_FREE).scalar_subquery().label("free"),
        sa.select(_program_dep.c.program_uuid)
        .where(_program_dep.c.device_id == dev.c.id, _program_dep.c.program_uuid.is_not(None))
        .limit(1)
        .scalar_subquery()
        .label("programming"),
    )
    .select_from(
        dep.join(dev, dep.c.device_id == dev.c.id).outerjoin(
            hosts, hosts.c.hostname == dev.c.hostname
        )
    )
    .where(dep.c.rp_uuid.is_not(None))
    .order_by(dev.c.hostname, dep.c.id)
)
_Q_OFFERS = sa.select(attr.c.deployable_id, attr.c.key, attr.c.value, attr.c.source).where(
    attr.c.deployable_id.in_(sa.bindparam("p_ids", expanding=True)),
    sa.or_(attr.c.key == "rc", attr.c.key.startswith("trait")),
)
_Q_HOLDERS = (
    sa.select(
        ah.c.deployable_id,
        arq.c.uuid,
        arq.c.instance_uuid,
        claims.c.uuid.label("claim_uuid"),
    )
    .select_from(
        ah.join(arq, arq.c.attach_handle_id == ah.c.id).outerjoin(
            claims, claims.c.id == arq.c.claim_id
        )
    )
    .where(ah.c.deployable_id.in_(sa.bindparam("p_ids", expanding=True)), ah.c.in_use.is_(True))
    .order_by(ah.c.deployable_id, ah.c.id)
)


def _blocked(row: sa.Row[*tuple[Any, ...]], cutoff: dt.datetime | None) -> tuple[str, str] | None:
    """Why the device takes no bind at all, as a bind would say it (exosuit/db/arqs.py
    _find_deployable), or None; a host whose last report is older than ``cutoff`` too."""
    if row.presence != "present":
        return NOT_REPORTING, f"not reporting ({row.presence}: its host no longer reports it)"
    if cutoff is not None and row.last_report_at is not None and row.last_report_at < cutoff:
        when = row.last_report_at.replace(microsecond=0).isoformat()
        return NOT_REPORTING, f"not reporting (its host last reported at {when}Z)"
    if row.status != "enabled":
        return DRAINED, f"drained (status {row.status})"
    if row.health_held is not None:
        if row.health_reason:
            return UNHEALTHY, f"unhealthy: {row.health_reason}"
        return UNHEALTHY, f"unhealthy (held back by its {row.health_held})"
    if row.activation != READY:
        return INACTIVE, f"inactive (activation {row.activation}, not ready)"
    if row.programming is not None:
        return PROGRAMMING, f"being programmed (program {row.programming})"
    return None


def read(
    conn: Connection, *, hostname: str | None = None, stale_after: float | None = None
) -> dict[str, list[Candidate]]:
    """Every deployable with a resource provider (on ``hostname``, or every host), by host
    in name order. A host whose agent last reported more than ``stale_after`` seconds
    ago is not reporting (None: never said so)."""
    stmt = _Q_SEEN if hostname is None else _Q_SEEN.where(dev.c.hostname == hostname)
    rows = conn.execute(stmt).all()
    ids = [r.id for r in rows]
    attributes: dict[int, list[offers.Attribute]] = {i: [] for i in ids}
    held: dict[int, list[Holder]] = {}
    if ids:
        for a in conn.execute(_Q_OFFERS, {"p_ids": ids}):
            attributes[a.deployable_id].append((a.key, a.value, a.source))
        full = [r.id for r in rows if not r.free]
        if full:
            for h in conn.execute(_Q_HOLDERS, {"p_ids": full}):
                held.setdefault(h.deployable_id, []).append(
                    Holder(h.uuid, h.instance_uuid, h.claim_uuid)
                )
    cutoff = None
    if stale_after is not None:
        cutoff = models.utcnow() - dt.timedelta(seconds=stale_after)
    found: dict[str, list[Candidate]] = {}
    for r in rows:
        rc, traits = offers.offered(attributes[r.id], r.device_type)
        found.setdefault(r.hostname, []).append(
            Candidate(
                hostname=r.hostname,
                deployable_id=r.id,
                deployable_uuid=r.uuid,
                name=r.name,
                rp_uuid=r.rp_uuid,
                bitstream_id=r.bitstream_id,
                device_id=r.device_id,
                device_uuid=r.device_uuid,
                device_type=r.device_type,
                numa_node=r.numa_node,
                pcie_root=r.pcie_root,
                labels=device_labels.decode(r.labels),
                rc=rc,
                traits=traits,
                free=int(r.free),
                holders=tuple(held.get(r.id, ())),
                blocked=_blocked(r, cutoff),
            )
        )
    return found


# -- evaluating (pure) -------------------------------------------------------------------


def _reason(
    candidate: Candidate,
    group: ProfileGroup,
    constraints: Constraints,
    exclude: frozenset[str],
) -> tuple[str, str] | None:
    """The first reason ``candidate`` cannot serve ``group`` alone (before the constraints
    across groups), or None."""
    if candidate.blocked is not None:
        return candidate.blocked
    if candidate.rp_uuid in exclude:
        return EXCLUDED, "refused by Placement (its capacity taken meanwhile)"
    if group.resources and candidate.rc not in group.resources:
        wanted = " or ".join(sorted(group.resources))
        return WRONG_RESOURCE_CLASS, f"of resource class {candidate.rc}, not {wanted}"
    missing = group.required_traits - candidate.traits
    if missing:
        return MISSING_TRAIT, f"missing trait {', '.join(sorted(missing))}"
    forbidden = group.forbidden_traits & candidate.traits
    if forbidden:
        return FORBIDDEN_TRAIT, f"has forbidden trait {', '.join(sorted(forbidden))}"
    for wanted_node in (group.numa_node, constraints.numa_node):
        if wanted_node is not None and candidate.numa_node != wanted_node:
            node = f"NUMA node {candidate.numa_node}"
            if candidate.numa_node is None:
                node = "an unknown NUMA node"
            return NUMA_NODE, f"on {node}, not {wanted_node}"
    for key, value in sorted(group.labels.items()):
        if candidate.labels.get(key) != value:
            return LABEL, f"missing label {key}={value}"
    if candidate.free < 1:
        held = ", ".join(str(h) for h in candidate.holders[:MAX_HOLDERS])
        return HELD, f"every attach handle held (by {held})" if held else "no free attach handle"
    return None


def _key(candidate: Candidate, constraints: Constraints) -> tuple[Any, ...] | None:
    """Where the candidate sits, as far as the constraints across groups care; None when
    it cannot say (an unknown NUMA node or PCIe root)."""
    key: tuple[Any, ...] = ()
    if constraints.same_numa_node:
        if candidate.numa_node is None:
            return None
        key += (candidate.numa_node,)
    if constraints.same_pcie_root:
        if candidate.pcie_root is None:
            return None
        key += (candidate.pcie_root,)
    return key


def _place(constraints: Constraints) -> str | None:
    """What the constraints keep together ("NUMA node", "PCIe root"), or None."""
    words = [
        word
        for on, word in (
            (constraints.same_numa_node, "NUMA node"),
            (constraints.same_pcie_root, "PCIe root"),
        )
        if on
    ]
    return " and ".join(words) or None


def assign(
    needed: Sequence[tuple[int, int]],
    by_group: Mapping[int, Sequence[Candidate]],
    distinct: bool,
) -> tuple[tuple[int, Candidate], ...] | None:
    """A candidate for every unit (``needed``: (group index, units) in group order), each
    taking one free attach handle, on distinct devices when ``distinct``; None when
    there is none. A bipartite matching (units to handles, or to devices), the first
    candidates of each group preferred."""
    units = [index for index, count in needed for _ in range(count)]
    slots: dict[Any, Candidate] = {}
    edges: list[list[Any]] = []
    for index in units:
        mine = []
        for candidate in by_group[index]:
            if distinct:
                slot: Any = ("device", candidate.device_id)
                slots.setdefault(slot, candidate)
                mine.append((slot, candidate))
            else:
                for k in range(candidate.free):
                    slot = (candidate.deployable_id, k)
                    slots[slot] = candidate
                    mine.append((slot, candidate))
        edges.append(mine)
    taken: dict[Any, tuple[int, Candidate]] = {}  # slot → (unit, candidate)

    def place(unit: int, seen: set[Any]) -> bool:
        for slot, candidate in edges[unit]:
            if slot in seen:
                continue
            seen.add(slot)
            if slot not in taken or place(taken[slot][0], seen):
                taken[slot] = (unit, candidate)
                return True
        return False

    for unit in range(len(units)):
        if not place(unit, set()):
            return None
    chosen = {unit: candidate for unit, candidate in taken.values()}
    return tuple((units[u], chosen[u]) for u in range(len(units)))


def _group_text(index: int, group: ProfileGroup) -> str:
    asked = ", ".join(f"{rc}:{n}" for rc, n in sorted(group.resources.items()))
    return f"group {index}" + (f" ({asked})" if asked else "")


def evaluate(
    groups: Mapping[int, ProfileGroup],
    needed: Sequence[tuple[int, int]],
    candidates: Mapping[str, Sequence[Candidate]],
    constraints: Constraints,
    *,
    exclude: Iterable[str] = (),
    prefer: Mapping[int, frozenset[str]] | None = None,
) -> Evaluation:
    """The verdicts on every host and deployable of ``candidates``, and the hosts that can
    serve the claim. ``groups``: group index → group; ``needed``: (group index, units);
    ``prefer``: group index → images whose deployables that hold one come first."""
    excluded = frozenset(exclude)
    verdicts: list[Verdict] = []
    plan: dict[str, list[Option]] = {}
    for hostname, found in candidates.items():
        host, devices, options = _evaluate_host(
            hostname, groups, needed, found, constraints, excluded, prefer or {}, not plan
        )
        if options:
            plan[hostname] = options
        verdicts.append(host)
        verdicts.extend(devices)
    return Evaluation(tuple(verdicts), plan)


def _verdict(candidate: Candidate, code: str, message: str, group: int | None) -> Verdict:
    return Verdict(
        hostname=candidate.hostname,
        code=code,
        message=message,
        device_uuid=candidate.device_uuid,
        deployable_uuid=candidate.deployable_uuid,
        rp_uuid=candidate.rp_uuid,
        deployable_name=candidate.name,
        group=group,
        holders=candidate.holders if code == HELD else (),
    )


def _evaluate_host(
    hostname: str,
    groups: Mapping[int, ProfileGroup],
    needed: Sequence[tuple[int, int]],
    found: Sequence[Candidate],
    constraints: Constraints,
    excluded: frozenset[str],
    prefer: Mapping[int, frozenset[str]],
    first: bool,
) -> tuple[Verdict, list[Verdict], list[Option]]:
    # Each candidate's first reason for each group; its verdict: the reason of the group
    # it came closest to serving (latest in ORDER).
    fits: dict[int, list[Candidate]] = {index: [] for index in groups}
    closest: dict[int, tuple[int, str, str, int]] = {}  # deployable id → rank, code, why, group
    for candidate in found:
        for index, group in groups.items():
            reason = _reason(candidate, group, constraints, excluded)
            if reason is None:
                fits[index].append(candidate)
                rank = len(ORDER)
                reason = (SPARE, "free, not needed")
            else:
                rank = ORDER.index(reason[0])
            if candidate.deployable_id not in closest or rank > closest[candidate.deployable_id][0]:
                closest[candidate.deployable_id] = (rank, reason[0], reason[1], index)
    for index, loaded in prefer.items():
        # A group that asks for no unit (resources:X=0 beside an image) has nothing to
        # place, so nothing to prefer either.
        if index in fits:
            fits[index].sort(key=lambda c: c.bitstream_id not in loaded)
    verdicts = {c.deployable_id: _verdict(c, *closest[c.deployable_id][1:]) for c in found}
    options: list[Option] = []

    def answer(code: str, message: str) -> tuple[Verdict, list[Verdict], list[Option]]:
        return Verdict(hostname, code, message), [verdicts[c.deployable_id] for c in found], options

    if found and all(c.blocked and c.blocked[0] == NOT_REPORTING for c in found):
        return answer(NOT_REPORTING, found[0].blocked[1] if found[0].blocked else "")
    empty = [index for index, _ in needed if not fits[index]]
    if empty:
        unserved = _group_text(empty[0], groups[empty[0]])
        for candidate in found:
            verdict = verdicts[candidate.deployable_id]
            if verdict.code == SPARE:
                why = f"free, but no device on its host serves {unserved}"
                verdicts[candidate.deployable_id] = dataclasses.replace(
                    verdict, code=UNPAIRED, message=why
                )
        return answer(NO_FIT, f"no device here serves {unserved}")
    # The constraints across groups: the candidates by where they sit, each place tried.
    places: dict[tuple[Any, ...], dict[int, list[Candidate]]] = {}
    for index, fitting in fits.items():
        for candidate in fitting:
            key = _key(candidate, constraints)
            if key is None:
                unknown = candidate.numa_node is None and constraints.same_numa_node
                what = "NUMA node" if unknown else "PCIe root"
                verdicts[candidate.deployable_id] = _verdict(
                    candidate, TOPOLOGY, f"{what} unknown ({constraints.names()})", index
                )
                continue
            places.setdefault(key, {i: [] for i in groups})[index].append(candidate)
    failed: dict[tuple[Any, ...], str] = {}
    for key in sorted(places):  # NUMA node 0 first, then 1 … (each place's parts alike)
        by_group = places[key]
        lacking = [index for index, _ in needed if not by_group[index]]
        if lacking:
            failed[key] = f"without a free device of {_group_text(lacking[0], groups[lacking[0]])}"
            continue
        assignment = assign(needed, by_group, constraints.distinct_devices)
        if assignment is None:
            failed[key] = "with too few " + (
                "distinct devices" if constraints.distinct_devices else "free attach handles"
            )
            continue
        options.append(Option(by_group, assignment))
    place = _place(constraints)
    names = constraints.names()
    for key, why in failed.items():
        where = f"alone on its {place}, " if place else ""
        message = f"{where}{why} ({names})" if names else f"{where}{why}"
        code = TOPOLOGY if names else HELD
        for index, fitting in places[key].items():
            for candidate in fitting:
                verdicts[candidate.deployable_id] = _verdict(candidate, code, message, index)
    if not options:
        if place:
            return answer(TOPOLOGY, f"no {place} here serves every group ({names})")
        if constraints.distinct_devices:
            return answer(TOPOLOGY, f"too few distinct devices here ({names})")
        return answer(HELD, "too few free attach handles here for every unit")
    if not first:
        return answer(SPARE, "could take the claim too; a host before it comes first")
    for index, candidate in options[0].assignment:
        verdicts[candidate.deployable_id] = _verdict(
            candidate, CHOSEN, f"chosen for {_group_text(index, groups[index])}", index
        )
    return answer(CHOSEN, "the claim would be made here")
