"""The content-addressed store: verified commits, resumable partial files, the LRU bound,
pins, and what a crash or a second process leaves behind."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from exosuit.images.store import STALE_PARTIAL_SECONDS, ContentStore
from exosuit.images.verify import Mismatch


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put(store: ContentStore, data: bytes, at: float | None = None) -> str:
    """Download ``data`` into the store in one go, as the agent does; its file then
    looks last used at ``at`` (epoch seconds) when given."""
    path, had = store.partial(sha(data))
    assert had == 0
    with open(path, "ab") as f:
        f.write(data)
    final = store.commit(sha(data), len(data))
    if at is not None:
        os.utime(final, (at, at))
    return final


def test_a_committed_file_is_found_by_its_hash(tmp_path):
    store = ContentStore(str(tmp_path / "images"), 1000)
    data = b"bitstream one"
    assert store.path(sha(data)) is None
    assert sha(data) not in store
    final = put(store, data)
    assert final == str(tmp_path / "images" / sha(data))
    assert store.path(sha(data)) == final
    assert sha(data) in store
    with open(final, "rb") as f:
        assert f.read() == data
    assert [(f.sha256, f.size, f.complete) for f in store.files()] == [(sha(data), len(data), True)]


def test_a_download_resumes_from_what_the_partial_file_holds(tmp_path):
    data = b"0123456789" * 100
    store = ContentStore(str(tmp_path), 10_000)
    path, had = store.partial(sha(data))
    with open(path, "ab") as f:
        f.write(data[:333])
    # The agent dies here; a new one (a new store object) resumes.
    again = ContentStore(str(tmp_path), 10_000)
    assert again.path(sha(data)) is None  # never a partial file as the image
    path, had = again.partial(sha(data))
    assert had == 333
    with open(path, "ab") as f:
        f.write(data[had:])
    assert again.commit(sha(data), len(data)) == again.path(sha(data))


@pytest.mark.parametrize(
    "written, size, what",
    [
        (b"not the image", 13, "sha256"),
        (b"the image and more", 9, "size"),
        (b"the image", 90, "size"),
    ],
)
def test_wrong_data_is_refused_and_never_resumed(tmp_path, written, size, what):
    store = ContentStore(str(tmp_path), 1000)
    expected = sha(b"the image")
    path, _ = store.partial(expected)
    with open(path, "ab") as f:
        f.write(written)
    with pytest.raises(Mismatch) as caught:
        store.commit(expected, size)
    assert caught.value.what == what
    assert store.path(expected) is None
    assert store.partial(expected) == (path, 0)  # the next download starts over


def test_committing_without_data_fails_unless_another_process_committed_it(tmp_path):
    store = ContentStore(str(tmp_path), 1000)
    with pytest.raises(FileNotFoundError):
        store.commit(sha(b"x"), 1)
    final = put(store, b"x")
    # Another process sharing the folder (an API worker) commits the same image late.
    assert ContentStore(str(tmp_path), 1000).commit(sha(b"x"), 1) == final


def test_a_file_name_must_be_a_sha256(tmp_path):
    store = ContentStore(str(tmp_path), 1000)
    for bad in ("../etc/passwd", sha(b"x").upper(), "abc", ""):
        with pytest.raises(ValueError):
            store.path(bad)
        with pytest.raises(ValueError):
            store.partial(bad)
    with pytest.raises(ValueError):
        ContentStore(str(tmp_path), -1)


def test_least_recently_used_files_go_first_above_the_bound(tmp_path):
    store = ContentStore(str(tmp_path), 300)
    a, b, c = b"a" * 100, b"b" * 100, b"c" * 100
    put(store, a, at=1000)
    put(store, b, at=2000)
    put(store, c, at=3000)
    assert store.used_bytes() == 300
    store.path(sha(a))  # a is used now: b is the least recently used
    put(store, b"d" * 100)
    assert sha(b) not in store
    assert {f.sha256 for f in store.files()} == {sha(a), sha(c), sha(b"d" * 100)}
    assert store.used_bytes() <= 300


def test_a_pinned_file_is_never_evicted_and_goes_once_unpinned(tmp_path):
    store = ContentStore(str(tmp_path), 150)
    previous = b"p" * 100
    put(store, previous, at=1000)
    store.pin(sha(previous))
    store.pin(sha(previous))  # pins count
    put(store, b"n" * 100)
    assert sha(previous) in store  # kept for a rollback, though above the bound
    store.unpin(sha(previous))
    assert store.pinned() == {sha(previous)}
    store.unpin(sha(previous))
    assert store.pinned() == set()
    store.evict()
    assert sha(previous) not in store
    assert sha(b"n" * 100) in store
    store.unpin(sha(previous))  # more unpins than pins: harmless


def test_the_file_just_committed_stays_even_alone_above_the_bound(tmp_path):
    store = ContentStore(str(tmp_path), 0)
    put(store, b"old", at=1000)
    final = put(store, b"larger than the whole cache")
    assert os.path.exists(final)
    assert [f.path for f in store.files()] == [final]


def test_stale_partial_files_are_evicted_and_fresh_ones_kept(tmp_path):
    store = ContentStore(str(tmp_path), 10)
    stale, _ = store.partial(sha(b"stale"))
    fresh, _ = store.partial(sha(b"fresh"))
    for path in (stale, fresh):
        with open(path, "ab") as f:
            f.write(b"x" * 50)
    now = 1_000_000.0
    os.utime(stale, (now - STALE_PARTIAL_SECONDS - 1,) * 2)
    os.utime(fresh, (now - 10,) * 2)
    assert store.evict(now=now) == [stale]
    assert os.path.exists(fresh)


def test_remove_and_discard(tmp_path):
    store = ContentStore(str(tmp_path), 1000)
    put(store, b"gone")
    path, _ = store.partial(sha(b"half"))
    with open(path, "ab") as f:
        f.write(b"ha")
    store.discard(sha(b"half"))
    assert store.partial(sha(b"half"))[1] == 0
    store.remove(sha(b"gone"))
    assert store.files() == []
    store.remove(sha(b"gone"))  # twice: nothing to do


def test_files_ignores_what_is_not_the_stores(tmp_path):
    store = ContentStore(str(tmp_path / "missing"), 1000)
    assert store.files() == []
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "README").write_text("not an image")
    assert ContentStore(str(tmp_path / "other"), 1000).files() == []


def test_lock_makes_one_writer_at_a_time(tmp_path):
    store = ContentStore(str(tmp_path), 1000)
    order: list[str] = []
    held = threading.Event()

    def second() -> None:
        held.wait()
        with store.lock(sha(b"x")):
            order.append("second")

    thread = threading.Thread(target=second)
    thread.start()
    with store.lock(sha(b"x")):
        held.set()
        thread.join(timeout=0.5)  # it cannot get in while the lock is held
        assert thread.is_alive()
        order.append("first")
    thread.join(timeout=30)
    assert order == ["first", "second"]
    assert os.listdir(tmp_path) == [f"{sha(b'x')}.lock"]  # kept: the download may resume
    put(store, b"x")
    with store.lock(sha(b"x")):
        pass
    assert os.listdir(tmp_path) == [sha(b"x")]  # complete: the lock file is gone
