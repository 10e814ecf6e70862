"""The slice reconciler: slices made for a bind, and removed once it is released.

A device whose partition layout is on demand (``"on_demand": true``; doc/devices.md,
"Partitions") offers every slice its layout allows, made or not. Its host's desired state
lists it under ``slices`` (``{"device", "controlpath_id", "driver", "layout", "held":
[{"arq", "state", "attach_handle": {"type", "info"}}]}``; the wire is doc/agent-api.md)
with the slices ARQs hold now. For each device listed whose entry it has not reconciled
yet (or that changed since), the agent:

1. finds the device by its control-path id (the driver the item names first);
2. removes each of the device's on-demand slices that is made and no longer held
   (``remove_slice``: never one in use on the host; that one is left and logged);
3. makes each held slice not made yet (``make_slice``), and reports the bind of each
   ARQ still ``BindStarted`` done or failed with the reason
   (``PUT /agent/v1/hosts/{hostname}/accelerator_requests/{arq}``), which ends its bind.

Everything it does follows from the desired state and the driver's idempotent steps, so
nothing is written to the agent cache: its records (agent/reconciler.py, the base) live in
memory, and after a restart the next step does it all again. A bind's report is sent
again, with backoff, until the API answers it (404 or 409: the bind is gone, and its slice
is removed once the desired state stops listing it); a released slice that could not be
removed is tried again at the next step. The agent reports its inventory at once after a
slice was made or removed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping
from typing import Any

from exosuit import schemas
from exosuit.agent.cache import AgentState, Outcome
from exosuit.agent.plugins import DriverSet, driver_failure, where
from exosuit.agent.reconciler import MAX_REASON, Reconciler
from exosuit.agent.reporter import Response, Session
from exosuit.drivers.base import AttachHandle, OnDemandSlices, PartitionError

__all__ = ["SliceReconciler"]

BIND_STARTED = "BindStarted"


class SliceRecord(Outcome):
    """In memory only: a device's entry done (``digest``: of the entry; no report), or
    the bind outcome of an ARQ (``digest`` empty) until the API answers it."""

    digest: str


@dataclasses.dataclass(frozen=True)
class _Entry:
    """A device of the desired state's ``slices``, and the digest of the entry."""

    item: Mapping[str, Any]
    digest: str


