"""The agent names the desired state it holds in every report (``Exosuit-Desired-Generation``,
issue 16) and keeps it when the answer leaves it out; against the real API over HTTP.
"""

from __future__ import annotations

import io
import json
import random

import pytest
from keystoneauth1 import session as ks_session

from exosuit.agent.cache import AgentCache
from exosuit.agent.clock import FakeClock
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import Agent
from exosuit.api.deploy import loadapp
from exosuit.db import desired_state
from tests.helpers.inventory import fpga
from tests.helpers.live import serve_wsgi

HOST = "generation-host"


class Wire:
    """WSGI middleware keeping each inventory report's header and answer; with
    ``old_server``, it drops the header first (an API from before the header)."""

    def __init__(self, app, *, old_server: bool = False) -> None:
        self.app = app
        self.old_server = old_server
        self.headers: list[str | None] = []
        self.answers: list[dict] = []

    def __call__(self, environ, start_response):
        if not environ["PATH_INFO"].endswith("/inventory"):
            return self.app(environ, start_response)
        self.headers.append(environ.get("HTTP_EXOSUIT_DESIRED_GENERATION"))
        if self.old_server:
            environ.pop("HTTP_EXOSUIT_DESIRED_GENERATION", None)
        body = b"".join(self.app(environ, start_response))
        self.answers.append(json.loads(body))
        return io.BytesIO(body)


class Static:
    name = "static"

    def discover(self):
        return [fpga("0000:0c:00.0")]


def make_agent(url, tmp_path) -> Agent:
    reporter = Reporter(ks_session.Session(), url, HOST, timeout=5)
    return Agent(
        HOST,
        [Static()],
        reporter,
        AgentCache(str(tmp_path / "cache")),
        jitter=0,
        clock=FakeClock(),
        rng=random.Random(8),
    )


@pytest.fixture
def app(conf, sqlite_database):
    return loadapp(conf, sqlite_database)


def test_the_agent_names_what_it_holds_and_keeps_it(app, sqlite_database, tmp_path):
    wire = Wire(app)
    with serve_wsgi(wire) as url:
        agent = make_agent(url, tmp_path)
        for _ in range(2):
            assert agent.deliver(agent.snapshot()).kind == "ok"
        # A new generation (the operator asked something of the host) comes in the
        # next answer, which the agent keeps; then it is left out again.
        sqlite_database.write(desired_state.bump, [HOST])
        for _ in range(2):
            assert agent.deliver(agent.snapshot()).kind == "ok"
        # A restarted agent holds what its cache kept.
        again = make_agent(url, tmp_path)
        assert again.deliver(again.snapshot()).kind == "ok"
    assert wire.headers == [None, "0", "0", "1", "1"]
    generations = [a.get("desired_state", {}).get("generation") for a in wire.answers]
    assert generations == [0, None, 1, None, None]
    assert agent.state.desired_state["generation"] == 1
    assert again.state.desired_state["generation"] == 1
    assert set(agent.state.desired_state) >= {"programs", "activations", "containers"}


def test_an_api_that_ignores_the_header_always_answers_with_the_state(app, tmp_path):
    wire = Wire(app, old_server=True)
    with serve_wsgi(wire) as url:
        agent = make_agent(url, tmp_path)
        for _ in range(3):
            assert agent.deliver(agent.snapshot()).kind == "ok"
    assert wire.headers == [None, "0", "0"]
    assert all(a["desired_state"]["generation"] == 0 for a in wire.answers)
    assert agent.state.desired_state["generation"] == 0
