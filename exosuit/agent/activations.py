"""The activation reconciler: the install and uninstall steps the host's desired state asks.

A device an agent discovers starts ``inactive``; an operator marks it ``ready`` and the
host's desired state then lists it under ``activations`` with ``action: install``
(``uninstall`` when it goes back to ``inactive``). doc/devices.md has the states; the
wire is doc/agent-api.md. For each step listed that it has not ended, the agent:

1. finds the device by its control-path id among its drivers' discovery (the driver the
   step names first, when it finds it);
2. calls the driver's ``install`` (or ``uninstall``) with the driver's effective
   options, when the driver is ``Installable``; nothing otherwise;
3. discovers again and checks: an install is ``done`` when the device is still found
   and (``Installable``) ``installed()`` says so, else ``failed`` with the reason; an
   uninstall is ``done`` when the driver's ``uninstall`` returned (it undoes only what
   an install did, so ``installed()`` may rightly stay true: with nothing configured, or
   when the device was already as an install leaves it), ``failed`` when it raised.

As every reconciler's (the base: agent/reconciler.py), the outcome is written to the
agent cache before it is sent (``PUT /agent/v1/hosts/{hostname}/activations/{device_uuid}``)
and sent again, with backoff, until the API acknowledges it (200, or 409: the operator
changed the device's activation since), so a restart neither runs a step it ended again
nor loses the outcome. A step interrupted by
a crash before its end was written is run again: ``install`` and ``uninstall`` are
idempotent (the driver contract, exosuit/drivers/base.py). The agent reports its
inventory at once after each step. Nothing here waits: the agent loop does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exosuit.agent.cache import AgentState, FinishedActivation
from exosuit.agent.plugins import driver_failure, where
from exosuit.agent.reconciler import MAX_REASON, Reconciler
from exosuit.agent.reporter import Response
from exosuit.drivers.base import Device, Installable, InstallError

__all__ = ["ActivationReconciler"]

ACTIONS = ("install", "uninstall")


class _Failed(Exception):
    """The step fails: the message is the reason the operator reads."""


class ActivationReconciler(Reconciler[Mapping[str, Any], FinishedActivation]):
    """Runs the ``activations`` of this host's desired state, each once (the base:
    agent/reconciler.py). ``step(state)`` returns True when a step ran: the loop then
    reports the inventory at once."""

    section = "activations"
    path = "activations"
    noun = "an activation"
    subject = "device {key}"

    def parse(self, item: Any) -> tuple[str, Mapping[str, Any]]:
        if not (
            isinstance(item, Mapping)
            and isinstance(item.get("device"), str)
            and item.get("action") in ACTIONS
            and isinstance(item.get("generation"), int)
            and isinstance(item.get("controlpath_id"), Mapping)
        ):
            raise ValueError("")
        return item["device"], item

    def records(self, state: AgentState) -> dict[str, FinishedActivation]:
        return state.activations

    def settled(self, record: FinishedActivation, item: Mapping[str, Any]) -> bool:
        return (record["action"], record["generation"]) == (item["action"], item["generation"])

    def answered(
        self, state: AgentState, key: str, record: FinishedActivation, response: Response
    ) -> None:
        if response.status_code == 409:
            self.log.info(
                "device %s: the operator changed its activation since: %s",
                key,
                response.text[:200],
            )
        else:
            super().answered(state, key, record, response)

    # -- one step ----------------------------------------------------------------------

    def run(self, state: AgentState, key: str, item: Mapping[str, Any]) -> bool:
        action: str = item["action"]
        self.log.info("device %s: %s step (generation %s)", key, action, item["generation"])
        try:
            reason = self._install(item) if action == "install" else self._uninstall(item)
            outcome = "done"
        except _Failed as failure:
            reason, outcome = str(failure), "failed"
        if outcome == "done":
            self.log.info("device %s: %s done%s", key, action, f" ({reason})" if reason else "")
        else:
            self.log.error("device %s: %s failed: %s", key, action, reason)
        report = {
            "action": action,
            "generation": item["generation"],
            "state": outcome,
            "reason": reason[:MAX_REASON] if reason is not None else None,
        }
        # Written before it is sent: a restart does not run it again.
        self.finish(
            state,
            key,
            {
                "action": action,
                "generation": item["generation"],
                "report": report,
                "acknowledged": False,
            },
        )
        return True

    def _install(self, item: Mapping[str, Any]) -> str | None:
        found = self.plugins.find(item["controlpath_id"], prefer=item.get("driver"))
        if found is None:
            raise _Failed(
                f"the device {where(item['controlpath_id'])} is not found on host {self.hostname}"
            )
        driver, device = found
        if not isinstance(driver, Installable):
            return None  # no host work: found is all it takes
        settings = self.plugins.settings(driver.name)
        try:
            driver.install(device, settings)
        except Exception as error:  # a driver's failure is the reason reported
            raise _Failed(_failure(error)) from error
        again = self.plugins.find(item["controlpath_id"], prefer=driver.name)
        if again is None:
            raise _Failed(
                f"after the install step the device {where(item['controlpath_id'])} is no "
                "longer found"
            )
        if not _installed(driver, again[1], settings):
            raise _Failed(
                f"after the install step the driver {driver.name} does not find the "
                f"device {where(item['controlpath_id'])} installed"
            )
        return None

    def _uninstall(self, item: Mapping[str, Any]) -> str | None:
        found = self.plugins.find(item["controlpath_id"], prefer=item.get("driver"))
        if found is None:
            return (
                f"the device {where(item['controlpath_id'])} is not on host {self.hostname}: "
                "nothing to undo"
            )
        driver, device = found
        if not isinstance(driver, Installable):
            return None
        settings = self.plugins.settings(driver.name)
        try:
            driver.uninstall(device, settings)
        except Exception as error:
            raise _Failed(_failure(error)) from error
        return None


def _installed(driver: Installable, device: Device, settings: Mapping[str, Any]) -> bool:
    try:
        return bool(driver.installed(device, settings))
    except Exception as error:
        raise _Failed(f"checking the install failed: {_failure(error)}") from error


def _failure(error: Exception) -> str:
    return driver_failure(error, InstallError)
