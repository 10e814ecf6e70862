"""Keep Placement equal to the database, one host at a time (conductor jobs).

``placement_sync`` (payload ``{"host": ..., "verify": bool}``, one pending job
per host): compute what the host's deployables want (exosuit.placement.providers),
compare it with what Exosuit last wrote to Placement (``placement_providers``)
and write only the differences: an unchanged host costs no request at all; a
new deployable costs three (create, inventory, traits) plus one per custom
name Placement did not have yet. With ``verify`` the comparison is with what
Placement actually holds: one request lists the host's providers with their
generations, and only a provider whose generation moved since Exosuit wrote it
is read in full. Each difference from what Exosuit had written is drift: it is
logged, repaired and counted.

``placement_reconcile`` (periodic, every ``[conductor] reconcile_interval``)
enqueues a verifying sync for every host.

A removed deployable's provider is deleted; while it has allocations Placement
refuses, so it is kept with all its inventory reserved (nothing new lands on
it) and the sync of its host runs again until the deletion succeeds. Placement
being unreachable, or (cloud mode) the compute node provider not existing yet,
makes the job wait and run again later (doubling delays up to ``[placement]
max_retry_interval``); nothing else in Exosuit waits for Placement.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import uuid as uuidlib
from collections.abc import Callable

from keystoneauth1 import adapter as ksa_adapter
from oslo_config import cfg

from exosuit import exceptions
from exosuit.backoff import backoff_delay
from exosuit.db import Connection
from exosuit.db import placement as placement_db
from exosuit.db.api import Database
from exosuit.db.metrics import LabelPairs
from exosuit.db.placement import ProviderRecord
from exosuit.jobs import JobContext, JobKind, RetryLater, Service
from exosuit.placement import client as placement_client
from exosuit.placement import metrics, providers
from exosuit.placement.providers import OWNER_TRAIT, Change, Provider
from exosuit.schemas import JSONObject

__all__ = [
    "JOB_KINDS",
    "RECONCILE",
    "SERVICES",
    "HostSync",
    "PlacementService",
    "Recorded",
    "SyncResult",
    "make_service",
    "reconcile",
    "sync_host",
]

LOG = logging.getLogger(__name__)

RECONCILE = "placement_reconcile"
# Standalone mode: the compute node provider Exosuit creates for a host.
_COMPUTE_NAMESPACE = uuidlib.UUID("0d3c6f4e-5a0b-4f7e-8c61-2b9e5d7a4c13")
_RECONCILE_BATCH = 500


class PlacementService:
    """``ctx.services["placement"]``: the keystoneauth adapter, shared by the workers
    of a process, and the custom names Placement is known to have."""

    def __init__(self, adapter: ksa_adapter.Adapter) -> None:
        self.adapter = adapter
        self.names = placement_client.NameCache()

    def client(self) -> placement_client.PlacementClient:
        """A client for one job (it counts that job's requests)."""
        return placement_client.PlacementClient(self.adapter, names=self.names)


def make_service(conf: cfg.ConfigOpts) -> PlacementService | None:
    """The Placement service from ``[placement]``; None when none is configured."""
    adapter = placement_client.make_adapter(conf)
    if adapter is None:
        LOG.info("no [placement] auth_type configured: Placement is not synced")
        return None
    return PlacementService(adapter)


def compute_provider_uuid(hostname: str) -> str:
    """The uuid of the compute node provider Exosuit creates in standalone mode."""
    return str(uuidlib.uuid5(_COMPUTE_NAMESPACE, hostname))


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A provider as Exosuit last wrote it, with Placement's generation after that."""

    provider: Provider
    generation: int | None
    removing: bool = False

    @classmethod
    def from_record(cls, record: ProviderRecord) -> Recorded:
        provider = Provider(
            uuid=record.uuid,
            name=record.name,
            parent_uuid=record.parent_uuid,
            resource_class=record.resource_class,
            total=record.total,
            reserved=record.reserved,
            traits=record.traits,
        )
        return cls(provider, record.generation, record.removing)

    def to_record(self) -> ProviderRecord:
        p = self.provider
        return ProviderRecord(
            uuid=p.uuid,
            name=p.name,
            parent_uuid=p.parent_uuid,
            resource_class=p.resource_class,
            total=p.total,
            reserved=p.reserved,
            traits=p.traits,
            generation=self.generation,
            removing=self.removing,
        )


@dataclasses.dataclass
class SyncResult:
    hostname: str
    result: str  # succeeded | retry | failed
    calls: int
    writes: dict[str, int]
    repairs: dict[str, int]
    error: str | None = None


class _Wait(Exception):
    """The sync cannot finish now; its job runs again later (not a failure)."""


class HostSync:
    """One sync of one host (see the module docstring)."""

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        db: Database,
        client: placement_client.PlacementClient,
        hostname: str,
        *,
        verify: bool = False,
    ) -> None:
        self.conf = conf
        self.db = db
        self.client = client
        self.hostname = hostname
        self.verify = verify
        self.job = "verify" if verify else "sync"
        self.compute: str | None = None
        self.current: dict[str, Recorded] = {}
        self.records: dict[str, Recorded | None] = {}
        self.writes: collections.Counter[str] = collections.Counter()
        self.repairs: collections.Counter[str] = collections.Counter()
        self.drift: dict[tuple[str, str], str] = {}  # (uuid, aspect) -> repair kind
        self.waiting_removals = 0
        self.failures = 0

    # -- the run ---------------------------------------------------------------------
    def run(self) -> SyncResult:
        """Sync the host; record the outcome. Raises RetryLater when it must run again
        later, or the error that failed it."""
        host = self.db.read(placement_db.read_host, self.hostname)
        self.failures = host.failures
        self.compute = host.compute_rp_uuid
        result, error = "succeeded", None
        try:
            self._sync()
            if self.waiting_removals:
                raise _Wait(
                    f"{self.waiting_removals} removed deployable(s) still have "
                    "allocations in Placement; their providers stay reserved"
                )
        except (exceptions.PlacementUnavailable, _Wait) as wait:
            result, error = "retry", str(wait)
        except Exception as failure:
            result, error = "failed", f"{type(failure).__name__}: {failure}"
            self._record(result, error)
            raise
        self._record(result, error)
        outcome = SyncResult(
            self.hostname,
            result,
            self.client.total_calls,
            dict(self.writes),
            dict(self.repairs),
            error,
        )
        if result == "retry":
            placement = self.conf.placement
            delay = backoff_delay(
                self.failures + 1,
                placement.retry_interval,
                placement.max_retry_interval,
                jitter=False,
            )
            raise RetryLater(f"Placement sync of host {self.hostname}: {error}", delay)
        return outcome

    def _sync(self) -> None:
        rows = self.db.read(placement_db.deployable_rows, self.hostname)
        recorded = {
            uuid: Recorded.from_record(r)
            for uuid, r in self.db.read(placement_db.recorded_providers, self.hostname).items()
        }
        if not rows and not recorded and not (self.verify and self.compute):
            return  # a host without accelerators needs nothing in Placement
        self.compute = self._compute_provider(self.compute)
        if self.verify:
            self.current = self._observe(recorded, {r.rp_uuid for r in rows})
            # What Placement holds is recorded as found, whatever happens next.
            for uuid in set(recorded) | set(self.current):
                if recorded.get(uuid) != self.current.get(uuid):
                    self.records[uuid] = self.current.get(uuid)
        else:
            self.current = dict(recorded)
        want = providers.desired_providers(self.hostname, self.compute, rows)
        changes = providers.plan(want, {u: r.provider for u, r in self.current.items()})
        for change in changes:
            self._apply(change)

    def _record(self, result: str, error: str | None) -> None:
        counts: collections.Counter[tuple[str, LabelPairs]] = collections.Counter()
        for method, n in self.client.calls.items():
            counts[metrics.REQUESTS.key(job=self.job, method=method)] += n
        counts[metrics.SYNCS.key(job=self.job, result=result)] += 1
        for action, n in self.writes.items():
            counts[metrics.WRITES.key(action=action)] += n
        for kind, n in self.repairs.items():
            counts[metrics.REPAIRS.key(kind=kind)] += n
        records = {uuid: None if r is None else r.to_record() for uuid, r in self.records.items()}
        self.db.write(
            placement_db.write_outcome,
            self.hostname,
            records=records,
            compute_rp_uuid=self.compute,
            error=error,
            verified=self.verify,
            counts=counts,
        )
        log = LOG.info if result == "succeeded" else LOG.warning
        if result != "succeeded" or self.client.total_calls:
            log(
                "Placement %s of host %s %s: %d request(s), writes %s, repairs %s%s",
                self.job,
                self.hostname,
                result,
                self.client.total_calls,
                dict(self.writes) or "none",
                dict(self.repairs) or "none",
                f": {error}" if error else "",
            )

    # -- the compute node provider -----------------------------------------------------
    def _compute_provider(self, known: str | None) -> str:
        if known:
            return known
        found = self.client.find_provider(self.hostname)
        if found is not None:
            self.compute = found["uuid"]
            return self.compute
        if not self.conf.placement.manage_compute_providers:
            raise _Wait(
                f"Placement has no compute node provider named {self.hostname!r} "
                "yet (nova-compute creates it; in standalone mode set [placement] "
                "manage_compute_providers = true)"
            )
        uuid = compute_provider_uuid(self.hostname)
        try:
            self.client.create_provider(uuid, self.hostname, None)
        except exceptions.PlacementConflict:
            if self.client.get_provider(uuid) is None:
                raise
        self.writes["create_compute"] += 1
        self.compute = uuid
        return uuid

    # -- drift -------------------------------------------------------------------------
    def _observe(self, recorded: dict[str, Recorded], want: set[str]) -> dict[str, Recorded]:
        """What Placement holds for the host's providers (and the drift from what was
        recorded; ``want``: the uuids of the host's deployables). One request when
        nothing moved."""
        assert self.compute is not None  # found or created by _sync first
        listed = {p["uuid"]: p for p in self.client.list_tree(self.compute, required=OWNER_TRAIT)}
        if not listed and (want or recorded) and self.client.get_provider(self.compute) is None:
            LOG.warning(
                "Placement drift on host %s: compute node provider %s is gone",
                self.hostname,
                self.compute,
            )
            created = self.writes["create_compute"]
            self._compute_provider(None)
            if self.writes["create_compute"] > created:
                self.repairs["compute_provider"] += 1
            listed = {
                p["uuid"]: p for p in self.client.list_tree(self.compute, required=OWNER_TRAIT)
            }
        observed: dict[str, Recorded] = {}
        for uuid, rp in listed.items():
            mine = recorded.get(uuid)
            if (
                mine is not None
                and mine.generation == rp["generation"]
                and (mine.provider.name, mine.provider.parent_uuid)
                == (rp["name"], rp["parent_provider_uuid"])
            ):
                observed[uuid] = mine
            else:
                observed[uuid] = self._read(rp, mine)
        # Without OWNER_CYBORG (removed by hand) a provider is not listed: look it up.
        for uuid in sorted(set(recorded) - set(listed)):
            found = self.client.get_provider(uuid)
            if found is not None:
                observed[uuid] = self._read(found, recorded[uuid])
        for uuid in sorted(set(recorded) | set(observed)):
            self._compare(uuid, recorded.get(uuid), observed.get(uuid), uuid in want)
        return observed

    def _read(self, rp: JSONObject, mine: Recorded | None) -> Recorded:
        uuid = rp["uuid"]
        _, inventories = self.client.get_inventories(uuid)
        generation, traits = self.client.get_traits(uuid)
        classes = sorted(inventories)
        main = (
            mine.provider.resource_class
            if mine and mine.provider.resource_class in inventories
            else (classes[0] if classes else None)
        )
        inventory = inventories.get(main, {}) if main else {}
        provider = Provider(
            uuid=uuid,
            name=rp["name"],
            parent_uuid=rp["parent_provider_uuid"],
            resource_class=main,
            total=int(inventory.get("total", 0)),
            reserved=int(inventory.get("reserved", 0)),
            traits=frozenset(traits),
            other_classes=frozenset(c for c in classes if c != main),
        )
        return Recorded(provider, generation, mine.removing if mine else False)

    def _compare(
        self, uuid: str, mine: Recorded | None, found: Recorded | None, wanted: bool
    ) -> None:
        def drift(aspect: str, kind: str, what: str) -> None:
            self.drift[(uuid, aspect)] = kind
            LOG.warning(
                "Placement drift on host %s, provider %s: %s; repairing", self.hostname, uuid, what
            )

        if mine is not None and found is None:
            drift("create", "provider_missing", "missing from Placement")
        elif mine is None and found is not None:
            if not wanted:
                drift(
                    "delete",
                    "provider_extra",
                    f"{found.provider.name!r} is not a deployable of the host",
                )
        elif mine is not None and found is not None:
            a, b = mine.provider, found.provider
            if (a.name, a.parent_uuid) != (b.name, b.parent_uuid):
                drift(
                    "provider",
                    "provider",
                    f"name/parent {b.name}/{b.parent_uuid}, expected {a.name}/{a.parent_uuid}",
                )
            if a.inventory_key() != b.inventory_key():
                drift(
                    "inventory",
                    "inventory",
                    f"inventory {b.inventory_key()}, expected {a.inventory_key()}",
                )
            if a.traits != b.traits:
                drift(
                    "traits",
                    "traits",
                    f"traits missing {sorted(a.traits - b.traits)}, "
                    f"extra {sorted(b.traits - a.traits)}",
                )

    def _repaired(self, uuid: str, aspect: str) -> None:
        kind = self.drift.pop((uuid, aspect), None)
        if kind is not None:
            self.repairs[kind] += 1

    # -- changes -----------------------------------------------------------------------
    def _apply(self, change: Change) -> None:
        if change.kind == "delete":
            self._delete(change.uuid)
            return
        want = change.want
        assert want is not None  # every change but a delete carries the provider wanted
        if change.kind == "create":
            self._create(want)
        else:
            try:
                self._update(change)
            except exceptions.PlacementNotFound:
                # Deleted behind our back since the last sync: create it again.
                LOG.warning(
                    "Placement drift on host %s: provider %s is gone; repairing",
                    self.hostname,
                    change.uuid,
                )
                self.drift[(change.uuid, "create")] = "provider_missing"
                self.current.pop(change.uuid, None)
                self._create(want)

    def _set(
        self, uuid: str, provider: Provider, generation: int | None, removing: bool = False
    ) -> None:
        self.current[uuid] = self.records[uuid] = Recorded(provider, generation, removing)

    def _create(self, want: Provider) -> None:
        uuid = want.uuid
        self._ensure_names(want)
        try:
            generation = self.client.create_provider(uuid, want.name, want.parent_uuid)[
                "generation"
            ]
            fresh = True
        except exceptions.PlacementConflict:
            existing = self.client.get_provider(uuid)
            if existing is None:  # the name is taken by another provider
                self._free_name(want)
                generation = self.client.create_provider(uuid, want.name, want.parent_uuid)[
                    "generation"
                ]
                fresh = True
            else:  # created by an earlier run that did not get to record it
                generation, fresh = existing["generation"], False
                if (existing["name"], existing["parent_provider_uuid"]) != (
                    want.name,
                    want.parent_uuid,
                ):
                    generation = self.client.update_provider(uuid, want.name, want.parent_uuid)[
                        "generation"
                    ]
        self._set(
            uuid,
            dataclasses.replace(want, total=0, reserved=0, resource_class=None, traits=frozenset()),
            generation,
        )
        if want.inventories() or not fresh:
            self._update(Change("inventory", uuid, want))
        self._update(Change("traits", uuid, want))
        self.writes["create"] += 1
        self._repaired(uuid, "create")

    def _update(self, change: Change) -> None:
        uuid, want = change.uuid, change.want
        assert want is not None  # see _apply
        have = self.current[uuid].provider
        if change.kind == "provider":
            generation = self.client.update_provider(uuid, want.name, want.parent_uuid)[
                "generation"
            ]
            have = dataclasses.replace(have, name=want.name, parent_uuid=want.parent_uuid)
        elif change.kind == "inventory":
            if want.resource_class and want.resource_class.startswith("CUSTOM_"):
                self.client.ensure_resource_class(want.resource_class)
            generation = self._write(
                uuid, lambda g: self.client.set_inventories(uuid, g, want.inventories()), want
            )
            have = dataclasses.replace(
                have,
                resource_class=want.resource_class,
                total=want.total,
                reserved=want.reserved,
                other_classes=frozenset(),
            )
        else:
            self.client.ensure_traits(want.traits)
            generation = self._write(
                uuid, lambda g: self.client.set_traits(uuid, g, want.traits), want
            )
            have = dataclasses.replace(have, traits=want.traits)
        self._set(uuid, have, generation, removing=False)
        self.writes[change.kind] += 1
        self._repaired(uuid, change.kind)

    def _write(self, uuid: str, put: Callable[[int], int], want: Provider | None) -> int:
        """``put(generation)``, again with a fresh generation after a concurrent update
        (an allocation changes it too), and after re-creating custom names Placement
        lost."""
        generation = self.current[uuid].generation
        names_checked = False
        for _ in range(4):
            if generation is None:
                found = self.client.get_provider(uuid)
                if found is None:
                    raise exceptions.PlacementNotFound(
                        method="GET",
                        url=f"/resource_providers/{uuid}",
                        status=404,
                        detail="provider not found",
                    )
                generation = found["generation"]
            try:
                return put(generation)
            except exceptions.PlacementConflict as conflict:
                if conflict.placement_code != placement_client.CONCURRENT_UPDATE:
                    raise
                generation = None
            except exceptions.PlacementNotFound:
                raise
            except exceptions.PlacementError as error:
                # 400 naming a trait or resource class Placement does not have (deleted
                # by hand since we created it): create them again, once.
                if error.kwargs.get("status") != 400 or names_checked or want is None:
                    raise
                names_checked = True
                self.client.names.forget([*want.traits, want.resource_class or ""])
                self._ensure_names(want)
        raise exceptions.PlacementConflict(
            method="PUT",
            url=f"/resource_providers/{uuid}",
            status=409,
            detail="the provider's generation kept changing",
            placement_code=placement_client.CONCURRENT_UPDATE,
        )

    def _ensure_names(self, want: Provider) -> None:
        if want.resource_class and want.resource_class.startswith("CUSTOM_"):
            self.client.ensure_resource_class(want.resource_class)
        self.client.ensure_traits(want.traits)

    def _free_name(self, want: Provider) -> None:
        """Another provider has the name ``want`` needs: if it is an old provider of
        this host's tree (not a current deployable), delete it."""
        other = self.client.find_provider(want.name)
        if other is None:
            return
        if other["parent_provider_uuid"] != want.parent_uuid:
            raise exceptions.PlacementConflict(
                method="POST",
                url="/resource_providers",
                status=409,
                detail=f"provider name {want.name!r} is taken by provider {other['uuid']} "
                "outside this host's tree",
                placement_code=placement_client.DUPLICATE_NAME,
            )
        LOG.warning(
            "Placement drift on host %s: provider %s holds the name %r of "
            "deployable provider %s; deleting it",
            self.hostname,
            other["uuid"],
            want.name,
            want.uuid,
        )
        self.client.delete_provider(other["uuid"])
        self.repairs["provider_extra"] += 1

    def _delete(self, uuid: str) -> None:
        have = self.current.get(uuid)
        try:
            self.client.delete_provider(uuid)
        except exceptions.PlacementNotFound:
            pass
        except exceptions.PlacementConflict as conflict:
            if conflict.placement_code != placement_client.PROVIDER_IN_USE or have is None:
                raise
            try:
                self._reserve_for_removal(uuid, have)
                return
            except exceptions.PlacementNotFound:
                pass  # deleted meanwhile
        self.current.pop(uuid, None)
        self.records[uuid] = None
        self.writes["delete"] += 1
        self._repaired(uuid, "delete")

    def _reserve_for_removal(self, uuid: str, have: Recorded) -> None:
        reserved = have.provider.fully_reserved()
        generation = have.generation
        if have.provider.inventory_key() != reserved.inventory_key() or have.provider.other_classes:
            generation = self._write(
                uuid, lambda g: self.client.set_inventories(uuid, g, reserved.inventories()), None
            )
            self.writes["reserve"] += 1
            LOG.info(
                "host %s: provider %s of a removed deployable has allocations; "
                "reserved until they are gone",
                self.hostname,
                uuid,
            )
        self._set(
            uuid,
            dataclasses.replace(reserved, other_classes=frozenset()),
            generation,
            removing=True,
        )
        self.waiting_removals += 1


