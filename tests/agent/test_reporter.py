"""The reporter's reading of Retry-After: seconds or an HTTP date, counted from the
clock the agent is given (exosuit/agent/clock.py), never from the machine's time."""

from __future__ import annotations

import email.utils

import pytest

from exosuit.agent.clock import FakeClock
from exosuit.agent.reporter import Reporter, retry_after_seconds
from exosuit.agent.transport import WsgiSession

NOW = 1_700_000_000.0


def http_date(epoch: float) -> str:
    return email.utils.formatdate(epoch, usegmt=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("3", 3.0, id="seconds"),
        pytest.param("0", 0.0, id="zero"),
        pytest.param("1.5", 1.5, id="fraction"),
        pytest.param("-4", 0.0, id="negative-is-now"),
        pytest.param(http_date(NOW + 42), 42.0, id="date-ahead"),
        pytest.param(http_date(NOW - 600), 0.0, id="date-past-is-now"),
        pytest.param(None, None, id="absent"),
        pytest.param("", None, id="empty"),
        pytest.param("soon", None, id="unreadable"),
        pytest.param("inf", None, id="infinite"),
        pytest.param("nan", None, id="not-a-number"),
    ],
)
def test_retry_after_seconds(value, expected):
    assert retry_after_seconds(value, NOW) == expected


def busy_until(epoch: float):
    """A WSGI app answering every request 429 with Retry-After: the HTTP date ``epoch``."""

    def app(environ, start_response):
        environ["wsgi.input"].read()
        start_response(
            "429 Too Many Requests",
            [("Retry-After", http_date(epoch)), ("Content-Type", "text/plain")],
        )
        return [b"busy"]

    return app


def test_the_reporter_counts_an_http_date_from_its_clock():
    clock = FakeClock(start=NOW)
    reporter = Reporter(WsgiSession(busy_until(NOW + 90)), "http://api.test", "host1", clock=clock)
    body = {"schema_version": 1, "hash": "0" * 64}
    outcome = reporter.report(body)
    assert (outcome.kind, outcome.retry_after) == ("retry", 90.0)
    clock.advance(60)  # virtual time moves on: so does the wait left
    assert reporter.report(body).retry_after == 30.0
