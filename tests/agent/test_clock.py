"""The agent's clocks: the fake one runs virtual time, the real one waits for real."""

from __future__ import annotations

import threading
import time

from exosuit.agent.clock import FakeClock, SystemClock


def test_a_fake_wait_passes_its_time_at_once():
    clock = FakeClock(start=100.0)
    assert clock.wait(threading.Event(), 30) is False
    assert clock.now() == 130.0
    assert clock.waits == [30]


def test_a_fake_wait_on_a_set_event_returns_at_once_without_time_passing():
    clock, event = FakeClock(start=100.0), threading.Event()
    event.set()
    assert clock.wait(event, 30) is True
    assert clock.now() == 100.0


def test_callbacks_run_in_order_at_their_time_and_one_that_sets_the_event_ends_the_wait():
    clock, event = FakeClock(start=0.0), threading.Event()
    seen = []
    clock.call_at(20, lambda: (seen.append(("set", clock.now())), event.set()))
    clock.call_at(5, lambda: seen.append(("first", clock.now())))
    clock.call_at(5, lambda: seen.append(("second", clock.now())))
    clock.call_at(50, lambda: seen.append(("later", clock.now())))
    assert clock.wait(event, 60) is True
    assert seen == [("first", 5), ("second", 5), ("set", 20)]
    assert clock.now() == 20
    event.clear()
    clock.advance(100)
    assert seen[-1] == ("later", 50) and clock.now() == 120


def test_call_later_counts_from_now():
    clock, event = FakeClock(start=10.0), threading.Event()
    clock.call_later(5, event.set)
    assert clock.wait(event, 3) is False and clock.now() == 13
    assert clock.wait(event, 3) is True and clock.now() == 15


def test_the_system_clock_waits_on_the_event():
    clock, event = SystemClock(), threading.Event()
    assert clock.wait(event, 0) is False
    assert clock.wait(event, -1) is False  # a wait already over
    event.set()
    assert clock.wait(event, 3600) is True  # set: at once
    assert abs(clock.now() - time.time()) < 5