def sync_host(
    conf: cfg.ConfigOpts,
    db: Database,
    service: PlacementService,
    hostname: str,
    *,
    verify: bool = False,
) -> SyncResult:
    """Sync one host now (what the placement_sync job does)."""
    return HostSync(conf, db, service.client(), hostname, verify=verify).run()


def _sync_job(ctx: JobContext, payload: JSONObject) -> None:
    service = ctx.services.get("placement")
    if service is None:
        return
    sync_host(ctx.conf, ctx.db, service, payload["host"], verify=bool(payload.get("verify")))


def reconcile(ctx: JobContext, payload: JSONObject) -> None:
    """Drift repair: a verifying sync of every host (each its own job)."""
    if ctx.services.get("placement") is None:
        return
    names = ctx.db.read(placement_db.hostnames)
    for start in range(0, len(names), _RECONCILE_BATCH):
        ctx.db.write(_enqueue_verify, names[start : start + _RECONCILE_BATCH])
    LOG.info("Placement drift repair: verifying %d host(s)", len(names))


def _enqueue_verify(conn: Connection, hostnames: list[str]) -> None:
    for hostname in hostnames:
        placement_db.enqueue_sync(conn, hostname, verify=True)


JOB_KINDS = (
    JobKind(placement_db.SYNC, _sync_job),
    JobKind(RECONCILE, reconcile, interval=lambda conf: conf.conductor.reconcile_interval),
)
SERVICES = (Service("placement", make_service),)
