"""The base of the agent's reconcilers: the desired state in, one outcome per item out.

Every kind of host work the desired state asks for (a program to load, an install
step, a partition layout, the slices of a bind, the CDI specs of a claim) has one
shape, written here once. What a concrete reconciler says (agent/programs.py,
activations.py, partitions.py, slices.py, cdi.py):

- ``section``: the list of the desired state it reads (``"activations"``);
- ``parse(item)``: one item as it uses it, and its key (a device or claim uuid);
  ValueError for one it cannot read (logged once, left alone);
- ``records(state)``: where its records are kept, one per key: a map of the agent
  cache's ``AgentState`` (on disk), or of the reconciler (in memory: work that follows
  wholly from the desired state, as the slices' does);
- ``settled(record, item)``: whether the record answers the item (default: any does);
- ``run(state, key, item)``: the work (the driver calls), ended by ``finish``;
- ``path``: where outcomes go, ``PUT /agent/v1/hosts/{hostname}/{path}/{key}``, and
  ``answered``, what the API's answer means (default: logged).

What the base does at each ``step(state)`` (the agent loop calls it between its
reports; it never waits):

1. **Out.** Each record whose outcome the API has not acknowledged is sent. Any answer
   settles it (a ``404``, ``409`` or ``400`` too: sending it again would not change
   it). An unreachable API, or ``5xx``, ``401``, ``403``, ``408``, ``429``, keeps it for
   a later step with exponential backoff (exosuit/backoff.py, on the reconciler's
   clock): after ``n`` failures in a row nothing is sent until ``backoff_delay(n - 1)``
   seconds have passed since the last attempt, that is at the next step after one
   failure, then after about ``backoff_base``, twice that, and so on up to
   ``max_backoff``. Any answer ends the backoff.
2. **In.** Each item listed that no record settles is run. ``finish`` writes its record
   to the agent cache *before* the outcome is sent, so that a restart neither runs it
   again nor loses the outcome; work a crash interrupted before that runs again (the
   driver steps are idempotent: exosuit/drivers/base.py).
3. **Forget.** A record the API has acknowledged whose item is no longer listed (or no
   longer settled by it: ``stale``) is dropped, after ``drop`` undid what it left on
   the host, if anything.

A desired state without the section (an API older than it) changes nothing. The step
returns True when the work changed something: the agent then reports its inventory at
once, unless the reconciler's work changes no device (``changes_devices``).

A new kind of host work is one small class: doc/agent.md, "A new reconciler".
"""

from __future__ import annotations

import abc
import logging
import math
import random
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from exosuit.agent.cache import AgentCache, AgentState, Outcome
from exosuit.agent.clock import Clock, SystemClock
from exosuit.agent.plugins import DriverSet
from exosuit.agent.reporter import Response, Session, put_outcome
from exosuit.backoff import backoff_delay

__all__ = ["MAX_REASON", "KeepRecord", "Reconciler"]

MAX_REASON = 4096  # the longest reason an outcome carries

ItemT = TypeVar("ItemT")
RecordT = TypeVar("RecordT", bound=Outcome)


class KeepRecord(Exception):  # noqa: N818 - it names what happens, not an error
    """Raised by ``drop``: what the record left could not be undone yet; the record is
    kept, and dropped at a later step."""


