"""Bring a Cyborg database over into Exosuit's: ``exosuit-manage import-cyborg``.

Cyborg's database is only read (SQLAlchemy reflection of the tables its releases
create, in a read-only transaction). Every UUID is kept: devices, control-path ids,
deployables with their ``rp_uuid`` (Placement's providers and Nova's allocations
name them), attributes, attach handles with their ``in_use`` flag, device profiles
and accelerator requests in every state, with their instance, host, profile group
and attach handle (a ``Bound`` ARQ stays ``Bound``, holding its handle).

What lets the next agent report match the imported rows instead of duplicating them:

* a device's ``identity`` is computed as the agent computes it, the canonical JSON
  of its control-path id (``exosuit.schemas.device_identity``), from Cyborg's
  ``controlpath_ids.cpid_info``: the JSON object of its PCI address that Cyborg's
  in-tree drivers write, or a bare PCI address string (``0000:af:00.0``, what some
  out-of-tree drivers stored), which is that same address;
* attach handles' ``attach_info`` is stored in canonical JSON, as reports are;
* a deployable keeps Cyborg's name and ``rp_uuid``: the inventory matches an
  existing deployable by name, or by its attach handles when the host's driver names
  it differently (``exosuit.db.inventory``), and never recomputes the ``rp_uuid`` of
  a deployable it matched;
* attributes are stored as agent-reported ones: the next report replaces them.

ARQs keep their state, except where keeping it would strand a device or Nova:

* ``BindStarted`` (a bind Cyborg had not finished: nothing in Exosuit would finish it,
  and the handle it may hold would stay taken) becomes ``BindFailed``, its attach
  handle released (Nova starts a server only once its binds resolved, so none uses
  it), and Nova is told the bind failed (a ``nova_notify`` round for its instance);
* an ARQ that holds an attach handle the target already had before this run (an
  earlier import) while the target's handle is free or held by another ARQ is not
  imported: it was deleted or unbound in Exosuit since, and must not take it back.

A device whose control-path id is neither form cannot be keyed: it is skipped with
everything under it, and the report names its providers and the ARQs holding its
handles. An applied import refuses (``UnmappedInUse``) while an ARQ holds a handle
of such a device: its server would lose the device in Exosuit, and Placement would
keep its allocation on a provider Exosuit does not know.

A dry run (``apply=False``) computes everything in a read-only transaction and
writes nothing. An applied import is one transaction, refused (``TargetNotEmpty``)
when the target holds devices, profiles or ARQs that are not rows of this source,
unless ``merge``; a row whose UUID is already in the target is left as it is, so
running the import again changes nothing. A write the target refuses (a unique
constraint: a row the target gained since, such as a deployable an agent re-created
under a Cyborg deployable's name) fails the whole import (``ImportFailed``): the
caller's transaction is rolled back, nothing is written.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import changes, models
from exosuit.db import nova as nova_db
from exosuit.db.placement import enqueue_sync
from exosuit.db.statements import insert_if_absent
from exosuit.schemas import canonical_json, device_identity

__all__ = [
    "CYBORG_TABLES",
    "ImportFailed",
    "ImportRefused",
    "ImportReport",
    "Skipped",
    "Source",
    "SourceUnreadable",
    "TargetNotEmpty",
    "Unmapped",
    "UnmappedInUse",
    "import_into",
    "read_source",
]

# Cyborg's table → Exosuit's, in the order rows are written (parents first).
CYBORG_TABLES = {
    "devices": "devices",
    "controlpath_ids": "controlpath_ids",
    "deployables": "deployables",
    "attributes": "attributes",
    "attach_handles": "attach_handles",
    "device_profiles": "device_profiles",
    "extended_accelerator_requests": "accelerator_requests",
}
_REQUIRED = frozenset(CYBORG_TABLES) - {"attributes"}
_ARQ_STATES = frozenset({"Initial", "BindStarted", "Bound", "BindFailed", "Unbound", "Deleting"})
# What Nova is told of an instance's ARQs when one of its binds is failed by the import.
_NOVA_STATUS = {
    "Bound": nova_db.COMPLETED,
    "BindFailed": nova_db.FAILED,
    "Deleting": nova_db.FAILED,
}
# A bare PCI address (domain:bus:device.function), as some out-of-tree drivers stored it.
_PCI_ADDRESS = re.compile(
    r"^(?P<domain>[0-9a-f]{4}):(?P<bus>[0-9a-f]{2}):(?P<device>[0-9a-f]{2})\.(?P<function>[0-7])$"
)
_BIND_INTERRUPTED = (
    "the bind was in progress when Cyborg stopped (BindStarted); the import failed it"
)

Row = dict[str, Any]


class SourceUnreadable(Exception):
    """The source is not a Cyborg database this import knows."""


class ImportRefused(Exception):
    """An applied import that wrote nothing (its transaction rolled back), and why."""


class TargetNotEmpty(ImportRefused):
    """The target holds rows that did not come from this source (use ``merge``)."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        held = ", ".join(f"{n} {table}" for table, n in counts.items() if n)
        super().__init__(
            f"the target database already holds {held} not imported from this source; "
            "import into an empty database, or pass --merge to add to it"
        )


