"""The partition reconciler: the partition layouts the host's desired state asks.

An operator sets a device's partition layout (doc/devices.md, "Partitions"); the host's
desired state then lists it under ``partitions`` (``{"device", "controlpath_id",
"driver", "layout", "generation"}``; the wire is doc/agent-api.md) until this agent
reports how it applied it. For each layout listed that it has not applied at that
generation, the agent:

1. finds the device by its control-path id among its drivers' discovery (the driver the
   layout names first, when it finds it);
2. calls the driver's ``partition`` when the driver is ``Partitionable``
   (exosuit/drivers/base.py): it creates the slices missing and removes those in
   excess, never one in use on the host; a driver that is not is a failure ("cannot
   partition");
3. discovers again and checks with ``partitioned``: ``applied`` when the device is as
   the layout asks, ``failed`` (with the reason) otherwise or when ``partition`` raised.

As the activation reconciler does (agent/activations.py), the outcome is written to the
agent cache before it is sent (``PUT /agent/v1/hosts/{hostname}/partitions/{device_uuid}``)
and kept until the API acknowledges it (200, or 409: the operator set another layout
since), so a restart neither applies a layout twice nor loses the outcome; one
interrupted by a crash before its end was written is applied again (``partition`` is
idempotent). The agent reports its inventory at once after each, so the slices made or
removed reach the API (and Placement) with no wait.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from exosuit.agent.cache import AgentCache, AgentState, FinishedPartition
from exosuit.agent.plugins import DriverSet, driver_failure, where
from exosuit.agent.reporter import Session, put_outcome
from exosuit.drivers.base import Partitionable, PartitionError

LOG = logging.getLogger(__name__)

__all__ = ["PartitionReconciler"]

MAX_REASON = 4096


class _Failed(Exception):
    """The layout is not applied: the message is the reason the operator reads."""


class PartitionReconciler:
    """Applies the ``partitions`` of this host's desired state, each layout once.

    ``step(state)`` is called by the agent loop; it never waits, and returns True when a
    layout was applied (or failed): the loop then reports the inventory at once.
    """

    def __init__(
        self,
        hostname: str,
        plugins: DriverSet,
        session: Session,
        endpoint: str,
        cache: AgentCache,
        *,
        timeout: float = 30.0,
    ) -> None:
        self.hostname = hostname
        self.plugins = plugins
        self.session = session
        self.endpoint = endpoint.rstrip("/")
        self.cache = cache
        self.timeout = timeout
        self._malformed: set[str] = set()  # items logged as malformed (said once)

    def step(self, state: AgentState) -> bool:
        """Send the outcomes not acknowledged yet, apply each layout listed that this
        agent has not ended at its generation, forget what the API has and no longer
        lists."""
        for uuid, finished in list(state.partitions.items()):
            if not finished["acknowledged"]:
                self._deliver(state, uuid, finished)
        ran = False
        listed: dict[str, int] = {}
        for item in state.desired_state.get("partitions") or []:
            if not self._well_formed(item):
                continue
            uuid, generation = item["device"], item["generation"]
            listed[uuid] = generation
            ended = state.partitions.get(uuid)
            if ended is not None and ended["generation"] == generation:
                continue  # ended (acknowledged or not): never applied twice
            self._run(state, uuid, item)
            ran = True
        stale = [
            uuid
            for uuid, finished in state.partitions.items()
            if finished["acknowledged"] and listed.get(uuid) != finished["generation"]
        ]
        for uuid in stale:
            del state.partitions[uuid]
        if stale:
            self.cache.save(state)
        return ran

    def _well_formed(self, item: Any) -> bool:
        if (
            isinstance(item, Mapping)
            and isinstance(item.get("device"), str)
            and isinstance(item.get("generation"), int)
            and isinstance(item.get("layout"), Mapping)
            and isinstance(item.get("controlpath_id"), Mapping)
        ):
            return True
        text = repr(item)[:300]
        if text not in self._malformed:
            self._malformed.add(text)
            LOG.error("the desired state has a partition layout this agent cannot read: %s", text)
        return False

    # -- one layout --------------------------------------------------------------------

    def _run(self, state: AgentState, uuid: str, item: Mapping[str, Any]) -> None:
        generation: int = item["generation"]
        LOG.info("device %s: partition layout %s (generation %s)", uuid, item["layout"], generation)
        try:
            self._apply(item)
            outcome, reason = "applied", None
            LOG.info("device %s: partition layout applied", uuid)
        except _Failed as failure:
            outcome, reason = "failed", str(failure)[:MAX_REASON]
            LOG.error("device %s: partition layout failed: %s", uuid, reason)
        finished: FinishedPartition = {
            "generation": generation,
            "report": {"generation": generation, "state": outcome, "reason": reason},
            "acknowledged": False,
        }
        state.partitions[uuid] = finished
        self.cache.save(state)  # before it is sent: a restart does not apply it again
        self._deliver(state, uuid, finished)

    def _apply(self, item: Mapping[str, Any]) -> None:
        found = self.plugins.find(item["controlpath_id"], prefer=item.get("driver"))
        if found is None:
            raise _Failed(
                f"the device {where(item['controlpath_id'])} is not found on host {self.hostname}"
            )
        driver, device = found
        if not isinstance(driver, Partitionable):
            raise _Failed(f"the driver {driver.name} cannot partition devices")
        layout = item["layout"]
        try:
            driver.partition(device, layout)
        except Exception as error:  # a driver's failure is the reason reported
            raise _Failed(_failure(error)) from error
        again = self.plugins.find(item["controlpath_id"], prefer=driver.name)
        if again is None:
            raise _Failed(
                f"after partitioning, the device {where(item['controlpath_id'])} is no longer found"
            )
        try:
            done = bool(driver.partitioned(again[1], layout))
        except Exception as error:
            raise _Failed(f"checking the partitions failed: {_failure(error)}") from error
        if not done:
            raise _Failed(
                f"after partitioning, the driver {driver.name} does not find the device "
                f"{where(item['controlpath_id'])} as the layout asks"
            )

    # -- reports -----------------------------------------------------------------------

    def _deliver(self, state: AgentState, uuid: str, finished: FinishedPartition) -> None:
        url = f"{self.endpoint}/agent/v1/hosts/{self.hostname}/partitions/{uuid}"
        what = f"device {uuid}: the partition outcome"
        response = put_outcome(
            self.session, url, dict(finished["report"]), timeout=self.timeout, what=what
        )
        if response is None:
            return
        status = response.status_code
        if status == 409:
            LOG.info("device %s: the operator set another layout since", uuid)
        elif status == 404:
            LOG.warning("device %s: the API does not know it on this host (404)", uuid)
        elif status not in (200, 204):
            # A report the API rejects (400) will not be accepted later either.
            LOG.error(
                "device %s: the API rejected %s: %s %s",
                uuid,
                finished["report"],
                status,
                str(response.text)[:200],
            )
        finished["acknowledged"] = True
        self.cache.save(state)


def _failure(error: Exception) -> str:
    return driver_failure(error, PartitionError)
