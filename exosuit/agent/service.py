"""The agent's loop: discover, report, remember; again every interval or at once on a uevent.

Level-triggered: each report is the whole host. The cache (agent/cache.py)
makes a restart or an outage cost nothing: an unchanged host sends only its
hash, and nothing the API acknowledged is forgotten. The first report is
jittered so a fleet that boots together does not arrive together; ``429`` +
``Retry-After`` is honoured; while the API is unreachable the agent backs off
exponentially with jitter and logs once when that starts and once when it ends.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence

from exosuit import schemas
from exosuit.agent.cache import AgentCache, AgentState
from exosuit.agent.reporter import Reporter, ReportOutcome
from exosuit.agent.snapshot import build_snapshot

LOG = logging.getLogger(__name__)

__all__ = ["Agent", "backoff_delay"]


class Agent:
    def __init__(
        self,
        hostname: str,
        drivers: Sequence,
        reporter: Reporter,
        cache: AgentCache,
        *,
        interval: float = 60.0,
        jitter: float = 10.0,
        removal_grace: float = 120.0,
        max_backoff: float = 60.0,
        backoff_base: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hostname = hostname
        self.drivers = list(drivers)
        self.reporter = reporter
        self.cache = cache
        self.interval = interval
        self.jitter = jitter
        self.removal_grace = removal_grace
        self.max_backoff = max_backoff
        self.backoff_base = backoff_base
        self.clock = clock
        self.state: AgentState = cache.load()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._unreachable = False
        self.reports = 0  # acknowledged reports (for tests and status)

    # -- discovery ----------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Discover, then keep devices missing for less than the removal grace."""
        found = build_snapshot(self.hostname, self.drivers)
        now = self.clock()
        devices = {schemas.canonical_json(d["controlpath_id"]): d for d in found["devices"]}
        remembered = self.state.devices
        kept = {}
        for identity, entry in remembered.items():
            if identity in devices:
                continue
            missing_for = now - entry["last_seen"]
            if missing_for < self.removal_grace:
                device = dict(entry["device"])
                device["missing_since"] = _iso(entry["last_seen"])
                kept[identity] = device
        for identity, device in devices.items():
            remembered[identity] = {"last_seen": now, "device": device}
        for identity in [i for i in remembered if i not in devices and i not in kept]:
            del remembered[identity]
        if not kept:
            return found
        all_devices = list(devices.values()) + list(kept.values())
        all_devices.sort(key=lambda d: schemas.canonical_json(d["controlpath_id"]))
        found["devices"] = all_devices
        found["hash"] = schemas.snapshot_hash(all_devices, found["driver_errors"])
        return found

    # -- reporting ----------------------------------------------------------------------
    def report_once(self, snapshot: dict) -> ReportOutcome:
        """Send ``snapshot`` (only its hash if the API already has it); remember the ack."""
        if snapshot["hash"] == self.state.acknowledged_hash:
            outcome = self.reporter.report({"schema_version": 1, "hash": snapshot["hash"],
                                            "hostname": self.hostname})
            if outcome.kind != "resend":
                return self._after(outcome, snapshot)
        return self._after(self.reporter.report(snapshot), snapshot)

    def _after(self, outcome: ReportOutcome, snapshot: dict) -> ReportOutcome:
        if outcome.kind == "ok":
            state = self.state
            changed = state.acknowledged_hash != snapshot["hash"]
            state.acknowledged_hash = snapshot["hash"]
            state.acknowledged_snapshot = snapshot
            state.acknowledged_at = self.clock()
            state.desired_state = outcome.desired_state or {}
            self.cache.save(state)
            self.reports += 1
            if changed:
                LOG.info("inventory of %s acknowledged: %d device(s), hash %s",
                         self.hostname, len(snapshot["devices"]), snapshot["hash"][:19])
        return outcome

    def _set_reachable(self, reachable: bool, detail: str = "") -> None:
        if reachable and self._unreachable:
            LOG.warning("API reachable again; reports resume")
        elif not reachable and not self._unreachable:
            LOG.warning("%s; retrying with exponential backoff", detail)
        self._unreachable = not reachable

    def deliver(self, snapshot: dict) -> ReportOutcome | None:
        """Report until acknowledged, rejected, superseded by a wake-up, or stopped."""
        attempt = 0
        while not self._stop.is_set():
            outcome = self.report_once(snapshot)
            if outcome.kind == "ok":
                self._set_reachable(True)
                return outcome
            if outcome.kind == "rejected":
                self._set_reachable(True)
                LOG.error("the API rejected the inventory of %s: %s", self.hostname,
                          outcome.detail)
                return outcome
            if outcome.retry_after is not None:
                delay = outcome.retry_after
                LOG.info("API busy (%s); next report in %.1f s", outcome.detail, delay)
            else:
                self._set_reachable(False, outcome.detail)
                delay = backoff_delay(attempt, self.max_backoff, self.backoff_base)
                attempt += 1
            if self._wait(delay):
                return None  # woken: a newer discovery supersedes this snapshot
        return None

    # -- the loop -----------------------------------------------------------------------
    def wake(self, *_args) -> None:
        """Discover and report at once (a uevent, SIGHUP)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if woken early (not by stop)."""
        woken = self._wake.wait(seconds)
        if woken and not self._stop.is_set():
            self._wake.clear()
            # Coalesce a burst of uevents (a VF creation makes several).
            time.sleep(0.2)
            self._wake.clear()
            return True
        return False

    def run(self) -> None:
        first = random.uniform(0, self.jitter) if self.jitter > 0 else 0
        if first:
            LOG.info("first report in %.1f s (jitter)", first)
            self._wait(first)
        while not self._stop.is_set():
            if self.deliver(self.snapshot()) is None:
                continue  # woken (or stopped) while delivering: discover again now
            self._wait(self.interval)


def backoff_delay(attempt: int, max_backoff: float, base: float = 1.0) -> float:
    """Exponential backoff with jitter: base * 2**attempt capped at max_backoff, then a
    random half to whole of it (a fleet that lost the API together does not return
    together)."""
    delay = min(max_backoff, base * 2 ** attempt)
    return random.uniform(delay / 2, delay)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
