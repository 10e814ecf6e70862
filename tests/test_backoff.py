"""The one backoff formula: doubling from ``base``, the cap, the jitter bounds."""

from __future__ import annotations

import random

import pytest

from exosuit.backoff import backoff_delay


@pytest.mark.parametrize(
    ("failures", "base", "maximum", "expected"),
    [
        pytest.param(0, 1.0, 60.0, 0.0, id="nothing-failed"),
        pytest.param(-3, 1.0, 60.0, 0.0, id="negative-count"),
        pytest.param(1, 1.0, 60.0, 1.0, id="first-failure-waits-base"),
        pytest.param(2, 1.0, 60.0, 2.0, id="second-doubles"),
        pytest.param(3, 1.0, 60.0, 4.0, id="third-doubles-again"),
        pytest.param(4, 0.5, 60.0, 4.0, id="fractional-base"),
        pytest.param(6, 1.0, 60.0, 32.0, id="just-below-the-cap"),
        pytest.param(7, 1.0, 60.0, 60.0, id="capped"),
        pytest.param(1, 5.0, 3.0, 3.0, id="base-above-the-cap"),
        pytest.param(1, 0.0, 60.0, 0.0, id="zero-base"),
        pytest.param(63, 1.0, float("inf"), 2.0**62, id="doubling-stops-at-2-62"),
        pytest.param(10**6, 1.0, 60.0, 60.0, id="a-million-failures"),
        pytest.param(10**100, 2.0, 300.0, 300.0, id="a-googol-of-failures"),
        pytest.param(10**100, 1e300, 7.0, 7.0, id="float-overflow-is-capped"),
    ],
)
def test_without_jitter_the_delay_doubles_up_to_the_cap(failures, base, maximum, expected):
    assert backoff_delay(failures, base, maximum, jitter=False) == expected


@pytest.mark.parametrize(
    ("base", "maximum"),
    [
        pytest.param(1.0, 60.0, id="agent-reports"),
        pytest.param(2.0, 300.0, id="conductor-jobs"),
        pytest.param(0.05, 0.2, id="small-cap"),
    ],
)
def test_jitter_stays_between_half_and_the_whole_delay(base, maximum):
    rng = random.Random(1234)
    for failures in range(1, 40):
        ceiling = backoff_delay(failures, base, maximum, jitter=False)
        delays = [backoff_delay(failures, base, maximum, rng=rng) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), failures
        assert max(delays) <= maximum
        # Spread over the range, not stuck at one end.
        assert min(delays) < ceiling * 0.6 and max(delays) > ceiling * 0.9


def test_a_seeded_rng_makes_the_delays_reproducible():
    first = [backoff_delay(n, 1.0, 60.0, rng=random.Random(7)) for n in range(1, 10)]
    again = [backoff_delay(n, 1.0, 60.0, rng=random.Random(7)) for n in range(1, 10)]
    assert first == again
    assert first != [backoff_delay(n, 1.0, 60.0, jitter=False) for n in range(1, 10)]


def test_nothing_failed_means_no_wait_even_with_jitter():
    assert backoff_delay(0, 1.0, 60.0, rng=random.Random(1)) == 0.0


@pytest.mark.parametrize(
    ("base", "maximum"),
    [
        pytest.param(-1.0, 60.0, id="negative-base"),
        pytest.param(1.0, -60.0, id="negative-maximum"),
    ],
)
def test_a_negative_base_or_maximum_is_refused(base, maximum):
    with pytest.raises(ValueError, match="must not be negative"):
        backoff_delay(1, base, maximum)
