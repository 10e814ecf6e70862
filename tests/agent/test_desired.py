"""The agent loop and the desired state of issue 11: driver overrides applied without a
restart (a driver disabled on purpose loses its devices at once), "discover now" after a
random delay within the spread, observed_generation and usage in every report.

The inventory goes to the real API (which checks the schema and the hash, drivers
included, and applies it); the desired state's ``drivers`` and ``discovery``, which the
API does not serve yet, come from ``Overlay``, a WSGI middleware standing in for that
part of the API only. Every agent here waits on a FakeClock.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest
import webob

from exosuit import schemas
from exosuit.agent.cache import AgentCache
from exosuit.agent.clock import FakeClock
from exosuit.agent.plugins import config_digest
from exosuit.agent.programs import ProgramReconciler
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import Agent
from exosuit.agent.transport import WsgiSession
from exosuit.api.deploy import loadapp
from exosuit.images.store import ContentStore
from tests.agent.small_drivers import DEFAULTS, Bench, driver_set

HOST = "desired-host"
ENDPOINT = "http://api.test"
SEED = 8


class Overlay:
    """The real API, its desired state extended with what the test asks: the operator's
    driver overrides and discovery requests (each bumps the generation, as the API
    will). A discovery is cleared once a report at or past its generation arrives."""

    def __init__(self, app, clock: FakeClock) -> None:
        self.app = app
        self.clock = clock
        self.generation = 0
        self.drivers: dict = {}
        self.discovery: dict | None = None
        self.inventories: list[dict] = []
        self.times: list[float] = []
        self.statuses: list[int] = []

    def set_drivers(self, drivers: dict) -> None:
        self.drivers = drivers
        self.generation += 1

    def discover(self, spread: float) -> None:
        self.generation += 1
        self.discovery = {"generation": self.generation, "spread": spread}

    def desired_state(self) -> dict:
        return {
            "generation": self.generation,
            "programs": [],
            "discovery": self.discovery,
            "drivers": self.drivers,
            "activations": [],
        }

    @webob.dec.wsgify
    def __call__(self, req: webob.Request) -> webob.Response:
        if req.path == f"/agent/v1/hosts/{HOST}/desired_state":
            if req.headers.get("If-None-Match") == f'"{self.generation}"':
                return webob.Response(status=304)
            response = webob.Response(json_body=self.desired_state())
            response.headers["ETag"] = f'"{self.generation}"'
            return response
        response = req.get_response(self.app)
        if req.path == f"/agent/v1/hosts/{HOST}/inventory":
            body = json.loads(req.body)
            self.inventories.append(body)
            self.times.append(self.clock.now())
            self.statuses.append(response.status_code)
            observed = body.get("observed_generation")
            if self.discovery and observed is not None and observed >= self.discovery["generation"]:
                self.discovery = None
            if response.status_code == 200:
                answer = json.loads(response.body)
                answer["desired_state"] = self.desired_state()
                response = webob.Response(json_body=answer)
        return response


@pytest.fixture
def app(conf, sqlite_database):
    return loadapp(conf, sqlite_database)


class Host:
    def __init__(self, tmp_path, app, drivers, enabled, **agent_kw) -> None:
        self.clock = FakeClock()
        self.bench = Bench()
        self.overlay = Overlay(app, self.clock)
        self.session = WsgiSession(self.overlay)
        self.plugins = driver_set(self.bench, drivers, enabled)
        self.tmp_path = tmp_path
        self.agent_kw = agent_kw
        self.agent = self.start()

    def start(self) -> Agent:
        """An agent process on this host's cache (a restart, when called again)."""
        cache = AgentCache(str(self.tmp_path / "state"))
        programs = ProgramReconciler(
            HOST,
            self.plugins,
            self.session,
            ENDPOINT,
            ContentStore(str(self.tmp_path / "images"), 10**6),
            cache,
            clock=self.clock,
            interval=5.0,
        )
        kw = {"interval": 60, "jitter": 0, "removal_grace": 120, **self.agent_kw}
        self.agent = Agent(
            HOST,
            self.plugins,
            Reporter(self.session, ENDPOINT, HOST),
            cache,
            clock=self.clock,
            rng=random.Random(SEED),
            reconcilers=[programs],
            **kw,
        )
        return self.agent

    def at(self, offset: float, action) -> None:
        self.clock.call_at(self.start_time + offset, action)

    @property
    def start_time(self) -> float:
        return self.__dict__.setdefault("_start", self.clock.now())

    def run_until(self, offset: float) -> None:
        self.at(offset, self.agent.stop)
        self.agent.run()


