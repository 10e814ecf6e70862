"""Drivers as managed objects (doc/devices.md): what each host's agent reports of its
driver plug-ins, and what an operator asks of them (install, update, uninstall).

One ``host_drivers`` row per (host, driver): the ``desired_*`` columns hold what was
asked (``desired_generation``: the host's desired-state generation that carries it),
the others what the agent last reported (``record_reported``, in the inventory
transaction). What was asked of every host is kept in the row of hostname ``FLEET``
too, so that hosts that report later get it; a host's own ``desired_*`` win over it.
A change bumps the generation of each host it names and writes their rows in one
transaction; an uninstall first refuses while any device of the driver on those hosts
has a held attach handle, and makes the others inactive (exosuit/db/activations.py) in
the same transaction, so that they leave Placement's offer before the agent stops
reporting them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import activations, audit, models
from exosuit.db.desired_state import FLEET, bump
from exosuit.db.pagination import Page, paginate
from exosuit.schemas import canonical_json

__all__ = [
    "ACTIONS",
    "FLEET",
    "SORT_COLUMNS",
    "DriverChange",
    "DriverRow",
    "change",
    "list_drivers",
    "record_reported",
]

ACTIONS = ("install", "update", "uninstall")

hd = models.host_drivers
hosts = models.hosts
dev = models.devices

SORT_COLUMNS = {"hostname": hd.c.hostname, "name": hd.c.name}
_REPORTED = ("version", "enabled", "config_digest", "found", "error")

_UPDATE_REPORTED = (
    sa.update(hd)
    .where(hd.c.id == sa.bindparam("p_id"))
    .values(
        {c: sa.bindparam(f"p_{c}") for c in _REPORTED}
        | {"reported_at": sa.bindparam("p_now"), "updated_at": sa.bindparam("p_now")}
    )
)
_UPDATE_DESIRED = (
    sa.update(hd)
    .where(hd.c.id == sa.bindparam("p_id"))
    .values(
        desired_enabled=sa.bindparam("p_enabled"),
        desired_config=sa.bindparam("p_config"),
        desired_generation=sa.bindparam("p_generation"),
        updated_at=sa.bindparam("p_now"),
    )
)


def record_reported(
    conn: Connection, hostname: str, reported: Sequence[Mapping[str, Any]], now: dt.datetime
) -> None:
    """The drivers of the host's report (a changed snapshot that has ``drivers``): each
    row's reported columns become the report's; a driver no longer reported loses its
    row, or only its reported columns while an operator's wish is kept in it."""
    rows = {r.name: r for r in conn.execute(sa.select(hd).where(hd.c.hostname == hostname))}
    inserts, updates = [], []
    seen = set()
    for driver in reported:
        name = driver["name"]
        if name in seen:
            continue
        seen.add(name)
        values = {c: driver.get(c) for c in _REPORTED}
        row = rows.get(name)
        if row is None:
            inserts.append(
                {"hostname": hostname, "name": name, "reported_at": now, "created_at": now} | values
            )
        elif any(getattr(row, c) != v for c, v in values.items()):
            updates.append(
                {"p_id": row.id, "p_now": now} | {f"p_{c}": v for c, v in values.items()}
            )
    for name, row in rows.items():
        if name in seen:
            continue
        if row.desired_generation is None:
            conn.execute(sa.delete(hd).where(hd.c.id == row.id))
        elif row.reported_at is not None:
            updates.append({"p_id": row.id, "p_now": None} | {f"p_{c}": None for c in _REPORTED})
    if updates:
        conn.execute(_UPDATE_REPORTED, updates)
    if inserts:
        conn.execute(sa.insert(hd), inserts)


def _known_hosts(conn: Connection, hostnames: Sequence[str] | None) -> list[str]:
    """The hosts named (HostNotFound for one never seen), or every host for None."""
    stmt = sa.select(hosts.c.hostname)
    if hostnames is not None:
        stmt = stmt.where(hosts.c.hostname.in_(sorted(set(hostnames))))
    known = set(conn.execute(stmt).scalars())
    if hostnames is not None:
        # Compared here too: MariaDB's collation ignores case.
        missing = sorted(set(hostnames) - known)
        if missing:
            raise exceptions.HostNotFound(hostname=", ".join(missing))
    return sorted(known)


def _offered(conn: Connection, name: str, targets: Sequence[str], every_host: bool) -> None:
    """DriverNotFound unless an agent of ``targets`` reports driver ``name`` (a plug-in it
    has, enabled or not): no agent could act on a wish for another."""
    stmt = sa.select(hd.c.name).where(hd.c.reported_at.is_not(None)).distinct()
    if not every_host:
        stmt = stmt.where(hd.c.hostname.in_(targets))
    # Compared here: MariaDB's collation ignores case.
    known = sorted(set(conn.execute(stmt).scalars()))
    if name not in known:
        hosts = "any host" if every_host else ", ".join(targets)
        raise exceptions.DriverNotFound(name=name, hosts=hosts, known=", ".join(known) or "none")


