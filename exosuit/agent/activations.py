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

The outcome is written to the agent cache before it is sent (``PUT
/agent/v1/hosts/{hostname}/activations/{device_uuid}``) and kept until the API
acknowledges it (200, or 409: the operator changed the device's activation since), so a
restart neither runs a step it ended again nor loses the outcome. A step interrupted by
a crash before its end was written is run again: ``install`` and ``uninstall`` are
idempotent (the driver contract, exosuit/drivers/base.py). The agent reports its
inventory at once after each step. Nothing here waits: the agent loop does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from exosuit.agent.cache import AgentCache, AgentState, FinishedActivation
from exosuit.agent.plugins import DriverSet, driver_failure, where
from exosuit.agent.reporter import Session, put_outcome
from exosuit.drivers.base import Device, Installable, InstallError

LOG = logging.getLogger(__name__)

__all__ = ["ActivationReconciler"]

ACTIONS = ("install", "uninstall")
MAX_REASON = 4096


class _Failed(Exception):
    """The step fails: the message is the reason the operator reads."""


class ActivationReconciler:
    """Runs the ``activations`` of this host's desired state, each once.

    ``step(state)`` is called by the agent loop; it never waits, and returns True when
    a step ran (the loop then reports the inventory at once).
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
        self._malformed: set[str] = set()  # steps logged as malformed (said once)

    def step(self, state: AgentState) -> bool:
        """Send the outcomes not acknowledged yet, run each step listed that this agent
        has not ended, forget what the API has and no longer asks for."""
        for uuid, finished in list(state.activations.items()):
            if not finished["acknowledged"]:
                self._deliver(state, uuid, finished)
        ran = False
        listed: dict[str, tuple[str, int]] = {}
        for item in state.desired_state.get("activations") or []:
            step = self._parse(item)
            if step is None:
                continue
            uuid, action, generation = step
            listed[uuid] = (action, generation)
            ended = state.activations.get(uuid)
            if ended is not None and (ended["action"], ended["generation"]) == (action, generation):
                continue  # ended (acknowledged or not): never run twice
            self._run(state, uuid, item)
            ran = True
        stale = [
            uuid
            for uuid, finished in state.activations.items()
            if finished["acknowledged"]
            and listed.get(uuid) != (finished["action"], finished["generation"])
        ]
        for uuid in stale:
            del state.activations[uuid]
        if stale:
            self.cache.save(state)
        return ran

    def _parse(self, item: Any) -> tuple[str, str, int] | None:
        """(device uuid, action, generation) of a well-formed step; None (logged once)
        for one this agent cannot run."""
        if (
            isinstance(item, Mapping)
            and isinstance(item.get("device"), str)
            and item.get("action") in ACTIONS
            and isinstance(item.get("generation"), int)
            and isinstance(item.get("controlpath_id"), Mapping)
        ):
            return item["device"], item["action"], item["generation"]
        text = repr(item)[:300]
        if text not in self._malformed:
            self._malformed.add(text)
            LOG.error("the desired state has an activation this agent cannot read: %s", text)
        return None

    # -- one step ----------------------------------------------------------------------

    def _run(self, state: AgentState, uuid: str, item: Mapping[str, Any]) -> None:
        action: str = item["action"]
        LOG.info("device %s: %s step (generation %s)", uuid, action, item["generation"])
        try:
            reason = self._install(item) if action == "install" else self._uninstall(item)
            outcome = "done"
        except _Failed as failure:
            reason, outcome = str(failure), "failed"
        if outcome == "done":
            LOG.info("device %s: %s done%s", uuid, action, f" ({reason})" if reason else "")
        else:
            LOG.error("device %s: %s failed: %s", uuid, action, reason)
        finished: FinishedActivation = {
            "action": action,
            "generation": item["generation"],
            "report": {
                "action": action,
                "generation": item["generation"],
                "state": outcome,
                "reason": reason[:MAX_REASON] if reason is not None else None,
            },
            "acknowledged": False,
        }
        state.activations[uuid] = finished
        self.cache.save(state)  # before it is sent: a restart does not run it again
        self._deliver(state, uuid, finished)

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

    # -- reports -----------------------------------------------------------------------

    def _deliver(self, state: AgentState, uuid: str, finished: FinishedActivation) -> None:
        url = f"{self.endpoint}/agent/v1/hosts/{self.hostname}/activations/{uuid}"
        what = f"device {uuid}: the outcome"
        response = put_outcome(
            self.session, url, finished["report"], timeout=self.timeout, what=what
        )
        if response is None:
            return
        status = response.status_code
        if status == 409:
            LOG.info(
                "device %s: the operator changed its activation since: %s", uuid, _text(response)
            )
        elif status == 404:
            LOG.warning("device %s: the API does not know it on this host (404)", uuid)
        elif status not in (200, 204):
            # A report the API rejects (400) will not be accepted later either.
            LOG.error(
                "device %s: the API rejected %s: %s %s",
                uuid,
                finished["report"],
                status,
                _text(response),
            )
        finished["acknowledged"] = True
        self.cache.save(state)


def _installed(driver: Installable, device: Device, settings: Mapping[str, Any]) -> bool:
    try:
        return bool(driver.installed(device, settings))
    except Exception as error:
        raise _Failed(f"checking the install failed: {_failure(error)}") from error


def _text(response: Any) -> str:
    return str(response.text)[:200]


def _failure(error: Exception) -> str:
    return driver_failure(error, InstallError)