def _addresses(body: dict) -> list[str]:
    return [d["pci_address"] for d in body["devices"]]


def _drivers(body: dict) -> dict[str, dict]:
    return {d["name"]: d for d in body["drivers"]}


def test_drivers_disabled_enabled_and_reconfigured_without_a_restart(tmp_path, app, sqlite_api):
    host = Host(
        tmp_path, app, {"alpha": ("counted", "0a"), "beta": ("counted", "0b")}, ["alpha", "beta"]
    )
    overlay = host.overlay
    start = host.start_time
    host.at(12, lambda: overlay.set_drivers({"beta": {"enabled": False}}))
    host.at(112, lambda: overlay.set_drivers({"beta": {"enabled": True, "config": {"count": "3"}}}))
    in_api: list[list[str]] = []

    def look() -> None:
        devices = sqlite_api.get("/v2/devices", version="2.4").json["devices"]
        in_api.append(sorted(d["pci_address"] for d in devices))

    host.at(16, look)  # just after the report of the disabled driver
    host.run_until(200)
    look()
    assert in_api == [
        ["0000:0a:00.0"],
        ["0000:0a:00.0", "0000:0b:00.0", "0000:0b:01.0", "0000:0b:02.0"],
    ]
    assert set(overlay.statuses) == {200}  # the real API took every report
    # At start; at the first poll (every 5 s) after each change; a minute after each.
    assert overlay.times == [start, start + 15, start + 75, start + 115, start + 175]
    first, disabled, _, enabled, _ = overlay.inventories
    assert _addresses(first) == ["0000:0a:00.0", "0000:0b:00.0"]
    assert "observed_generation" not in first
    # Disabled on purpose: its device is gone at once (no removal grace, no missing_since).
    assert _addresses(disabled) == ["0000:0a:00.0"]
    assert all("missing_since" not in d for d in disabled["devices"])
    assert disabled["observed_generation"] == 1
    assert _drivers(disabled)["beta"] == {
        "name": "beta",
        "version": "4.0",
        "enabled": False,
        "config_digest": None,
        "found": 0,
        "error": None,
    }
    # Enabled again with an option: three devices, the options' digest reported.
    assert _addresses(enabled) == ["0000:0a:00.0", "0000:0b:00.0", "0000:0b:01.0", "0000:0b:02.0"]
    assert enabled["observed_generation"] == 2
    beta = _drivers(enabled)["beta"]
    assert (beta["enabled"], beta["found"]) == (True, 3)
    assert beta["config_digest"] == config_digest({**DEFAULTS, "count": 3})
    assert _drivers(first)["beta"]["config_digest"] == config_digest(DEFAULTS)
    assert host.plugins.settings("beta")["count"] == 3
    # The agent's programs see the rebuilt drivers too.
    (programs,) = host.agent.reconcilers
    assert programs.drivers == host.plugins.drivers
    # The generation survives a restart: no report at once for it again.
    assert host.agent.cache.load().observed_generation == 2


def test_a_generation_that_changes_no_driver_rides_on_the_next_report(tmp_path, app):
    host = Host(tmp_path, app, {"alpha": ("counted", "0a")}, ["alpha"])
    overlay = host.overlay
    start = host.start_time

    def program_queued():  # the API bumps the generation for a program, say
        overlay.generation += 1

    host.at(12, program_queued)
    host.run_until(100)
    assert overlay.times == [start, start + 60]
    assert "observed_generation" not in overlay.inventories[0]
    assert overlay.inventories[1]["observed_generation"] == 1
    assert "devices" not in overlay.inventories[1]  # unchanged: the hash, and the rest