class UnmappedInUse(ImportRefused):
    """ARQs hold attach handles of devices the import cannot key."""

    def __init__(self, unmapped: list[Unmapped]) -> None:
        self.unmapped = unmapped
        held = "; ".join(
            f"ARQ {arq} ({state}, instance {instance}) holds attach handle {handle} of "
            f"device {u.device} on {u.hostname}"
            for u in unmapped
            for arq, state, instance, handle in u.holders
        )
        super().__init__(
            f"{held}. That device cannot be mapped (see the report): its server would lose "
            "it in Exosuit and Placement would keep its allocation on a provider Exosuit "
            "does not know. Shelve those servers (Nova deletes their ARQs and frees the "
            "device), import, then unshelve them; or correct the device's control-path id "
            "in Cyborg's database to its PCI address"
        )


class ImportFailed(ImportRefused):
    """The target refused a row (a constraint): the import is rolled back whole."""

    def __init__(self, table: str, uuid: str, error: str) -> None:
        self.table, self.uuid = table, uuid
        super().__init__(
            f"the target refused {table} {uuid}: {error}. The target holds rows that "
            "conflict with Cyborg's (an agent reported, or Exosuit deleted or re-created "
            "rows since an earlier import): the whole import was rolled back"
        )


@dataclasses.dataclass(frozen=True)
class Unmapped:
    """A device that cannot be keyed: what is left out with it, and who holds it."""

    device: str
    hostname: str
    # (deployable name, rp_uuid) of each of its deployables.
    providers: tuple[tuple[str, str | None], ...]
    # (ARQ uuid, state, instance uuid, attach handle uuid) of each ARQ holding a handle.
    holders: tuple[tuple[str, str, str | None, str], ...]


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A Cyborg row that cannot be brought over, and why."""

    table: str
    uuid: str
    reason: str


@dataclasses.dataclass
class ImportReport:
    """What an import found, wrote (or would write), left alone and could not map."""

    source: str
    applied: bool
    found: dict[str, int] = dataclasses.field(default_factory=dict)  # Cyborg's tables
    new: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    present: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    skipped: list[Skipped] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    unmapped: list[Unmapped] = dataclasses.field(default_factory=list)
    hosts: list[str] = dataclasses.field(default_factory=list)
    # Rows of the target that are not from this source (refused without merge).
    foreign: dict[str, int] = dataclasses.field(default_factory=dict)

    def lines(self) -> list[str]:
        """The report as an operator reads it."""
        verb = "imported" if self.applied else "would import (dry run: nothing written)"
        out = [f"Cyborg database {self.source}: {verb}"]
        out.append(f"{'Cyborg table':32} {'rows':>6} {'new':>6} {'present':>8} {'skipped':>8}")
        skipped = collections.Counter(s.table for s in self.skipped)
        for cyborg, exosuit in CYBORG_TABLES.items():
            out.append(
                f"{cyborg:32} {self.found.get(cyborg, 0):>6} {self.new[exosuit]:>6} "
                f"{self.present[exosuit]:>8} {skipped[cyborg]:>8}"
            )
        out.append(f"hosts: {', '.join(self.hosts) or 'none'}")
        if any(self.foreign.values()):
            held = ", ".join(f"{n} {t}" for t, n in self.foreign.items() if n)
            out.append(f"the target already holds rows not from this source: {held}")
        for item in self.skipped:
            out.append(f"cannot map {item.table} {item.uuid}: {item.reason}")
        for unmapped in self.unmapped:
            out.extend(_unmapped_lines(unmapped))
        for warning in self.warnings:
            out.append(f"note: {warning}")
        return out


@dataclasses.dataclass(frozen=True)
class Source:
    """Cyborg's rows, table by table (each row a dict of its columns), ordered by id."""

    url: str
    rows: dict[str, list[Row]]

    def uuids(self, table: str) -> set[str]:
        return {r["uuid"] for r in self.rows.get(table, ())}


