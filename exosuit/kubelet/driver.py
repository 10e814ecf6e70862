"""Prepare and unprepare: ResourceClaims turned into Exosuit claims and CDI ids.

Prepare (one ResourceClaim): the devices the scheduler allocated from our pool (read
from the Kubernetes API), each device name mapped back to its attach handle, one
Exosuit claim for exactly those handles (``consumer`` ``k8s:<namespace>/<name>/<uid>``,
``container`` true: the host's agent writes their CDI specs), waited for until it is
bound and its CDI specs are written, answered with their CDI ids. Unprepare releases
that claim. Both are idempotent and survive restarts through the checkpoint: a claim
prepared before is answered from it (the same CDI ids); one being prepared is found
again by its consumer; unprepare of a claim the checkpoint does not know is a success
(nothing was asked of Exosuit for it: the entry is written before the claim is made).

Every claim of a call gets its own answer; one claim's failure is that claim's error,
never the call's. Claims of one call are worked on side by side, one at a time each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from exosuit.kubelet.checkpoint import PREPARED, Checkpoint, ClaimEntry, PreparedDevice
from exosuit.kubelet.exosuit_api import ExosuitApi, ExosuitError, consumer_of
from exosuit.kubernetes.resource_claims import Allocated, ClaimUnavailable
from exosuit.kubernetes.slices import handle_names

__all__ = ["ClaimRef", "Driver", "Outcome", "PrepareFailed"]

LOG = logging.getLogger(__name__)

PREPARE_TIMEOUT = 40.0  # below the kubelet's 45 s per call
POLL_INTERVAL = 0.25
MAX_PARALLEL = 8

ReadAllocation = Callable[[str, str, str], list[Allocated]]


@dataclass(frozen=True)
class ClaimRef:
    """A ResourceClaim as the kubelet names it."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class Outcome:
    """One claim's answer: its devices, or an error (empty: none)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class PrepareFailed(Exception):
    """This claim cannot be prepared now (the message says why)."""


class Driver:
    """The DRA driver's node side for one node."""

    def __init__(
        self,
        *,
        node: str,
        hostname: str,
        exosuit: ExosuitApi,
        read_allocation: ReadAllocation,
        checkpoint: Checkpoint,
        prepare_timeout: float = PREPARE_TIMEOUT,
        poll_interval: float = POLL_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.node = node
        self.hostname = hostname
        self.exosuit = exosuit
        self.read_allocation = read_allocation
        self.checkpoint = checkpoint
        self.prepare_timeout = prepare_timeout
        self.poll_interval = poll_interval
        self.clock = clock
        self.sleep = sleep
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def _lock(self, uid: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(uid, threading.Lock())

    def _each(
        self, claims: Sequence[ClaimRef], work: Callable[[ClaimRef], Outcome]
    ) -> dict[str, Outcome]:
        """``work`` for every claim (side by side), an answer for each uid."""
        unique = list({c.uid: c for c in claims}.values())
        if len(unique) <= 1:
            return {c.uid: work(c) for c in unique}
        with ThreadPoolExecutor(min(MAX_PARALLEL, len(unique))) as pool:
            return dict(zip((c.uid for c in unique), pool.map(work, unique), strict=True))

    # -- prepare -----------------------------------------------------------------------

    def prepare(
        self, claims: Sequence[ClaimRef], timeout: float | None = None
    ) -> dict[str, Outcome]:
        """An outcome per claim uid; waits at most ``timeout`` seconds (default
        ``prepare_timeout``) for claims still being bound or written."""
        deadline = self.clock() + min(timeout or self.prepare_timeout, self.prepare_timeout)
        return self._each(claims, lambda c: self._guarded(self._prepare, c, deadline))

    def _guarded(
        self, work: Callable[[ClaimRef, float], Outcome], claim: ClaimRef, deadline: float
    ) -> Outcome:
        try:
            with self._lock(claim.uid):
                return work(claim, deadline)
        except (PrepareFailed, ClaimUnavailable, ExosuitError) as error:
            LOG.warning("claim %s/%s (%s): %s", claim.namespace, claim.name, claim.uid, error)
            return Outcome(error=str(error))
        except Exception as error:  # never a whole-call failure for one claim
            LOG.exception("claim %s/%s (%s)", claim.namespace, claim.name, claim.uid)
            return Outcome(error=f"internal error: {error!r}")

    def _prepare(self, ref: ClaimRef, deadline: float) -> Outcome:
        entry = self.checkpoint.get(ref.uid)
        if entry is not None and entry.prepared:
            return Outcome(entry.devices)  # prepared before: the same answer
        allocated = self.read_allocation(ref.namespace, ref.name, ref.uid)
        if not allocated:
            self.checkpoint.put(ref.uid, ClaimEntry(ref.namespace, ref.name, PREPARED))
            return Outcome()
        handles = self._handles(allocated)
        if entry is None:
            entry = ClaimEntry(ref.namespace, ref.name)
            self.checkpoint.put(ref.uid, entry)  # before Exosuit is asked: see unprepare
        claim = self._claim(ref, entry, list(dict.fromkeys(handles.values())))
        claim = self._ready(ref, claim, deadline)
        by_handle = {d.get("attach_handle_uuid"): d for d in claim.get("devices") or ()}
        devices = []
        for item in allocated:
            cdi = (by_handle.get(handles[item.device]) or {}).get("cdi_device")
            if not cdi:
                raise PrepareFailed(
                    f"Exosuit claim {claim['uuid']} has no CDI device for {item.device}"
                )
            devices.append(PreparedDevice((item.request,), item.pool, item.device, (cdi,)))
        self.checkpoint.update(ref.uid, state=PREPARED, devices=tuple(devices))
        LOG.info(
            "prepared %s/%s (%s): Exosuit claim %s, %s",
            ref.namespace,
            ref.name,
            ref.uid,
            claim["uuid"],
            ", ".join(d.cdi_device_ids[0] for d in devices),
        )
        return Outcome(tuple(devices))

    def _handles(self, allocated: list[Allocated]) -> dict[str, str]:
        """device name → attach handle uuid for the allocated devices of this node."""
        admin = sorted(a.device for a in allocated if a.admin_access)
        if admin:
            raise PrepareFailed(f"adminAccess is not supported by exosuit.dev ({', '.join(admin)})")
        foreign = sorted({a.pool for a in allocated if a.pool != self.node})
        if foreign:
            raise PrepareFailed(
                f"allocated from pool(s) {', '.join(foreign)}, not this node's ({self.node})"
            )
        names = handle_names(self.exosuit.inventory(self.hostname, self.node))
        missing = sorted({a.device for a in allocated} - set(names))
        if missing:
            raise PrepareFailed(
                f"no attach handle of {self.hostname} is named {', '.join(missing)} "
                "(the inventory changed since the allocation)"
            )
        return {a.device: names[a.device] for a in allocated}

    def _claim(self, ref: ClaimRef, entry: ClaimEntry, handles: list[str]) -> dict[str, Any]:
        """The Exosuit claim of this ResourceClaim: the one made before (the checkpoint's,
        or found by its consumer after a crash), else a new one."""
        consumer = consumer_of(ref.namespace, ref.name, ref.uid)
        claim = None
        if entry.claim_uuid:
            try:
                claim = self.exosuit.get_claim(entry.claim_uuid)
            except ExosuitError as error:
                if error.status != 404:
                    raise
            if claim is not None and claim.get("state") == "released":
                claim = None
        if claim is None:
            found = self.exosuit.claims(consumer=consumer)
            claim = found[0] if found else None
        if claim is None:
            try:
                claim = self.exosuit.create_claim(handles, self.hostname, consumer)
            except ExosuitError as error:
                if error.status and 400 <= error.status < 500:
                    raise PrepareFailed(f"Exosuit refused the claim: {error.message}") from error
                raise
        if claim["uuid"] != entry.claim_uuid:
            self.checkpoint.update(ref.uid, claim_uuid=claim["uuid"])
        return claim

    def _ready(self, ref: ClaimRef, claim: dict[str, Any], deadline: float) -> dict[str, Any]:
        """The claim once bound with its CDI specs written; a failed one is released
        (the kubelet's next prepare starts again)."""
        while True:
            state = claim.get("state")
            cdi = (claim.get("cdi") or {}).get("state")
            if state in ("failed", "released") or cdi == "failed":
                reason = claim.get("reason") or (claim.get("cdi") or {}).get("reason")
                self.exosuit.release_claim(claim["uuid"])
                self.checkpoint.remove([ref.uid])
                what = f"CDI {cdi}" if cdi == "failed" else str(state)
                raise PrepareFailed(f"Exosuit claim {claim['uuid']} {what}: {reason}")
            if state == "bound" and cdi == "written":
                return claim
            if self.clock() >= deadline:
                raise PrepareFailed(
                    f"Exosuit claim {claim['uuid']} is not ready yet (state {state}, CDI "
                    f"{cdi}): the kubelet's next call waits for it again"
                )
            self.sleep(self.poll_interval)
            claim = self.exosuit.get_claim(claim["uuid"])

    # -- unprepare ---------------------------------------------------------------------

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, Outcome]:
        """An outcome per claim uid: its Exosuit claim released; unknown: a success."""
        return self._each(claims, lambda c: self._guarded(self._unprepare, c, 0.0))

    def _unprepare(self, ref: ClaimRef, _deadline: float) -> Outcome:
        entry = self.checkpoint.get(ref.uid)
        if entry is None:
            return Outcome()  # never prepared here (or unprepared already)
        uuids = {entry.claim_uuid} if entry.claim_uuid else set()
        if entry.claim_uuid is None or not entry.prepared:
            # A crash between asking for the claim and noting it: find it by consumer.
            consumer = consumer_of(entry.namespace, entry.name, ref.uid)
            uuids |= {c["uuid"] for c in self.exosuit.claims(consumer=consumer)}
        for uuid in sorted(uuids):
            self.exosuit.release_claim(uuid)
        self.checkpoint.remove([ref.uid])
        LOG.info(
            "unprepared %s/%s (%s): released %s",
            ref.namespace,
            ref.name,
            ref.uid,
            ", ".join(sorted(uuids)) or "nothing",
        )
        return Outcome()
