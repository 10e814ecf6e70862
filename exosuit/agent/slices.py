"""The slice reconciler: slices made for a bind, and removed once it is released.

A device whose partition layout is on demand (``"on_demand": true``; doc/devices.md,
"Partitions") offers every slice its layout allows, made or not. Its host's desired state
lists it under ``slices`` (``{"device", "controlpath_id", "driver", "layout", "held":
[{"arq", "state", "attach_handle": {"type", "info"}}]}``; the wire is doc/agent-api.md)
with the slices ARQs hold now. At each new desired-state generation, for each device
listed, the agent:

1. finds the device by its control-path id (the driver the item names first);
2. removes each of the device's on-demand slices that is made and no longer held
   (``remove_slice``: never one in use on the host; that one is left and logged);
3. makes each held slice not made yet (``make_slice``), and reports the bind of each
   ARQ still ``BindStarted`` done or failed with the reason
   (``PUT /agent/v1/hosts/{hostname}/accelerator_requests/{arq}``), which ends its bind.

Everything it does follows from the desired state and the driver's idempotent steps, so
nothing is cached: after a restart, or a report the API did not take, the next step does
it again (a report is sent again until the API answers it; 404 or 409, the bind is gone:
its slice is removed once the desired state stops listing it). The agent reports its
inventory at once after a slice was made or removed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from exosuit import schemas
from exosuit.agent.cache import AgentState
from exosuit.agent.plugins import DriverSet, driver_failure, where
from exosuit.agent.reporter import Session, put_outcome
from exosuit.drivers.base import AttachHandle, OnDemandSlices, PartitionError

LOG = logging.getLogger(__name__)

__all__ = ["SliceReconciler"]

BIND_STARTED = "BindStarted"
MAX_REASON = 4096


class SliceReconciler:
    """Makes and removes the on-demand slices of this host's desired state.

    ``step(state)`` is called by the agent loop; it works once per desired-state
    generation (again at the next step when something is left to do: a report not
    taken, a slice that could not be removed), and returns True when a slice was made
    or removed: the loop then reports the inventory at once.
    """

    def __init__(
        self,
        hostname: str,
        plugins: DriverSet,
        session: Session,
        endpoint: str,
        *,
        timeout: float = 30.0,
    ) -> None:
        self.hostname = hostname
        self.plugins = plugins
        self.session = session
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self._done: int | None = None  # the generation reconciled with nothing left to do
        self._said: set[str] = set()  # problems logged (each said once)

    def step(self, state: AgentState) -> bool:
        desired = state.desired_state
        generation = desired.get("generation")
        items = desired.get("slices") or []
        if not items or generation == self._done:
            self._done = generation
            return False
        changed, settled = False, True
        for item in items:
            if not _well_formed(item):
                self._say(f"the desired state has slices this agent cannot read: {item!r:.300}")
                continue
            item_changed, item_settled = self._reconcile(item)
            changed |= item_changed
            settled &= item_settled
        self._done = generation if settled else None
        return changed

    # -- one device --------------------------------------------------------------------

    def _reconcile(self, item: Mapping[str, Any]) -> tuple[bool, bool]:
        """(a slice made or removed, nothing left to do) for one device."""
        held = [h for h in item["held"] if _held_well_formed(h)]
        waiting = [h for h in held if h.get("state") == BIND_STARTED]
        found = self.plugins.find(item["controlpath_id"], prefer=item.get("driver"))
        if found is None:
            why = f"the device {where(item['controlpath_id'])} is not found on host {self.hostname}"
            return False, self._fail_all(waiting, why)
        driver, device = found
        if not isinstance(driver, OnDemandSlices):
            why = f"the driver {driver.name} cannot make slices on demand"
            return False, self._fail_all(waiting, why)
        keep = {_key(_handle(h)) for h in held}
        changed, settled = False, True
        try:
            made = {_key(m): m for m in driver.made_slices(device)}
        except Exception as error:  # a driver's failure: tried again at the next step
            self._say(f"device {item['device']}: listing its slices failed: {_failure(error)}")
            return False, self._fail_all(waiting, _failure(error))
        for key, handle in made.items():
            if key in keep:
                continue
            try:
                driver.remove_slice(device, handle)
            except Exception as error:
                self._say(
                    f"device {item['device']}: the released slice {_name(handle)} is not "
                    f"removed: {_failure(error)}"
                )
                settled = False
                continue
            LOG.info("device %s: slice %s removed (released)", item["device"], _name(handle))
            changed = True
        for entry in held:
            handle = _handle(entry)
            reason: str | None = None
            if _key(handle) not in made:
                try:
                    driver.make_slice(device, handle)
                    LOG.info(
                        "device %s: slice %s made for ARQ %s",
                        item["device"],
                        _name(handle),
                        entry["arq"],
                    )
                    changed = True
                except Exception as failure:
                    reason = _failure(failure)[:MAX_REASON]
                    LOG.error(
                        "device %s: slice %s for ARQ %s not made: %s",
                        item["device"],
                        _name(handle),
                        entry["arq"],
                        reason,
                    )
            if entry.get("state") == BIND_STARTED:
                settled &= self._report(entry["arq"], reason)
        return changed, settled

    def _fail_all(self, waiting: list[Mapping[str, Any]], why: str) -> bool:
        """Report every waiting bind failed with ``why``; whether all were taken."""
        settled = True
        for entry in waiting:
            settled &= self._report(entry["arq"], why)
        return settled

    # -- reports -----------------------------------------------------------------------

    def _report(self, arq: str, error: str | None) -> bool:
        """Report the bind of ``arq`` done (``error`` None) or failed; whether the API
        settled it (False: sent again at the next step)."""
        body: dict[str, Any] = {"result": "done"}
        if error is not None:
            body = {"result": "failed", "reason": error}
        url = f"{self.endpoint}/agent/v1/hosts/{self.hostname}/accelerator_requests/{arq}"
        response = put_outcome(
            self.session, url, body, timeout=self.timeout, what=f"ARQ {arq}: its slice"
        )
        if response is None:
            return False
        status = response.status_code
        if status in (404, 409):
            LOG.info("ARQ %s: its bind waits no more (%s): its slice goes", arq, status)
        elif status not in (200, 204):
            LOG.error("ARQ %s: the API rejected %s: %s %s", arq, body, status, response.text[:200])
        return True

    def _say(self, problem: str) -> None:
        if problem not in self._said:
            self._said.add(problem)
            LOG.warning("%s", problem)


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
