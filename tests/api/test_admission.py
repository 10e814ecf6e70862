"""Admission control (exosuit/api/admission.py): slots, the wait for one, the 429."""

from __future__ import annotations

import random
import threading

import pytest

from exosuit.api import wsgi
from exosuit.api.admission import RETRY_AFTER_MAX, RETRY_AFTER_MIN, Admission, retry_after

# Long enough for any machine: a wait that should end ends long before it.
GENEROUS = 60.0
MESSAGE = "Busy; retry later."
CODE = "exosuit.test.busy"


def admission(concurrency: int, wait: float, **kw) -> Admission:
    return Admission(concurrency, wait, message=MESSAGE, code=CODE, **kw)


def test_concurrency_requests_run_at_once_and_the_next_one_is_refused_with_429():
    gate = admission(2, 0)
    with gate.slot(), gate.slot():
        with pytest.raises(wsgi.ApiError) as refused:
            with gate.slot():
                pytest.fail("a third slot was given")
    error = refused.value
    assert (error.status, error.code, error.message) == (429, CODE, MESSAGE)
    [(name, value)] = error.headers
    assert name == "Retry-After"
    assert RETRY_AFTER_MIN <= int(value) <= RETRY_AFTER_MAX


def test_a_slot_comes_free_when_its_block_ends_however_it_ends():
    gate = admission(1, 0)
    with gate.slot():
        pass
    with pytest.raises(RuntimeError, match="handler failed"):
        with gate.slot():
            raise RuntimeError("handler failed")
    with pytest.raises(wsgi.ApiError):  # a refusal holds no slot either
        with gate.slot(), gate.slot():
            pass
    with gate.slot():  # the one slot is free again
        pass


def test_a_request_waits_for_the_slot_another_one_frees():
    gate = admission(1, GENEROUS)
    asking = threading.Event()
    outcome: list[str] = []

    def second_request() -> None:
        asking.set()
        try:
            with gate.slot():
                outcome.append("admitted")
        except wsgi.ApiError as error:
            outcome.append(f"refused {error.status}")

    with gate.slot():
        waiter = threading.Thread(target=second_request)
        waiter.start()
        assert asking.wait(GENEROUS)
        assert outcome == []  # it cannot have a slot while this block holds the only one
    waiter.join(GENEROUS)
    assert not waiter.is_alive()
    assert outcome == ["admitted"]


def test_a_request_is_refused_when_no_slot_comes_free_within_its_wait():
    gate = admission(1, 0.05)
    refused = threading.Event()

    def second_request() -> None:
        try:
            with gate.slot():
                pass
        except wsgi.ApiError:
            refused.set()

    with gate.slot():
        waiter = threading.Thread(target=second_request)
        waiter.start()
        # The slot is held until the refusal is seen: the refusal came from the wait.
        assert refused.wait(GENEROUS)
    waiter.join(GENEROUS)


def test_retry_after_spreads_over_the_whole_range_of_seconds():
    rng = random.Random(5)
    values = [int(retry_after(rng)) for _ in range(300)]
    assert set(values) == set(range(RETRY_AFTER_MIN, RETRY_AFTER_MAX + 1))


def test_a_seeded_rng_makes_the_retry_after_of_refusals_reproducible():
    def refusals(seed: int) -> list[str]:
        gate = admission(1, 0, rng=random.Random(seed))
        out = []
        with gate.slot():
            for _ in range(20):
                with pytest.raises(wsgi.ApiError) as refused:
                    with gate.slot():
                        pass
                out.append(dict(refused.value.headers)["Retry-After"])
        return out

    assert refusals(11) == refusals(11)
    assert len(set(refusals(11))) > 1


@pytest.mark.parametrize(
    ("concurrency", "wait"),
    [pytest.param(0, 1.0, id="no-slot"), pytest.param(1, -1.0, id="negative-wait")],
)
def test_an_admission_without_a_slot_or_with_a_negative_wait_is_refused(concurrency, wait):
    with pytest.raises(ValueError, match="admission needs"):
        admission(concurrency, wait)