def test_discover_now_waits_a_random_delay_within_the_spread(tmp_path, app):
    host = Host(tmp_path, app, {"alpha": ("counted", "0a")}, ["alpha"])
    overlay = host.overlay
    start = host.start_time
    host.at(12, lambda: overlay.discover(spread=30))
    host.run_until(100)
    # The same draw as the agent's: its rng seeded alike, nothing else drawn before.
    delay = random.Random(SEED).uniform(0, 30)
    assert 0 < delay < 30
    assert overlay.times == [start, pytest.approx(start + 15 + delay), start + 15 + delay + 60]
    # Waited through the clock, to the moment due (between two polls of the desired state).
    ends = list(itertools.accumulate(host.clock.waits))
    assert pytest.approx(15 + delay) in ends
    answer = overlay.inventories[1]
    assert answer["observed_generation"] == 1
    assert overlay.discovery is None  # the API has its answer
    driver = host.plugins.drivers[0]
    # One discovery at start, one asked for, one at the interval.
    assert driver.discoveries == 3

    # A restart does not discover again for a request already answered.
    agent = host.start()
    host.clock.call_later(100, agent.stop)
    agent.run()
    assert len(overlay.inventories) == 5  # at start and a minute later only
    assert driver.discoveries == 5


def test_discoveries_of_a_fleet_spread_over_the_spread(tmp_path, app):
    """Agents asked together discover within the spread, not together."""
    delays = []
    for seed in range(20):
        clock = FakeClock()
        bench = Bench()
        plugins = driver_set(bench, {"alpha": ("counted", "0a")}, ["alpha"])
        agent = Agent(
            HOST,
            plugins,
            Reporter(WsgiSession(app), ENDPOINT, HOST),
            AgentCache(str(tmp_path / str(seed))),
            jitter=0,
            clock=clock,
            rng=random.Random(seed),
        )
        agent.state.desired_state = {
            "generation": 4,
            "discovery": {"generation": 4, "spread": 30.0},
        }
        agent.state.observed_generation = 3
        assert agent.apply_desired_state() is False  # not due yet
        due = agent._discovery_due
        assert due is not None
        clock.advance(due - clock.now())
        assert agent.apply_desired_state() is True
        assert agent.state.observed_generation == 4
        delays.append(due - 1_000_000.0)
    assert all(0 <= d <= 30 for d in delays)
    assert max(delays) - min(delays) > 15


def test_unchanged_reports_carry_usage_and_the_observed_generation(tmp_path, app):
    host = Host(tmp_path, app, {"meter": ("metered", "0a")}, ["meter"])
    host.bench.usage = {"utilization_percent": 40.0, "memory_used_bytes": 1024}
    overlay = host.overlay
    host.at(12, lambda: overlay.set_drivers({"meter": {"enabled": True}}))

    def busier():
        host.bench.usage = {"utilization_percent": 90.0, "memory_used_bytes": 4096}

    host.at(30, busier)
    host.run_until(100)
    identity = schemas.device_identity(overlay.inventories[0]["devices"][0]["controlpath_id"])
    first, applied, later = overlay.inventories
    assert set(overlay.statuses) == {200}
    assert first["usage"] == {identity: {"utilization_percent": 40.0, "memory_used_bytes": 1024}}
    # The report for the generation and the next one are hash-only, usage and all.
    assert "devices" not in applied and "devices" not in later
    assert applied["usage"] == first["usage"]
    assert applied["observed_generation"] == 1
    assert later["usage"] == {identity: {"utilization_percent": 90.0, "memory_used_bytes": 4096}}
    assert later["observed_generation"] == 1
    assert later["hash"] == applied["hash"]
