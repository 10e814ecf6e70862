"""Exponential backoff: the one formula every retry loop of Exosuit uses.

A bottom-layer module (it imports nothing of Exosuit), so any layer may use it: the
agent's reports and Keystone catalog wait, the conductor's job retries, the Placement
sync.
"""

from __future__ import annotations

import random

__all__ = ["backoff_delay"]

# 2 ** 62 is exact as a float and far beyond any cap in use: doubling stops there, so a
# huge failure count costs nothing and never overflows.
_MAX_DOUBLINGS = 62


def backoff_delay(
    failures: int,
    base: float,
    maximum: float,
    *,
    jitter: bool = True,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait after ``failures`` consecutive failures.

    - ``failures < 1`` (nothing failed yet): ``0.0``.
    - Otherwise ``base * 2 ** (failures - 1)`` capped at ``maximum``: ``base`` after
      the first failure, twice that after the second, and so on up to ``maximum``.
    - ``jitter`` (the default): that delay scaled by a random factor in [0.5, 1], so
      that clients which failed together do not retry together; the result lies in
      ``[delay / 2, delay]``. ``jitter=False``: the delay itself.

    ``rng`` is the random source (a seeded ``random.Random`` makes the result
    reproducible); by default the ``random`` module's. ``base`` and ``maximum`` must
    not be negative (ValueError).
    """
    if base < 0 or maximum < 0:
        raise ValueError(f"backoff base and maximum must not be negative: {base}, {maximum}")
    if failures < 1:
        return 0.0
    delay = min(maximum, base * 2.0 ** min(failures - 1, _MAX_DOUBLINGS))
    if not jitter:
        return delay
    uniform = rng.uniform if rng is not None else random.uniform
    return delay * uniform(0.5, 1.0)
