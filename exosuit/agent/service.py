"""The agent's loop: discover, report, remember; again every interval or at once on a uevent.

Level-triggered: each report is the whole host. The cache (agent/cache.py)
makes a restart or an outage cost nothing: an unchanged host sends only its
hash, and nothing the API acknowledged is forgotten. The first report is
jittered so a fleet that boots together does not arrive together; ``429`` +
``Retry-After`` is honoured; while the API is unreachable the agent backs off
exponentially with jitter and logs once when that starts and once when it ends.

Between reports the loop gives each of its reconcilers (agent/reconciler.py, the one
base they share) a step: each reads one list of the host's desired state, does the work
it asks once, and reports the outcome until the API has it. In the order the agent is
given them (exosuit/agent/main.py, ``build_reconcilers``): the programs to load, which
also poll the desired state every ``desired_state_interval`` (agent/programs.py), the
install and uninstall steps of devices being activated (agent/activations.py), the
partition layouts (agent/partitions.py), the on-demand slices of binds
(agent/slices.py) and the CDI spec files of the claims handed to containers
(agent/cdi.py). A step that changed a device is followed by a report at once, so new
traits or slices reach the API without waiting for the interval. Before each step the
loop applies the desired state itself: the operator's driver overrides (agent/plugins.py:
drivers enabled, disabled or reconfigured without a restart), and a discovery asked for
("discover now": after a random delay within the ``spread`` the desired state gives).
Each report carries the generation applied (``observed_generation``) and the drivers'
live figures (``usage``), both outside the snapshot's hash.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Sequence
from typing import Any

from exosuit.agent.cache import AgentCache, AgentState
from exosuit.agent.clock import Clock, SystemClock
from exosuit.agent.grace import apply_removal_grace
from exosuit.agent.plugins import DriverSet
from exosuit.agent.reconciler import Reconciler
from exosuit.agent.reporter import Reporter, ReportOutcome
from exosuit.agent.snapshot import discover, make_snapshot
from exosuit.backoff import backoff_delay
from exosuit.drivers.base import Driver

LOG = logging.getLogger(__name__)

__all__ = ["COALESCE_SECONDS", "Agent"]

# A burst of uevents (a VF creation makes several) is waited out this long, then causes
# one discovery.
COALESCE_SECONDS = 0.2


class Agent:
    """One host's agent. ``drivers``: the drivers it runs (a ``DriverSet``, which the
    desired state's overrides reconfigure, or driver objects); ``clock`` (default: the
    real one) is what every wait and every timestamp goes through; ``rng`` is the
    random source of the jitter, the backoff and the delay of a discovery asked for;
    ``reconcilers``: the host work it does between reports, in order (none: it only
    reports, and reads the desired state only from the inventory answers; a reconciler
    that polls it, the programs', comes first)."""

    def __init__(
        self,
        hostname: str,
        drivers: Sequence[Driver] | DriverSet,
        reporter: Reporter,
        cache: AgentCache,
        *,
        interval: float = 60.0,
        jitter: float = 10.0,
        removal_grace: float = 120.0,
        max_backoff: float = 60.0,
        backoff_base: float = 1.0,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        reconcilers: Sequence[Reconciler[Any, Any]] = (),
    ) -> None:
        self.hostname = hostname
        self.plugins = drivers if isinstance(drivers, DriverSet) else DriverSet.fixed(drivers)
        self.reporter = reporter
        self.cache = cache
        self.interval = interval
        self.jitter = jitter
        self.removal_grace = removal_grace
        self.max_backoff = max_backoff
        self.backoff_base = backoff_base
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.rng = rng if rng is not None else random.Random()
        self.reconcilers: list[Reconciler[Any, Any]] = list(reconcilers)
        self.state: AgentState = cache.load_or_set_aside()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._unreachable = False
        self.reports = 0  # acknowledged reports (for tests, status and its /metrics)
        # The live figures of the last discovery (its /metrics: agent/metrics.py).
        self.usage: dict[str, dict[str, float]] = {}
        self._applied: int | None = None  # the desired generation whose drivers are applied
        self._discovery_due: float | None = None  # when a discovery asked for is due
        self._overrides: object = {}  # the driver overrides applied (none: the file's)
        self._urgent = False  # the generation being applied is reported at once

    @property
    def drivers(self) -> list[Driver]:
        """The drivers running now."""
        return self.plugins.drivers

    # -- discovery ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Discover, then keep devices missing for less than the removal grace (not
        those of a driver disabled on purpose). The snapshot carries the drivers'
        report (hashed) and the generation observed and usage (not hashed)."""
        found = discover(self.plugins.drivers, usage=True)
        snapshot, self.state.devices = apply_removal_grace(
            make_snapshot(self.hostname, found, self.plugins.report(found.found, found.failed)),
            self.state.devices,
            self.clock.now(),
            self.removal_grace,
            found_by=found.found_by,
            no_grace=self.plugins.stopped,
        )
        if self.state.observed_generation is not None:
            snapshot["observed_generation"] = self.state.observed_generation
        self.usage = found.usage
        if found.usage:
            snapshot["usage"] = found.usage
        return snapshot

    # -- the desired state --------------------------------------------------------------
    def apply_desired_state(self) -> bool:
        """Apply the desired state's driver overrides when its generation is new, and
        its discovery request when due; then the generation is observed. True when a
        report is due at once: the overrides changed (or there are some: the operator
        waits for this host to say it applied them) or a discovery asked for is due.
        A generation that neither touches the drivers nor asks for a discovery (a
        program's) is observed silently: the next report carries it."""
        desired = self.state.desired_state
        generation = desired.get("generation")
        if not isinstance(generation, int) or isinstance(generation, bool):
            return False
        now = self.clock.now()
        if generation != self._applied:
            self._applied = generation
            overrides = desired.get("drivers") or {}
            reloaded = self.plugins.apply(overrides)
            self._urgent = reloaded or bool(overrides) or overrides != self._overrides
            self._overrides = overrides
            self._discovery_due = None
            asked = desired.get("discovery")
            if _newer(asked, self.state.observed_generation, generation):
                assert isinstance(asked, dict)
                spread = asked.get("spread")
                spread = float(spread) if isinstance(spread, (int, float)) else 0.0
                delay = self.rng.uniform(0, spread) if spread > 0 else 0.0
                self._discovery_due = now + delay
                LOG.info("discovery asked (generation %s): in %.1f s", generation, delay)
        if self._discovery_due is not None:
            if now < self._discovery_due:
                return False
            self._discovery_due = None
            self._urgent = True
        if generation == self.state.observed_generation:
            return False
        self.state.observed_generation = generation
        self.cache.save(self.state)
        urgent, self._urgent = self._urgent, False
        return urgent

    # -- reporting ----------------------------------------------------------------------
    def report_once(self, snapshot: dict[str, Any]) -> ReportOutcome:
        """Send ``snapshot`` (only its hash if the API already has it); remember the ack."""
        holds = self.state.desired_state.get("generation")
        if not isinstance(holds, int) or isinstance(holds, bool) or holds < 0:
            holds = None
        if snapshot["hash"] == self.state.acknowledged_hash:
            body = {"schema_version": 1, "hash": snapshot["hash"], "hostname": self.hostname}
            # Outside the hash, so carried by an unchanged report too.
            body.update({k: snapshot[k] for k in ("observed_generation", "usage") if k in snapshot})
            outcome = self.reporter.report(body, holds=holds)
            if outcome.kind != "resend":
                return self._after(outcome, snapshot)
        return self._after(self.reporter.report(snapshot, holds=holds), snapshot)

    def _after(self, outcome: ReportOutcome, snapshot: dict[str, Any]) -> ReportOutcome:
        if outcome.kind == "ok":
            state = self.state
            changed = state.acknowledged_hash != snapshot["hash"]
            state.acknowledged_hash = snapshot["hash"]
            state.acknowledged_at = self.clock.now()
            # An answer without a desired state (the API says the one held is current)
            # keeps it; so does an API that has none for hosts yet ({}): keep what the
            # desired-state poll found.
            if outcome.desired_state:
                state.desired_state = outcome.desired_state
            self.cache.save(state)
            self.reports += 1
            if changed:
                LOG.info(
                    "inventory of %s acknowledged: %d device(s), hash %s",
                    self.hostname,
                    len(snapshot["devices"]),
                    snapshot["hash"][:19],
                )
        return outcome

    def _set_reachable(self, reachable: bool, detail: str = "") -> None:
        if reachable and self._unreachable:
            LOG.warning("API reachable again; reports resume")
        elif not reachable and not self._unreachable:
            LOG.warning("%s; retrying with exponential backoff", detail)
        self._unreachable = not reachable

    def deliver(self, snapshot: dict[str, Any]) -> ReportOutcome | None:
        """Report until acknowledged, rejected, superseded by a wake-up, or stopped."""
        failures = 0
        while not self._stop.is_set():
            outcome = self.report_once(snapshot)
            if outcome.kind == "ok":
                self._set_reachable(True)
                return outcome
            if outcome.kind == "rejected":
                self._set_reachable(True)
                LOG.error("the API rejected the inventory of %s: %s", self.hostname, outcome.detail)
                return outcome
            if outcome.retry_after is not None:
                delay = outcome.retry_after
                LOG.info("API busy (%s); next report in %.1f s", outcome.detail, delay)
            else:
                self._set_reachable(False, outcome.detail)
                failures += 1
                delay = backoff_delay(failures, self.backoff_base, self.max_backoff, rng=self.rng)
            if self._wait(delay):
                return None  # woken: a newer discovery supersedes this snapshot
        return None

    # -- the loop -----------------------------------------------------------------------
    def wake(self, *_args: object) -> None:
        """Discover and report at once (a uevent, SIGHUP)."""
        self._wake.set()

    def stop(self) -> None:
        """End ``run`` (and a ``deliver`` in progress) at its next wait."""
        self._stop.set()
        self._wake.set()

    def _wait(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True if woken early (not by stop)."""
        woken = self.clock.wait(self._wake, seconds)
        if woken and not self._stop.is_set():
            self._wake.clear()
            # Coalesce a burst of uevents (a VF creation makes several); stop ends it.
            self.clock.wait(self._stop, COALESCE_SECONDS)
            self._wake.clear()
            return True
        return False

    def run(self) -> None:
        first = self.rng.uniform(0, self.jitter) if self.jitter > 0 else 0
        if first:
            LOG.info("first report in %.1f s (jitter)", first)
            self._wait(first)
        while not self._stop.is_set():
            # The drivers as the desired state last known says (the cache's, at start).
            self.apply_desired_state()
            if self.deliver(self.snapshot()) is None:
                continue  # woken (or stopped) while delivering: discover again now
            self._between_reports(self.clock.now() + self.interval)

    def _between_reports(self, due: float) -> None:
        """Until the next report is ``due`` (or a wake-up): reconcile (``_reconcile``),
        then wait until the next report, the next step a reconciler wants (the programs'
        poll of the desired state) or the discovery asked for, whichever comes first.
        Returns early, for a report at once, when ``_reconcile`` says one is due."""
        while not self._stop.is_set():
            if self._reconcile():
                return
            now = self.clock.now()
            remaining = due - now
            if remaining <= 0:
                return
            for reconciler in self.reconcilers:
                wake = reconciler.wake_at()
                if wake is not None:
                    remaining = min(remaining, max(0.0, wake - now))
            if self._discovery_due is not None:
                remaining = min(remaining, max(0.0, self._discovery_due - now))
            if self._wait(remaining):
                return

    def _reconcile(self) -> bool:
        """Give each reconciler its step, the desired state applied before each (and
        after the last): a step may fetch a newer one (the programs' poll), and every
        reconciler works with the drivers it says. True when a report is due at once: a
        generation applied asks for one, or a step changed a device (a CDI spec changes
        none)."""
        for reconciler in self.reconcilers:
            if self.apply_desired_state():
                return True
            if reconciler.step(self.state) and reconciler.changes_devices:
                return True
        return self.apply_desired_state()


def _newer(asked: object, observed: int | None, generation: int) -> bool:
    """Whether the desired state's ``discovery`` asks for one this agent has not done:
    asked at a generation past the one it observed (or the API's generations went
    back: its database was restored)."""
    if not isinstance(asked, dict):
        return False
    at = asked.get("generation")
    if not isinstance(at, int) or isinstance(at, bool):
        return False
    return observed is None or at > observed or generation < observed