def _wish(
    action: str, config: Mapping[str, str] | None, before: tuple[bool | None, str | None]
) -> tuple[bool | None, str | None]:
    """(desired_enabled, desired_config) after ``action`` over what was asked ``before``."""
    enabled, current = before
    if config is not None:
        current = canonical_json(dict(config))
    if action == "install":
        return True, current
    if action == "uninstall":
        return False, current
    return enabled, current


class HostGeneration(TypedDict):
    hostname: str
    generation: int


class DriverChange(TypedDict):
    """What ``change`` did: the hosts asked, each with the desired-state generation that
    carries the wish, and the devices an uninstall marked inactive."""

    driver: str
    action: str
    all_hosts: bool
    hosts: list[HostGeneration]
    deactivated: list[str]


def change(
    conn: Connection,
    name: str,
    action: str,
    *,
    hostnames: Sequence[str] | None = None,
    config: Mapping[str, str] | None = None,
) -> DriverChange:
    """Install (enable), update (reconfigure) or uninstall (disable) driver ``name`` on
    ``hostnames`` (every host, and those that report later, for None): ``{"driver",
    "action", "all_hosts", "hosts": [{"hostname", "generation"}], "deactivated":
    [device uuids]}``. ``config`` (option → string) replaces the options asked before
    (None keeps them). Raises HostNotFound (a host never seen), DriverNotFound (install or
    update of a driver no agent of those hosts reports), DriverInUse (uninstall
    while an attach handle of one of its devices on those hosts is held); nothing
    changes then."""
    targets = _known_hosts(conn, hostnames)
    if action != "uninstall":
        _offered(conn, name, targets, hostnames is None)
    devices: list[sa.Row[*tuple[Any, ...]]] = []
    if action == "uninstall":
        devices = _devices_of(conn, name, hostnames)
        held = activations.holders(conn, [d.id for d in devices])
        if held:
            raise exceptions.DriverInUse(
                f"Driver {name} cannot be uninstalled while its devices are in use: "
                + "; ".join(
                    f"device {d.uuid} ({d.hostname}): {', '.join(held[d.id])}"
                    for d in devices
                    if d.id in held
                )
                + ". Release them first."
            )
    generations = bump(conn, targets)
    now = models.utcnow()
    rows = {
        r.hostname: r
        for r in conn.execute(
            sa.select(hd).where(hd.c.name == name, hd.c.hostname.in_([*targets, FLEET]))
        )
    }
    fleet = rows.get(FLEET)
    fleet_wish = (
        (fleet.desired_enabled, fleet.desired_config) if fleet is not None else (None, None)
    )
    if fleet is not None and fleet.desired_generation is None:
        fleet_wish = (None, None)
    writes: dict[str, tuple[bool | None, str | None, int]] = {}
    if hostnames is None:
        enabled, wanted = _wish(action, config, fleet_wish)
        writes[FLEET] = (enabled, wanted, max(generations.values(), default=0))
    for host in targets:
        row = rows.get(host)
        before = fleet_wish
        if row is not None and row.desired_generation is not None:
            before = (row.desired_enabled, row.desired_config)
        if hostnames is None:
            before = fleet_wish  # what is asked of every host replaces a host's own wish
        writes[host] = (*_wish(action, config, before), generations[host])
    _write(conn, name, rows, writes, now)
    _record(conn, name, action, rows, writes)
    deactivated = []
    if devices:
        deactivated = activations.deactivate(
            conn, devices, f"its driver {name} was uninstalled", generations
        )
    return {
        "driver": name,
        "action": action,
        "all_hosts": hostnames is None,
        "hosts": [{"hostname": h, "generation": generations[h]} for h in targets],
        "deactivated": deactivated,
    }


def _devices_of(
    conn: Connection, name: str, hostnames: Sequence[str] | None
) -> list[sa.Row[*tuple[Any, ...]]]:
    # The plug-in's devices; an older agent's device (no plug-in reported) by the driver
    # name it reports.
    stmt = sa.select(dev.c.id, dev.c.uuid, dev.c.hostname, dev.c.activation).where(
        sa.or_(dev.c.plugin == name, sa.and_(dev.c.plugin.is_(None), dev.c.driver_name == name))
    )
    if hostnames is not None:
        stmt = stmt.where(dev.c.hostname.in_(sorted(set(hostnames))))
    return list(conn.execute(stmt.order_by(dev.c.id).with_for_update()))


