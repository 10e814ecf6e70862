"""The reconcilers' base (exosuit/agent/reconciler.py), held by one small reconciler.

``Flash`` is the smallest reconciler there is: it "flashes" each device the desired
state's ``flashes`` lists, once per generation, and reports ``flashed``. It keeps its
records in the cache's ``partitions`` map (their shape is the one it needs), so a
restart reads them back as the real reconcilers' are. The API is a small WSGI app that
can be made to answer 503; time is a FakeClock.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Mapping
from typing import Any

import pytest
import webob

from exosuit.agent.cache import AgentCache, AgentState, FinishedPartition
from exosuit.agent.clock import FakeClock
from exosuit.agent.plugins import DriverSet
from exosuit.agent.reconciler import Reconciler
from exosuit.agent.transport import WsgiSession
from exosuit.backoff import backoff_delay

HOST = "host-1"
ENDPOINT = "http://exosuit.test"
DEVICE = "7d0e6c2a-0000-4000-8000-000000000001"
BASE, MAX = 2.0, 16.0  # the backoff's first and longest wait, in seconds


class Flash(Reconciler[Mapping[str, Any], FinishedPartition]):
    """Flashes each device listed, once per generation (the example of doc/agent.md)."""

    section = "flashes"
    path = "flashes"
    noun = "a flash"
    subject = "device {key}"

    def __init__(self, cache: AgentCache, session: WsgiSession, clock: FakeClock) -> None:
        super().__init__(
            HOST,
            DriverSet.fixed([]),
            session,
            ENDPOINT,
            cache,
            clock=clock,
            backoff_base=BASE,
            max_backoff=MAX,
            rng=random.Random(20),
        )
        self.flashed: list[tuple[str, int]] = []  # the host work done, in order

    def parse(self, item: Any) -> tuple[str, Mapping[str, Any]]:
        if not (isinstance(item, Mapping) and isinstance(item.get("generation"), int)):
            raise ValueError("no generation")
        return str(item["device"]), item

    def records(self, state: AgentState) -> dict[str, FinishedPartition]:
        return state.partitions

    def settled(self, record: FinishedPartition, item: Mapping[str, Any]) -> bool:
        return bool(record["generation"] == item["generation"])

    def run(self, state: AgentState, key: str, item: Mapping[str, Any]) -> bool:
        self.flashed.append((key, item["generation"]))
        report = {"generation": item["generation"], "state": "flashed"}
        self.finish(
            state, key, {"generation": item["generation"], "report": report, "acknowledged": False}
        )
        return True


class Api:
    """``PUT …/flashes/{device}``: 200 and kept, or 503 while ``down``."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.down = False
        self.attempts: list[float] = []  # when each PUT came (taken or not)
        self.taken: list[tuple[str, dict[str, Any]]] = []

    @webob.dec.wsgify
    def __call__(self, req: webob.Request) -> webob.Response:
        match = re.fullmatch(rf"/agent/v1/hosts/{HOST}/flashes/([^/]+)", req.path)
        assert match and req.method == "PUT", req.path
        self.attempts.append(self.clock.now())
        if self.down:
            return webob.Response(status=503, json_body={"error": "busy"})
        self.taken.append((match[1], json.loads(req.body)))
        return webob.Response(json_body={})


class Host:
    """The agent's side: its cache and state, restarted at will."""

    def __init__(self, tmp_path, api: Api) -> None:
        self.tmp_path = tmp_path
        self.api = api
        self.restart()

    def restart(self) -> None:
        self.cache = AgentCache(str(self.tmp_path / "state"))
        self.state = self.cache.load()
        self.reconciler = Flash(self.cache, WsgiSession(self.api), self.api.clock)

    def ask(self, *generations: int) -> None:
        self.state.desired_state = {
            "generation": max(generations, default=1),
            "flashes": [{"device": DEVICE, "generation": g} for g in generations],
        }

    def step(self) -> bool:
        return self.reconciler.step(self.state)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api(clock) -> Api:
    return Api(clock)


