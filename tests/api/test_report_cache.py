"""The API's cache of host reports (exosuit/api/report_cache.py): a version read shared
only by callers that came before it started, and a bounded number of entries."""

from __future__ import annotations

import threading
import time

from exosuit.api.report_cache import ReportCache, Version


class _Counter:
    """A counter whose reads can be held until released, counting the reads."""

    def __init__(self) -> None:
        self.value = 0
        self.reads = 0
        self.hold = threading.Event()
        self.hold.set()
        self.reading = threading.Event()

    def read(self) -> int:
        self.reads += 1
        value = self.value  # the value when the read starts
        self.reading.set()
        assert self.hold.wait(30)
        return value


def _in_thread(fn):
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    return thread, out


def test_a_read_started_before_a_caller_came_is_not_its_answer():
    counter = _Counter()
    version = Version(counter.read)
    counter.hold.clear()
    first, first_out = _in_thread(version.current)
    assert counter.reading.wait(30)  # the first read has started (and read 0) …
    counter.value = 1  # … then a change commits, and a second caller comes
    counter.reading.clear()
    second, second_out = _in_thread(version.current)
    counter.hold.set()
    first.join(30)
    second.join(30)
    assert first_out == [0]
    assert second_out == [1]  # a read of its own, started after it came
    assert counter.reads == 2


def test_callers_waiting_for_one_read_share_it():
    counter = _Counter()
    version = Version(counter.read)
    counter.hold.clear()
    first, _ = _in_thread(version.current)
    assert counter.reading.wait(30)
    waiting = [_in_thread(version.current) for _ in range(5)]
    deadline = time.monotonic() + 30
    while version.waiting < 5:  # every one of them waiting for the read
        assert time.monotonic() < deadline
        time.sleep(0.01)
    counter.value = 7
    counter.hold.set()
    first.join(30)
    for thread, _ in waiting:
        thread.join(30)
    assert [out for _, out in waiting] == [[7]] * 5
    # The first caller's read, then one read for the five that waited behind it.
    assert counter.reads == 2


def test_a_failed_read_leaves_the_next_caller_to_read():
    calls = []

    def read() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("database away")
        return 3

    version = Version(read)
    try:
        version.current()
    except ConnectionError:
        pass
    assert version.current() == 3


def test_an_entry_is_used_only_at_its_version():
    counter = _Counter()
    cache: ReportCache[str] = ReportCache(Version(counter.read), max_entries=10)
    cache.put("h1", 0, "read at 0")
    assert cache.get("h1") == "read at 0"
    counter.value = 1
    assert cache.get("h1") is None
    assert cache.get("h1") is None  # forgotten: read again
    cache.put("h1", 1, "read at 1")
    assert cache.get("h1") == "read at 1"
    cache.forget("h1")
    assert cache.get("h1") is None
    assert cache.get("never") is None


def test_entries_are_bounded_the_oldest_going_first():
    cache: ReportCache[int] = ReportCache(Version(lambda: 0), max_entries=2)
    for i, host in enumerate(("a", "b", "c")):
        cache.put(host, 0, i)
    assert len(cache) == 2
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, 1, 2)
    nothing: ReportCache[int] = ReportCache(Version(lambda: 0), max_entries=0)
    nothing.put("a", 0, 1)
    assert len(nothing) == 0


def test_callers_waiting_for_a_read_that_failed_get_the_next_one():
    counter = _Counter()
    failures = []

    def read() -> int:
        value = counter.read()
        if counter.reads == 2:  # the read the waiters wait for
            failures.append(1)
            raise ConnectionError("database away")
        return value

    version = Version(read)
    counter.hold.clear()
    first, first_out = _in_thread(version.current)
    assert counter.reading.wait(30)

    def _current() -> int | None:
        try:
            return version.current()
        except ConnectionError:
            return None  # the caller that ran the failed read gets its error

    waiting = [_in_thread(_current) for _ in range(3)]
    deadline = time.monotonic() + 30
    while version.waiting < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    counter.value = 5
    counter.hold.set()
    first.join(30)
    for thread, _ in waiting:
        thread.join(30)
    assert first_out == [0]
    # The second read failed for the one that ran it; the two others got the third.
    assert failures == [1]
    assert sorted((out for _, out in waiting), key=str) == [[5], [5], [None]]
    assert counter.reads == 3
