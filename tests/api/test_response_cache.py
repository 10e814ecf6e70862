"""The API's response cache: entries by key and version, forgotten when too old, bounded."""

from __future__ import annotations

from exosuit.api.response_cache import ResponseCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_keeps_its_body_and_version():
    cache = ResponseCache(clock=Clock())
    assert cache.get("k") is None
    cache.put("k", 7, b"body")
    entry = cache.get("k")
    assert entry is not None and (entry.version, entry.body) == (7, b"body")
    cache.put("k", 8, b"newer")
    entry = cache.get("k")
    assert entry is not None and (entry.version, entry.body) == (8, b"newer")
    assert cache.get("other") is None


def test_an_entry_older_than_max_age_is_forgotten():
    clock = Clock()
    cache = ResponseCache(max_age=30.0, clock=clock)
    cache.put("k", 1, b"body")
    clock.now += 30.0
    assert cache.get("k") is not None
    clock.now += 0.5
    assert cache.get("k") is None
    cache.put("k", 1, b"body")  # made again: fresh again
    assert cache.get("k") is not None


def test_memory_is_bounded_by_entries_and_bytes():
    cache = ResponseCache(max_entries=2, max_bytes=10, clock=Clock())
    cache.put("a", 1, b"12345")
    cache.put("b", 1, b"12345")
    assert cache.get("a") and cache.get("b")
    cache.put("c", 1, b"1")  # a third entry: the others go
    assert cache.get("a") is None and cache.get("b") is None and cache.get("c")
    cache.put("d", 1, b"1234567890")  # 11 bytes in all: the others go
    assert cache.get("c") is None and cache.get("d")
    cache.put("e", 1, b"12345678901")  # larger than the whole cache: not kept
    assert cache.get("e") is None and cache.get("d")
    cache.put("d", 2, b"123456789")  # replacing an entry frees its bytes first
    assert cache.get("d").version == 2
    cache.put("f", 1, b"1")
    assert cache.get("d") and cache.get("f")