def test_an_item_runs_once_and_its_outcome_is_delivered_once(tmp_path, api):
    host = Host(tmp_path, api)
    host.ask(3)
    assert host.step() is True
    assert host.reconciler.flashed == [(DEVICE, 3)]
    assert api.taken == [(DEVICE, {"generation": 3, "state": "flashed"})]
    for _ in range(3):
        assert host.step() is False
    assert host.reconciler.flashed == [(DEVICE, 3)]
    assert len(api.taken) == 1
    assert host.cache.load().partitions[DEVICE]["acknowledged"] is True
    # A new generation of the item runs again; the old record gives way.
    host.ask(4)
    assert host.step() is True
    assert host.reconciler.flashed == [(DEVICE, 3), (DEVICE, 4)]
    # No longer listed, and acknowledged: forgotten, on disk too.
    host.ask()
    assert host.step() is False
    assert host.cache.load().partitions == {}


def test_the_outcome_is_on_disk_before_it_is_sent_and_survives_a_restart(tmp_path, api):
    api.down = True
    host = Host(tmp_path, api)
    host.ask(3)
    assert host.step() is True
    assert api.taken == []
    on_disk = host.cache.load().partitions[DEVICE]
    assert (on_disk["report"], on_disk["acknowledged"]) == (
        {"generation": 3, "state": "flashed"},
        False,
    )
    host.restart()  # a new agent process: only what is on disk is known
    api.down = False
    assert host.step() is False  # not run again: sent
    assert host.reconciler.flashed == []
    assert api.taken == [(DEVICE, {"generation": 3, "state": "flashed"})]
    assert host.cache.load().partitions[DEVICE]["acknowledged"] is True


def test_an_outcome_the_api_does_not_take_is_sent_again_with_backoff(tmp_path, api, clock):
    """After the first failure the next step sends again; after the ``n``-th, no step
    sends before ``backoff_delay(n - 1)`` (jittered into its upper half) has passed,
    up to MAX; an answer ends the backoff."""
    api.down = True
    host = Host(tmp_path, api)
    host.ask(3)
    start = clock.now()
    host.step()  # runs, and the first attempt fails
    host.step()  # the next step sends again at once
    assert api.attempts == [start, start]
    for failures in range(2, 9):
        ceiling = backoff_delay(failures - 1, BASE, MAX, jitter=False)
        last = api.attempts[-1]
        clock.advance(ceiling / 2 - 0.01 - (clock.now() - last))
        host.step()
        assert api.attempts[-1] == last  # too early: nothing sent
        clock.advance(ceiling / 2 + 0.01)
        host.step()
        assert len(api.attempts) == failures + 1  # due: sent, once
        assert last + ceiling / 2 <= api.attempts[-1] <= last + ceiling + 0.01
    assert backoff_delay(7, BASE, MAX, jitter=False) == MAX  # the cap was reached
    assert host.reconciler.flashed == [(DEVICE, 3)]  # the work is never done again
    api.down = False
    clock.advance(MAX)
    host.step()
    assert api.taken == [(DEVICE, {"generation": 3, "state": "flashed"})]
    # Taken: the backoff is over; the next outcome not taken is retried at the next step.
    api.down = True
    host.ask(4)
    host.step()
    host.step()
    assert api.attempts[-2:] == [clock.now(), clock.now()]


def test_a_desired_state_without_the_section_changes_nothing(tmp_path, api):
    host = Host(tmp_path, api)
    host.ask(3)
    host.step()
    host.state.desired_state = {"generation": 4}  # an older API: no "flashes" at all
    assert host.step() is False
    assert DEVICE in host.cache.load().partitions  # not forgotten


def test_an_item_it_cannot_read_is_logged_once_and_the_others_run(tmp_path, api, caplog):
    caplog.set_level(logging.ERROR, logger=__name__)
    host = Host(tmp_path, api)
    host.ask(3)
    host.state.desired_state["flashes"].append({"device": "junk"})
    host.step()
    host.step()
    said = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert said == [
        "the desired state has a flash this agent cannot read: no generation: {'device': 'junk'}"
    ]
    assert host.reconciler.flashed == [(DEVICE, 3)]