def _unmapped_lines(unmapped: Unmapped) -> list[str]:
    out = []
    for name, rp_uuid in unmapped.providers:
        out.append(
            f"  device {unmapped.device}: deployable {name} is left out; Exosuit does not "
            f"take its Placement provider {rp_uuid or '(none)'} over: the host's next report "
            "adds the device anew (new uuid, new provider); delete that provider once no "
            "allocation uses it"
        )
    for arq, state, instance, handle in unmapped.holders:
        out.append(
            f"  device {unmapped.device}: ARQ {arq} ({state}, instance {instance}) holds its "
            f"attach handle {handle}: --apply refuses while it does (shelve the server "
            "first)"
        )
    return out


def read_source(url: str) -> Source:
    """Read every table of the import from Cyborg's database, in a read-only transaction."""
    engine = sa.create_engine(url)
    shown = engine.url.render_as_string(hide_password=True)
    try:
        with engine.connect() as conn:
            _read_only(conn)
            present = set(sa.inspect(conn).get_table_names())
            missing = sorted(_REQUIRED - present)
            if missing:
                raise SourceUnreadable(
                    f"{shown} is not a Cyborg database (no table {', '.join(missing)}); "
                    "run the import against the database cyborg-dbsync created"
                )
            metadata = sa.MetaData()
            names = [t for t in CYBORG_TABLES if t in present]
            metadata.reflect(bind=conn, only=names)
            rows = {}
            for name in names:
                table = metadata.tables[name]
                result = conn.execute(sa.select(table).order_by(table.c.id))
                rows[name] = [dict(r._mapping) for r in result]
            conn.rollback()
    except sa.exc.SQLAlchemyError as error:
        raise SourceUnreadable(f"cannot read {shown}: {error}".splitlines()[0]) from error
    finally:
        engine.dispose()
    return Source(shown, rows)


def _read_only(conn: Connection) -> None:
    dialect = conn.dialect.name
    if dialect == "sqlite":
        conn.exec_driver_sql("PRAGMA query_only = ON")
    elif dialect in ("mysql", "mariadb"):
        # Applies to the transaction the next statement starts.
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
    elif dialect == "postgresql":
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")