class SliceReconciler(Reconciler[_Entry, SliceRecord]):
    """Makes and removes the on-demand slices of this host's desired state (the base:
    agent/reconciler.py).

    A device's entry is reconciled once as it is listed (again when it changes, or at
    the next step when a released slice could not be removed); each bind it ends is an
    outcome of its own, keyed by the ARQ. The records live in memory: after a restart
    the desired state alone says what to do. ``step(state)`` returns True when a slice
    was made or removed: the loop then reports the inventory at once.
    """

    section = "slices"
    path = "accelerator_requests"
    noun = "slices"
    subject = "ARQ {key}"

    def __init__(
        self,
        hostname: str,
        plugins: DriverSet,
        session: Session,
        endpoint: str,
        **options: Any,
    ) -> None:
        super().__init__(hostname, plugins, session, endpoint, None, **options)
        self._records: dict[str, SliceRecord] = {}

    def parse(self, item: Any) -> tuple[str, _Entry]:
        if not _well_formed(item):
            raise ValueError("")
        digest = hashlib.sha256(schemas.canonical_json(item).encode()).hexdigest()
        return item["device"], _Entry(item, digest)

    def records(self, state: AgentState) -> dict[str, SliceRecord]:
        return self._records

    def settled(self, record: SliceRecord, item: _Entry) -> bool:
        return record["digest"] == item.digest

    def answered(
        self, state: AgentState, key: str, record: SliceRecord, response: Response
    ) -> None:
        if response.status_code in (404, 409):
            self.log.info(
                "ARQ %s: its bind waits no more (%s): its slice goes", key, response.status_code
            )
        else:
            super().answered(state, key, record, response)

    # -- one device --------------------------------------------------------------------

    def run(self, state: AgentState, key: str, item: _Entry) -> bool:
        """Remove the device's released slices, make the held ones, report the binds
        waiting; the entry is done unless a released slice could not be removed."""
        entry = item.item
        held = [h for h in entry["held"] if _held_well_formed(h)]
        waiting = [h for h in held if h.get("state") == BIND_STARTED]
        found = self.plugins.find(entry["controlpath_id"], prefer=entry.get("driver"))
        if found is None:
            why = (
                f"the device {where(entry['controlpath_id'])} is not found on host {self.hostname}"
            )
            return self._fail_all(state, key, item, waiting, why)
        driver, device = found
        if not isinstance(driver, OnDemandSlices):
            why = f"the driver {driver.name} cannot make slices on demand"
            return self._fail_all(state, key, item, waiting, why)
        keep = {_key(_handle(h)) for h in held}
        try:
            made = {_key(m): m for m in driver.made_slices(device)}
        except Exception as error:  # a driver's failure is the binds' reason
            self.say(logging.WARNING, f"device {key}: listing its slices failed: {_failure(error)}")
            return self._fail_all(state, key, item, waiting, _failure(error))
        changed, removed_all = False, True
        for handle_key, handle in made.items():
            if handle_key in keep:
                continue
            try:
                driver.remove_slice(device, handle)
            except Exception as error:  # never one in use: tried again at the next step
                self.say(
                    logging.WARNING,
                    f"device {key}: the released slice {_name(handle)} is not removed: "
                    f"{_failure(error)}",
                )
                removed_all = False
                continue
            self.log.info("device %s: slice %s removed (released)", key, _name(handle))
            changed = True
        for held_entry in held:
            handle = _handle(held_entry)
            reason: str | None = None
            if _key(handle) not in made:
                try:
                    driver.make_slice(device, handle)
                    self.log.info(
                        "device %s: slice %s made for ARQ %s", key, _name(handle), held_entry["arq"]
                    )
                    changed = True
                except Exception as failure:
                    reason = _failure(failure)[:MAX_REASON]
                    self.log.error(
                        "device %s: slice %s for ARQ %s not made: %s",
                        key,
                        _name(handle),
                        held_entry["arq"],
                        reason,
                    )
            if held_entry.get("state") == BIND_STARTED:
                self._report(state, held_entry["arq"], reason)
        if removed_all:
            self.remember(state, key, {"digest": item.digest, "report": None, "acknowledged": True})
        return changed

    def _fail_all(
        self,
        state: AgentState,
        key: str,
        item: _Entry,
        waiting: list[Mapping[str, Any]],
        why: str,
    ) -> bool:
        """Report every waiting bind failed with ``why``; the entry is done."""
        for held_entry in waiting:
            self._report(state, held_entry["arq"], why)
        self.remember(state, key, {"digest": item.digest, "report": None, "acknowledged": True})
        return False

    def _report(self, state: AgentState, arq: str, error: str | None) -> None:
        """The bind of ``arq`` done (``error`` None) or failed: its outcome."""
        body: dict[str, Any] = {"result": "done"}
        if error is not None:
            body = {"result": "failed", "reason": error}
        self.finish(state, arq, {"digest": "", "report": body, "acknowledged": False})


def _well_formed(item: Any) -> bool:
    return (
        isinstance(item, Mapping)
        and isinstance(item.get("device"), str)
        and isinstance(item.get("controlpath_id"), Mapping)
        and isinstance(item.get("held"), list)
    )


def _held_well_formed(entry: Any) -> bool:
    return (
        isinstance(entry, Mapping)
        and isinstance(entry.get("arq"), str)
        and isinstance(entry.get("attach_handle"), Mapping)
        and isinstance(entry["attach_handle"].get("type"), str)
        and isinstance(entry["attach_handle"].get("info"), Mapping)
    )


def _handle(entry: Mapping[str, Any]) -> AttachHandle:
    handle = entry["attach_handle"]
    return AttachHandle(handle["type"], dict(handle["info"]))


def _key(handle: AttachHandle) -> tuple[str, str]:
    return handle.attach_type, schemas.canonical_json(dict(handle.attach_info))


def _name(handle: AttachHandle) -> str:
    info = handle.attach_info
    return str(info.get("mdev_uuid") or info.get("mig_uuid") or dict(info))


def _failure(error: Exception) -> str:
    return driver_failure(error, PartitionError)
