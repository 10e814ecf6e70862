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

As every reconciler's (the base: agent/reconciler.py), the outcome is written to the
agent cache before it is sent (``PUT /agent/v1/hosts/{hostname}/partitions/{device_uuid}``)
and sent again, with backoff, until the API acknowledges it (200, or 409: the operator
set another layout since), so a restart neither applies a layout twice nor loses the
outcome; one interrupted by a crash before its end was written is applied again
(``partition`` is idempotent). The agent reports its inventory at once after each, so
the slices made or removed reach the API (and Placement) with no wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exosuit.agent.cache import AgentState, FinishedPartition
from exosuit.agent.plugins import driver_failure, where
from exosuit.agent.reconciler import MAX_REASON, Reconciler
from exosuit.agent.reporter import Response
from exosuit.drivers.base import Partitionable, PartitionError

__all__ = ["PartitionReconciler"]


class _Failed(Exception):
    """The layout is not applied: the message is the reason the operator reads."""


class PartitionReconciler(Reconciler[Mapping[str, Any], FinishedPartition]):
    """Applies the ``partitions`` of this host's desired state, each layout once (the
    base: agent/reconciler.py). ``step(state)`` returns True when a layout was applied
    (or failed): the loop then reports the inventory at once."""

    section = "partitions"
    path = "partitions"
    noun = "a partition layout"
    subject = "device {key}"

    def parse(self, item: Any) -> tuple[str, Mapping[str, Any]]:
        if not (
            isinstance(item, Mapping)
            and isinstance(item.get("device"), str)
            and isinstance(item.get("generation"), int)
            and isinstance(item.get("layout"), Mapping)
            and isinstance(item.get("controlpath_id"), Mapping)
        ):
            raise ValueError("")
        return item["device"], item

    def records(self, state: AgentState) -> dict[str, FinishedPartition]:
        return state.partitions

    def settled(self, record: FinishedPartition, item: Mapping[str, Any]) -> bool:
        return bool(record["generation"] == item["generation"])

    def answered(
        self, state: AgentState, key: str, record: FinishedPartition, response: Response
    ) -> None:
        if response.status_code == 409:
            self.log.info("device %s: the operator set another layout since", key)
        else:
            super().answered(state, key, record, response)

    # -- one layout --------------------------------------------------------------------

    def run(self, state: AgentState, key: str, item: Mapping[str, Any]) -> bool:
        generation: int = item["generation"]
        self.log.info(
            "device %s: partition layout %s (generation %s)", key, item["layout"], generation
        )
        try:
            self._apply(item)
            outcome, reason = "applied", None
            self.log.info("device %s: partition layout applied", key)
        except _Failed as failure:
            outcome, reason = "failed", str(failure)[:MAX_REASON]
            self.log.error("device %s: partition layout failed: %s", key, reason)
        # Written before it is sent: a restart does not apply it again.
        self.finish(
            state,
            key,
            {
                "generation": generation,
                "report": {"generation": generation, "state": outcome, "reason": reason},
                "acknowledged": False,
            },
        )
        return True

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


def _failure(error: Exception) -> str:
    return driver_failure(error, PartitionError)