def import_into(conn: Connection, source: Source, *, apply: bool, merge: bool) -> ImportReport:
    """Import ``source`` in the caller's transaction (``apply``) or only report what
    would be imported. Applying raises (an ImportRefused, after which the caller must
    roll back: rows may have been written) TargetNotEmpty when the target holds rows
    not from this source, without ``merge``; UnmappedInUse when ARQs hold handles of
    devices that cannot be keyed; ImportFailed when the target refuses a row."""
    importer = _Importer(conn, source, apply=apply)
    importer.report.foreign = importer.foreign_rows()
    if apply and not merge and any(importer.report.foreign.values()):
        raise TargetNotEmpty(importer.report.foreign)
    importer.run()
    held = [u for u in importer.report.unmapped if u.holders]
    if apply and held:
        raise UnmappedInUse(held)
    return importer.report


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _strings(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _board_info(text: Any) -> str | None:
    """Exosuit keeps board info as canonical JSON; Cyborg as free text (usually JSON)."""
    if text is None:
        return None
    parsed = _loads(text)
    return canonical_json(parsed) if isinstance(parsed, dict) else str(text)


def _control_path(text: Any) -> dict[str, str] | None:
    """The control-path id Exosuit's agents would report for Cyborg's ``cpid_info``:
    its JSON object, or the PCI address fields of a bare address; None for neither."""
    info = _loads(text)
    if _strings(info):
        return dict(info)
    match = _PCI_ADDRESS.match(text.strip().lower()) if isinstance(text, str) else None
    return match.groupdict() if match else None


def _pci_address(info: dict[str, str]) -> str | None:
    try:
        return f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
    except KeyError:
        return None


class _Importer:
    def __init__(self, conn: Connection, source: Source, *, apply: bool) -> None:
        self.conn = conn
        self.source = source
        self.apply = apply
        self.now = models.utcnow()
        self.report = ImportReport(source.url, apply)
        self.report.found = {t: len(source.rows.get(t, ())) for t in CYBORG_TABLES}
        # Cyborg id → Exosuit id, per Cyborg table (negative ids in a dry run).
        self.ids: dict[str, dict[int, int]] = collections.defaultdict(dict)
        self.dry_ids = 0
        self.hosts: set[str] = set()
        self.changed_hosts: set[str] = set()
        # Cyborg ids of rows whose UUID the target already had (kept as they are).
        self.kept: dict[str, set[int]] = collections.defaultdict(set)
        arqs = self.source.rows.get("extended_accelerator_requests", [])
        # Attach handles held by a bind the import fails (BindStarted): imported free.
        self.released = {
            r["attach_handle_id"]
            for r in arqs
            if r["state"] == "BindStarted" and r.get("attach_handle_id") is not None
        }
        # The ARQ rows imported in this run, by Cyborg id, as written (for Nova's rounds).
        self.arqs_written: dict[int, Row] = {}

    # -- the target -------------------------------------------------------------------
    def _existing(self, table: sa.Table, uuids: Iterable[str]) -> dict[str, int]:
        wanted = list(uuids)
        found: dict[str, int] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            found.update(
                (r.uuid, r.id)
                for r in self.conn.execute(
                    sa.select(table.c.uuid, table.c.id).where(table.c.uuid.in_(chunk))
                )
            )
        return found

    def foreign_rows(self) -> dict[str, int]:
        """Rows of the target's devices, profiles and ARQs whose UUID is not the source's."""
        counts = {}
        for cyborg, table in (
            ("devices", models.devices),
            ("device_profiles", models.device_profiles),
            ("extended_accelerator_requests", models.accelerator_requests),
        ):
            ours = self.source.uuids(cyborg)
            counts[table.name] = sum(
                1 for u in self.conn.execute(sa.select(table.c.uuid)).scalars() if u not in ours
            )
        return counts

    def _insert(self, cyborg: str, table: sa.Table, row: Row, values: Row) -> None:
        values.setdefault("created_at", row.get("created_at") or self.now)
        values.setdefault("updated_at", row.get("updated_at"))
        if self.apply:
            try:
                key = self.conn.execute(sa.insert(table).values(**values)).inserted_primary_key
            except sa.exc.IntegrityError as error:
                reason = str(error.orig).splitlines()[0]
                raise ImportFailed(table.name, values["uuid"], reason) from error
            assert key is not None  # a single-row insert
            new_id: int = key[0]
            if table is models.deployables or table is models.attributes:
                changes.mark(self.conn, changes.DEPLOYABLES)
        else:
            self.dry_ids -= 1
            new_id = self.dry_ids
        self.ids[cyborg][row["id"]] = new_id
        self.report.new[table.name] += 1

    def _walk(
        self,
        cyborg: str,
        table: sa.Table,
        build: Callable[[Row], Row | str | None],
    ) -> None:
        """For each Cyborg row: keep it if its UUID is in the target, else ``build`` its
        values (a str: the reason it is skipped; None: skipped, already reported)."""
        rows = self.source.rows.get(cyborg, [])
        existing = self._existing(table, (r["uuid"] for r in rows))
        for row in rows:
            if row["uuid"] in existing:
                self.ids[cyborg][row["id"]] = existing[row["uuid"]]
                self.kept[cyborg].add(row["id"])
                self.report.present[table.name] += 1
                continue
            values = build(row)
            if isinstance(values, str):
                self.report.skipped.append(Skipped(cyborg, row["uuid"], values))
            elif values is not None:
                self._insert(cyborg, table, row, {"uuid": row["uuid"], **values})

    # -- the tables -------------------------------------------------------------------
    def run(self) -> None:
        self._devices()
        self._walk("controlpath_ids", models.controlpath_ids, self._cpid)
        self._walk("deployables", models.deployables, self._deployable)
        self._walk("attributes", models.attributes, self._attribute)
        self._walk("attach_handles", models.attach_handles, self._handle)
        self._profiles()
        self._walk("extended_accelerator_requests", models.accelerator_requests, self._arq)
        self._check_handles()
        self._unmapped()
        self.report.hosts = sorted(self.hosts)
        if self.apply:
            self._hosts()
            self._tell_nova()

    def _devices(self) -> None:
        cpids: dict[int, list[Row]] = collections.defaultdict(list)
        for cpid in self.source.rows.get("controlpath_ids", []):
            cpids[cpid["device_id"]].append(cpid)
        taken = {
            (r.hostname, r.identity): r.uuid
            for r in self.conn.execute(
                sa.select(
                    models.devices.c.hostname, models.devices.c.identity, models.devices.c.uuid
                )
            )
        }
        drivers: dict[int, str] = {}
        for dep in self.source.rows.get("deployables", []):
            if dep.get("driver_name"):
                drivers.setdefault(dep["device_id"], dep["driver_name"])

        def build(row: Row) -> Row | str:
            own = cpids.get(row["id"])
            if not own:
                return "it has no control-path id, by which Exosuit knows a device on its host"
            info = _control_path(own[0]["cpid_info"])
            if info is None:
                return (
                    f"its control-path id {own[0]['cpid_info']!r} is neither a JSON object "
                    "of strings nor a PCI address (DDDD:BB:DD.F): Exosuit knows a device "
                    "by the control-path id its agent reports, the device's PCI address, "
                    "and nothing in this one says which PCI device it is"
                )
            if _loads(own[0]["cpid_info"]) is None:
                self.report.warnings.append(
                    f"device {row['uuid']} ({row['hostname']}): its control-path id "
                    f"{own[0]['cpid_info']!r} is a bare PCI address: imported as "
                    f"{canonical_json(info)}, as Exosuit's agent reports that device"
                )
            identity = device_identity({"cpid_type": own[0]["cpid_type"], "cpid_info": info})
            other = taken.get((row["hostname"], identity))
            if other is not None:
                return (
                    f"host {row['hostname']} already has device {other} with the same "
                    "control-path id in Exosuit"
                )
            self.hosts.add(row["hostname"])
            self.changed_hosts.add(row["hostname"])
            return {
                "type": row["type"],
                "vendor": row["vendor"],
                "model": row["model"],
                "std_board_info": _board_info(row.get("std_board_info")),
                "vendor_board_info": _board_info(row.get("vendor_board_info")),
                "hostname": row["hostname"],
                "identity": identity,
                "status": row.get("status") or "enabled",
                "presence": "present",
                # Cyborg offered every device it found: ready (doc/devices.md).
                "activation": "ready",
                "driver_name": drivers.get(row["id"]),
                "pci_address": _pci_address(info) if own[0]["cpid_type"] == "PCI" else None,
            }

        self._walk("devices", models.devices, build)
        for row in self.source.rows.get("devices", []):
            if row["id"] in self.ids["devices"]:
                self.hosts.add(row["hostname"])

    def _cpid(self, row: Row) -> Row | None:
        device = self.ids["devices"].get(row["device_id"])
        if device is None:
            return None  # its device was skipped, with the reason
        info = _control_path(row["cpid_info"])
        return {
            "device_id": device,
            "cpid_type": row["cpid_type"],
            "cpid_info": row["cpid_info"] if info is None else canonical_json(info),
        }

    def _deployable(self, row: Row) -> Row | str:
        device = self.ids["devices"].get(row["device_id"])
        if device is None:
            return "its device was not imported"
        values: Row = {
            "name": row["name"],
            "num_accelerators": row["num_accelerators"],
            "device_id": device,
            "rp_uuid": row.get("rp_uuid"),
            "driver_name": row.get("driver_name"),
            "bitstream_id": row.get("bitstream_id"),
        }
        for key in ("parent_id", "root_id"):
            if row.get(key) is not None:
                values[key] = self.ids["deployables"].get(row[key])
        if not row.get("rp_uuid"):
            self.report.warnings.append(
                f"deployable {row['uuid']} ({row['name']}) has no rp_uuid in Cyborg (its "
                "provider was never created): it gets none until its host's next report"
            )
        return values

    def _attribute(self, row: Row) -> Row | str:
        deployable = self.ids["deployables"].get(row["deployable_id"])
        if deployable is None:
            return "its deployable was not imported"
        return {
            "deployable_id": deployable,
            "key": row["key"],
            "value": row["value"],
            # Reported by Cyborg's agent: the next report of Exosuit's replaces them.
            "source": "agent",
        }

    def _handle(self, row: Row) -> Row | str:
        deployable = self.ids["deployables"].get(row["deployable_id"])
        if deployable is None:
            return "its deployable was not imported"
        info = _loads(row["attach_info"])
        if not isinstance(info, dict):
            return f"its attach_info {row['attach_info']!r} is not a JSON object"
        return {
            "deployable_id": deployable,
            "cpid_id": self.ids["controlpath_ids"].get(row.get("cpid_id") or 0),
            # A handle a failed bind took is free again (see _arq).
            "in_use": bool(row.get("in_use")) and row["id"] not in self.released,
            "attach_type": row["attach_type"],
            "attach_info": canonical_json(info),
            "presence": "present",
        }

    def _profiles(self) -> None:
        names = {
            r.name: (r.uuid, r.id, r.profile_json)
            for r in self.conn.execute(
                sa.select(
                    models.device_profiles.c.name,
                    models.device_profiles.c.uuid,
                    models.device_profiles.c.id,
                    models.device_profiles.c.profile_json,
                )
            )
        }

        def build(row: Row) -> Row | str | None:
            data = _loads(row["profile_json"])
            groups = data.get("groups") if isinstance(data, dict) else None
            if not isinstance(groups, list) or not all(_strings(g) for g in groups):
                return "its profile_json holds no list of groups of strings"
            same = names.get(row["name"])
            if same is not None:
                # Re-created in Exosuit under the same name: its ARQs use that one.
                self.ids["device_profiles"][row["id"]] = same[1]
                self.report.present["device_profiles"] += 1
                other = _loads(same[2])
                differ = "" if other == {"groups": groups} else ", with other groups"
                self.report.warnings.append(
                    f"device profile {row['uuid']} ({row['name']}): Exosuit already has a "
                    f"profile of that name ({same[0]}{differ}); its ARQs are imported "
                    "under that one"
                )
                return None
            return {
                "name": row["name"],
                "profile_json": json.dumps({"groups": groups}),
                "description": row.get("description"),
            }

        self._walk("device_profiles", models.device_profiles, build)

    def _arq(self, row: Row) -> Row | str:
        profile = self.ids["device_profiles"].get(row["device_profile_id"])
        if profile is None:
            return "its device profile was not imported"
        state = row["state"]
        if state not in _ARQ_STATES:
            return f"its state {state!r} is not one of Cyborg's ARQ states"
        handle = None
        if row.get("attach_handle_id") is not None:
            handle = self.ids["attach_handles"].get(row["attach_handle_id"])
            if handle is None:
                return "the attach handle it holds was not imported"
        deployable = None
        if row.get("deployable_id") is not None:
            deployable = self.ids["deployables"].get(row["deployable_id"])
        reason = None
        if state == "BindStarted":
            # Nothing in Exosuit finishes a bind Cyborg started: failed now, its handle
            # (if bind had taken one) free again, and Nova told (_tell_nova).
            released = "" if handle is None else ", its attach handle released"
            self.report.warnings.append(
                f"ARQ {row['uuid']} was being bound when Cyborg stopped (BindStarted, "
                f"instance {row.get('instance_uuid')}): imported BindFailed{released}; "
                "Nova is told the bind failed"
            )
            state, reason, handle, deployable = "BindFailed", _BIND_INTERRUPTED, None, None
        elif handle is not None and row["attach_handle_id"] in self.kept["attach_handles"]:
            taken = self._taken_since(row, handle)
            if taken is not None:
                return taken
        if state == "Bound" and handle is None:
            self.report.warnings.append(
                f"ARQ {row['uuid']} is Bound in Cyborg without an attach handle: "
                "it is imported so, and Nova sees no device for it"
            )
        if state == "Deleting":
            holding = "" if handle is None else ", still holding its attach handle"
            self.report.warnings.append(
                f"ARQ {row['uuid']} is Deleting in Cyborg (a deletion Cyborg never "
                f"finished): imported Deleting{holding}; Nova counts it resolved, and "
                "deleting it (Nova, or `openstack accelerator arq delete`) releases it"
            )
        values = {
            "project_id": row.get("project_id"),
            "state": state,
            "device_profile_id": profile,
            "device_profile_group_id": row.get("device_profile_group_id") or 0,
            "hostname": row.get("hostname"),
            "device_rp_uuid": row.get("device_rp_uuid"),
            "instance_uuid": row.get("instance_uuid"),
            "attach_handle_id": handle,
            "deployable_id": deployable,
            "reason": reason,
        }
        self.arqs_written[row["id"]] = {"uuid": row["uuid"], **values}
        return values

    def _taken_since(self, row: Row, handle: int) -> str | None:
        """Why an ARQ must not take back a handle the target already had (an earlier
        import) and has freed or given to another ARQ since; None if it may."""
        found = self.conn.execute(
            sa.select(models.attach_handles.c.uuid, models.attach_handles.c.in_use).where(
                models.attach_handles.c.id == handle
            )
        ).one()
        holder = self.conn.execute(
            sa.select(models.accelerator_requests.c.uuid).where(
                models.accelerator_requests.c.attach_handle_id == handle
            )
        ).scalar()
        if holder is not None:
            return (
                f"it holds attach handle {found.uuid}, which ARQ {holder} holds in Exosuit: "
                "this ARQ was deleted or unbound in Exosuit after an earlier import"
            )
        if not found.in_use:
            return (
                f"it holds attach handle {found.uuid}, which is free in Exosuit: this ARQ "
                "was deleted or unbound in Exosuit after an earlier import, and taking the "
                "handle back could give one device to two servers"
            )
        return None

    def _check_handles(self) -> None:
        """Cyborg's in_use flags are kept as they are; say where they disagree with the
        ARQs (a handle in use that no ARQ holds is never offered again)."""
        held = {
            r["attach_handle_id"]
            for r in self.source.rows.get("extended_accelerator_requests", [])
            if r.get("attach_handle_id") is not None
        }
        for row in self.source.rows.get("attach_handles", []):
            if row["id"] not in self.ids["attach_handles"] or row["id"] in self.released:
                continue
            if row.get("in_use") and row["id"] not in held:
                self.report.warnings.append(
                    f"attach handle {row['uuid']} is in use in Cyborg but no ARQ holds it: "
                    "imported in use (never offered); release it by hand once checked"
                )
            elif not row.get("in_use") and row["id"] in held:
                self.report.warnings.append(
                    f"attach handle {row['uuid']} is held by an ARQ but not marked in use "
                    "in Cyborg: imported as Cyborg had it"
                )

    def _unmapped(self) -> None:
        """For each device skipped for its control-path id: its providers and the ARQs
        holding its attach handles (the report names them; an applied import refuses
        while there are such ARQs)."""
        skipped = {s.uuid for s in self.report.skipped if s.table == "devices"}
        deployables: dict[int, list[Row]] = collections.defaultdict(list)
        for dep in self.source.rows.get("deployables", []):
            deployables[dep["device_id"]].append(dep)
        handles: dict[int, Row] = {}
        for ah in self.source.rows.get("attach_handles", []):
            handles[ah["id"]] = ah
        for device in self.source.rows.get("devices", []):
            if device["uuid"] not in skipped:
                continue
            own = deployables.get(device["id"], [])
            ids = {d["id"] for d in own}
            holders = tuple(
                (arq["uuid"], arq["state"], arq.get("instance_uuid"), handle["uuid"])
                for arq in self.source.rows.get("extended_accelerator_requests", [])
                if (handle := handles.get(arq.get("attach_handle_id") or 0)) is not None
                and handle["deployable_id"] in ids
            )
            self.report.unmapped.append(
                Unmapped(
                    device=device["uuid"],
                    hostname=device["hostname"],
                    providers=tuple((d["name"], d.get("rp_uuid")) for d in own),
                    holders=holders,
                )
            )

    def _tell_nova(self) -> None:
        """Nova may still wait for the binds the import failed: one resolved round per
        such instance, with every ARQ of it imported now (a duplicate event is
        harmless to Nova; a missing one makes it wait for arq_binding_timeout)."""
        rounds: dict[str, list[tuple[str, str | None]]] = collections.defaultdict(list)
        failed = {
            r["instance_uuid"]
            for r in self.arqs_written.values()
            if r["reason"] == _BIND_INTERRUPTED and r["instance_uuid"]
        }
        for arq in self.arqs_written.values():
            status = _NOVA_STATUS.get(arq["state"])
            if arq["instance_uuid"] in failed and status is not None:
                rounds[arq["instance_uuid"]].append((arq["uuid"], status))
        for instance in sorted(rounds):
            nova_db.enqueue_round(self.conn, instance, rounds[instance], bind_timeout=0.0)

    def _hosts(self) -> None:
        """A hosts row for each imported host (no snapshot yet: the agent's first report
        is applied whole), and a Placement sync that takes its providers over."""
        insert = insert_if_absent(
            self.conn.dialect.name, models.hosts, ("hostname", "created_at"), "hostname"
        )
        for hostname in sorted(self.hosts):
            self.conn.execute(insert, {"hostname": hostname, "created_at": self.now})
            changes.mark(self.conn, changes.HOST_REPORTS)
        for hostname in sorted(self.changed_hosts):
            enqueue_sync(self.conn, hostname, verify=True)