class Reconciler(abc.ABC, Generic[ItemT, RecordT]):
    """Runs the items of one list of this host's desired state, each once, and reports
    each outcome until the API has it (the module docstring has the contract).

    ``plugins``: the drivers, as the desired state's overrides keep them; ``session``
    and ``endpoint``: the API's (the reporter's); ``cache``: where records are written
    (None: the records are in memory only); ``clock`` and ``rng``: the backoff's time
    and jitter; ``backoff_base`` and ``max_backoff``: its first and longest wait.
    """

    section: ClassVar[str]  # the desired state's list: "activations"
    path: ClassVar[str]  # outcomes go to .../hosts/{hostname}/{path}/{key}
    noun: ClassVar[str]  # what an item is, in a log line: "an activation"
    subject: ClassVar[str] = "{key}"  # what a key names, in a log line: "device {key}"
    # Whether a step that did something changed the host's devices: the agent then
    # reports its inventory at once.
    changes_devices: ClassVar[bool] = True

    def __init__(
        self,
        hostname: str,
        plugins: DriverSet,
        session: Session,
        endpoint: str,
        cache: AgentCache | None,
        *,
        timeout: float = 30.0,
        clock: Clock | None = None,
        backoff_base: float = 1.0,
        max_backoff: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        self.hostname = hostname
        self.plugins = plugins
        self.session = session
        self.endpoint = endpoint.rstrip("/")
        self.cache = cache
        self.timeout = timeout
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.rng = rng
        self.log = logging.getLogger(type(self).__module__)
        self.failures = 0  # outcomes in a row the API did not take
        self.next_attempt = -math.inf  # no outcome is sent before (the backoff)
        self._said: set[str] = set()

    # -- what a reconciler says --------------------------------------------------------

    @abc.abstractmethod
    def parse(self, item: Any) -> tuple[str, ItemT]:
        """(key, item) of one entry of the section; ValueError (saying what is wrong)
        for one this agent cannot run."""

    @abc.abstractmethod
    def records(self, state: AgentState) -> dict[str, RecordT]:
        """The records, by key: those of ``state`` (on disk), or the reconciler's own."""

    @abc.abstractmethod
    def run(self, state: AgentState, key: str, item: ItemT) -> bool:
        """Do the work ``item`` asks (never waiting), then record the outcome with
        ``finish`` (or leave no record: the item runs again at the next step). True when
        the host changed."""

    def settled(self, record: RecordT, item: ItemT) -> bool:
        """Whether ``record`` answers ``item`` (then it is not run again). Default: any
        record does (an item runs once, whatever it asks later)."""
        return True

    def outgoing(self, record: RecordT) -> Mapping[str, Any] | None:
        """The body to send for ``record`` (None: nothing to send yet)."""
        return record["report"]

    def answered(self, state: AgentState, key: str, record: RecordT, response: Response) -> None:
        """What the API's answer to ``record``'s outcome means (it is acknowledged after
        this). Default: a 404 or a 409 is logged (the API no longer waits for it), any
        other answer but 200 and 204 too (a rejection: sending it again will not help)."""
        status = response.status_code
        subject = self.subject.format(key=key)
        if status == 404:
            self.log.warning("%s: the API does not know it on this host (404)", subject)
        elif status == 409:
            self.log.info("%s: the API no longer waits for this outcome (409)", subject)
        elif status not in (200, 204):
            self.log.error(
                "%s: the API rejected %s: %s %s",
                subject,
                self.outgoing(record),
                status,
                response.text[:200],
            )

    def stale(self, record: RecordT, item: ItemT | None) -> bool:
        """Whether ``record`` is forgotten; ``item``: what the desired state lists at its
        key now (None: nothing). Default: once acknowledged, and no longer asked for."""
        return record["acknowledged"] and (item is None or not self.settled(record, item))

    def drop(self, state: AgentState, key: str, record: RecordT) -> bool:
        """Undo what a stale ``record`` left on the host before it is forgotten: True when
        that changed the host. Raise KeepRecord to keep it for a later step. Default:
        nothing to undo."""
        return False

    def wake_at(self) -> float | None:
        """When this reconciler wants its next step (the agent loop waits no longer);
        None: whenever the loop takes one (a report, a wake-up)."""
        return None

    # -- the step ----------------------------------------------------------------------

    def step(self, state: AgentState) -> bool:
        """Send the outcomes not acknowledged yet, run each item listed that no record
        settles, forget what the API has and the desired state no longer asks for.
        True when the work (or an undoing) changed the host."""
        self.send_pending(state)
        items = state.desired_state.get(self.section)
        if not isinstance(items, list):
            return False  # an API that does not send the section changes nothing
        listed: dict[str, ItemT] = {}
        for entry in items:
            parsed = self._parse(entry)
            if parsed is not None:
                listed[parsed[0]] = parsed[1]
        changed = False
        for key, item in listed.items():
            record = self.records(state).get(key)
            if record is not None and self.settled(record, item):
                continue  # ended (acknowledged or not): never run twice
            changed |= self.run(state, key, item)
        return self._forget(state, listed) or changed

    def _parse(self, entry: Any) -> tuple[str, ItemT] | None:
        try:
            return self.parse(entry)
        except ValueError as error:
            text = repr(entry)[:300]
            self.say(
                logging.ERROR,
                f"the desired state has {self.noun} this agent cannot read: "
                + (f"{error}: {text}" if str(error) else text),
            )
            return None

    def _forget(self, state: AgentState, listed: Mapping[str, ItemT]) -> bool:
        records = self.records(state)
        changed = forgotten = False
        for key, record in list(records.items()):
            if not self.stale(record, listed.get(key)):
                continue
            try:
                changed |= self.drop(state, key, record)
            except KeepRecord:
                continue
            del records[key]
            forgotten = True
        if forgotten:
            self.save(state)
        return changed

    # -- records and outcomes ----------------------------------------------------------

    def save(self, state: AgentState) -> None:
        """Write the agent cache (nothing when the records are in memory only)."""
        if self.cache is not None:
            self.cache.save(state)

    def remember(self, state: AgentState, key: str, record: RecordT) -> None:
        """Keep ``record`` as ``key``'s, on disk before this returns (nothing is sent)."""
        self.records(state)[key] = record
        self.save(state)

    def finish(self, state: AgentState, key: str, record: RecordT) -> None:
        """Keep ``record`` (``remember``), then send its outcome unless acknowledged."""
        self.remember(state, key, record)
        if not record["acknowledged"]:
            self.send(state, key, record)

    def send_pending(self, state: AgentState) -> None:
        """Send every outcome the API has not acknowledged (unless backing off)."""
        for key, record in list(self.records(state).items()):
            if not record["acknowledged"]:
                self.send(state, key, record)

    def send(self, state: AgentState, key: str, record: RecordT) -> None:
        """PUT ``record``'s outcome; acknowledged (and written) once the API answers.
        Nothing while backing off; an unreachable API backs off further."""
        body = self.outgoing(record)
        now = self.clock.now()
        if body is None or now < self.next_attempt:
            return
        response = self.put(key, body, what=f"{self.subject.format(key=key)}: the outcome")
        if response is None:
            self.failures += 1
            self.next_attempt = now + backoff_delay(
                self.failures - 1, self.backoff_base, self.max_backoff, rng=self.rng
            )
            return
        self.failures, self.next_attempt = 0, -math.inf
        self.answered(state, key, record, response)
        record["acknowledged"] = True
        self.save(state)

    def put(self, key: str, body: Mapping[str, Any], *, what: str) -> Response | None:
        """PUT ``body`` to ``key``'s outcome URL (reporter.put_outcome): the answer, or
        None (logged) when the API did not take it."""
        url = f"{self.endpoint}/agent/v1/hosts/{self.hostname}/{self.path}/{key}"
        return put_outcome(self.session, url, dict(body), timeout=self.timeout, what=what)

    def say(self, level: int, problem: str) -> None:
        """Log ``problem`` once per reconciler (a step repeats; its log lines do not)."""
        if problem not in self._said:
            self._said.add(problem)
            self.log.log(level, "%s", problem)