def _write(
    conn: Connection,
    name: str,
    rows: Mapping[str, sa.Row[*tuple[Any, ...]]],
    writes: Mapping[str, tuple[bool | None, str | None, int]],
    now: dt.datetime,
) -> None:
    updates, inserts = [], []
    for host, (enabled, config, generation) in writes.items():
        row = rows.get(host)
        if row is None:
            inserts.append(
                {
                    "hostname": host,
                    "name": name,
                    "desired_enabled": enabled,
                    "desired_config": config,
                    "desired_generation": generation,
                    "created_at": now,
                }
            )
        else:
            updates.append(
                {
                    "p_id": row.id,
                    "p_enabled": enabled,
                    "p_config": config,
                    "p_generation": generation,
                    "p_now": now,
                }
            )
    if updates:
        conn.execute(_UPDATE_DESIRED, updates)
    if inserts:
        conn.execute(sa.insert(hd), inserts)


def _brief(enabled: bool | None, config: str | None) -> dict[str, Any]:
    # The options' names only: a driver's option may hold a credential.
    options = sorted(json.loads(config)) if config else []
    return {"enabled": enabled, "options": options}


def _record(
    conn: Connection,
    name: str,
    action: str,
    rows: Mapping[str, sa.Row[*tuple[Any, ...]]],
    writes: Mapping[str, tuple[bool | None, str | None, int]],
) -> None:
    """The audit records of a driver's change: one per host asked (``host`` None for
    what is asked of every host)."""
    changes = []
    for host, (enabled, config, _) in writes.items():
        row = rows.get(host)
        before = None
        if row is not None and row.desired_generation is not None:
            before = _brief(row.desired_enabled, row.desired_config)
        changes.append(audit.Change(name, before, _brief(enabled, config), host or None))
    audit.record_many(conn, action, "driver", changes)


_fleet = hd.alias("fleet")
_SELECT = sa.select(
    hd,
    hosts.c.observed_generation,
    _fleet.c.desired_enabled.label("fleet_enabled"),
    _fleet.c.desired_config.label("fleet_config"),
    _fleet.c.desired_generation.label("fleet_generation"),
).select_from(
    hd.outerjoin(hosts, hosts.c.hostname == hd.c.hostname).outerjoin(
        _fleet, sa.and_(_fleet.c.name == hd.c.name, _fleet.c.hostname == FLEET)
    )
)


class Desired(TypedDict):
    """What is asked of a host's driver: enabled or not, its options, the generation that
    carries it (None: the fleet's wish, with no generation of the host's), and whose."""

    enabled: bool | None
    config: dict[str, str]
    generation: int | None
    scope: str  # host | fleet


class DriverRow(TypedDict):
    """A (host, driver) row as the API shows it: what the agent reported, what is asked
    (``desired``, None: nothing) and whether the agent applied it (``observed``; None on
    the fleet's row, whose hostname is None, or when nothing is asked)."""

    id: int
    name: str
    reported_at: dt.datetime | None
    version: str | None
    enabled: bool | None
    config_digest: str | None
    found: int | None
    error: str | None
    hostname: str | None
    desired: Desired | None
    observed: bool | None


def _driver(row: sa.Row[*tuple[Any, ...]]) -> DriverRow:
    """A row as the API shows it: ``desired`` (what is asked of the host: its own wish,
    else the fleet's; None when nothing is) and whether the agent ``observed`` it."""
    driver = {c: getattr(row, c) for c in ("id", "name", "reported_at", *_REPORTED)}
    driver["hostname"] = None if row.hostname == FLEET else row.hostname
    desired = None
    if row.desired_generation is not None:
        desired = (row.desired_enabled, row.desired_config, row.desired_generation, "host")
        if row.hostname == FLEET:
            desired = desired[:3] + ("fleet",)
    elif row.fleet_generation is not None:
        desired = (row.fleet_enabled, row.fleet_config, None, "fleet")
    driver["desired"] = None
    driver["observed"] = None
    if desired is not None:
        enabled, config, generation, scope = desired
        driver["desired"] = {
            "enabled": enabled,
            "config": json.loads(config) if config else {},
            "generation": generation,
            "scope": scope,
        }
        if row.hostname != FLEET:
            observed = row.observed_generation
            driver["observed"] = observed is not None and (
                generation is None or observed >= generation
            )
    return cast(DriverRow, driver)  # the columns picked and what was added


def list_drivers(
    conn: Connection, *, filters: Mapping[str, str], page: Page | None
) -> list[DriverRow]:
    """A page of (host, driver) rows, filtered by ``hostname`` and ``name``; the row of
    what was asked of every host has hostname None."""
    stmt = _SELECT
    for key, value in filters.items():
        stmt = stmt.where(hd.c[key] == value)
    if page is None:  # every list of 2.7 is paged; said rather than assumed
        stmt = stmt.order_by(hd.c.hostname, hd.c.name, hd.c.id)
    else:
        stmt = paginate(conn, stmt, hd, page, SORT_COLUMNS, marker_column=hd.c.id)
    return [_driver(r) for r in conn.execute(stmt)]
