"""A content-addressed file store with a size bound: the agent's image cache (and the
API's cache of Glance images).

Files are named by the SHA-256 of their content, in one folder::

    <folder>/<sha256>          complete: written whole, verified, then renamed into place
    <folder>/<sha256>.part     a download in progress (appended to; resumable)
    <folder>/<sha256>.lock     taken by ``lock(sha256)`` while one writer downloads (removed
                               once the file is complete)

Only ``commit`` makes a complete file, and only after the partial file's size and
SHA-256 matched: it fsyncs the data, renames it into place and fsyncs the folder, so
a crash at any moment leaves either no complete file or a whole, verified one (never
part of one). A partial file survives a crash and is resumed from its length; a
partial file that turns out wrong is removed by ``commit``, so the next download
starts again from nothing.

Bounded: above ``max_bytes`` (complete and partial files together), ``commit``
removes the least recently used complete files first (``path`` marks a file used),
then partial files nobody wrote to for ``STALE_PARTIAL_SECONDS``. It never removes a
pinned file (``pin``: the image a device ran before, needed for a rollback) nor the
file it has just committed: a store may stay above its bound while those need the
room.

Pure: files only, no HTTP, no database. Several processes may share one folder (the
API's workers): renames are atomic, and ``lock`` serialises the writers of one image.
Pins belong to the ``ContentStore`` object that took them.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import fcntl
import os
import re
import time
from collections.abc import Iterator

from exosuit.files import publish
from exosuit.images import verify

__all__ = ["STALE_PARTIAL_SECONDS", "ContentStore", "StoredFile"]

# A partial file untouched this long belongs to a download that died: it may go.
STALE_PARTIAL_SECONDS = 3600.0
PARTIAL_SUFFIX = ".part"
LOCK_SUFFIX = ".lock"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclasses.dataclass(frozen=True)
class StoredFile:
    """One file of the store, as ``files()`` lists it."""

    sha256: str
    path: str
    size: int
    used_at: float  # when it was last committed or looked up (its mtime)
    complete: bool


class ContentStore:
    """Files named by SHA-256 under ``folder``, at most ``max_bytes`` of them (LRU)."""

    def __init__(self, folder: str, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 or more, not {max_bytes}")
        self.folder = folder
        self.max_bytes = max_bytes
        self._pins: collections.Counter[str] = collections.Counter()

    # -- reading -------------------------------------------------------------------------

    def path(self, sha256: str) -> str | None:
        """The complete, verified file of ``sha256``, marked used now; None when absent."""
        path = self._complete(sha256)
        try:
            os.utime(path)
        except FileNotFoundError:
            return None
        return path

    def __contains__(self, sha256: object) -> bool:
        return isinstance(sha256, str) and os.path.isfile(self._complete(sha256))

    def files(self) -> list[StoredFile]:
        """Every complete and partial file, least recently used first."""
        found = []
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        for name in names:
            sha256, complete = name, True
            if name.endswith(PARTIAL_SUFFIX):
                sha256, complete = name[: -len(PARTIAL_SUFFIX)], False
            if not _SHA256.match(sha256):
                continue  # lock files, and anything that is not ours
            path = os.path.join(self.folder, name)
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                continue  # removed meanwhile (another process committed or evicted it)
            found.append(StoredFile(sha256, path, stat.st_size, stat.st_mtime, complete))
        return sorted(found, key=lambda f: (f.used_at, f.sha256))

    def used_bytes(self) -> int:
        return sum(f.size for f in self.files())

    # -- writing -------------------------------------------------------------------------

    def partial(self, sha256: str) -> tuple[str, int]:
        """Where to write (append) the data of ``sha256``, and how many bytes it already
        holds (0: start from the beginning; N: resume with ``Range: bytes=N-``)."""
        os.makedirs(self.folder, exist_ok=True)
        path = self._complete(sha256) + PARTIAL_SUFFIX
        try:
            return path, os.path.getsize(path)
        except FileNotFoundError:
            return path, 0

    def discard(self, sha256: str) -> None:
        """Forget a partial download (its data is wrong, or longer than the image)."""
        _unlink(self._complete(sha256) + PARTIAL_SUFFIX)

    def commit(self, sha256: str, size: int | None) -> str:
        """Verify the partial file of ``sha256`` (``size`` bytes, that hash; a size of
        None is not checked: the hash alone), make it the complete file and return its
        path; then keep the store within its bound.

        Raises ``exosuit.images.verify.Mismatch`` (and removes the partial file) when
        the data is wrong, and FileNotFoundError when there is no partial file.
        Committing what another process committed first returns the complete file."""
        final = self._complete(sha256)
        partial = final + PARTIAL_SUFFIX
        try:
            verify.verify_file(partial, size=size, sha256=sha256)
        except FileNotFoundError:
            if os.path.isfile(final):
                return self.path(sha256) or final
            raise
        except verify.Mismatch:
            _unlink(partial)  # wrong data is never resumed: the next try starts over
            raise
        # The partial file is the temporary file (resumed across restarts): fsync, rename
        # into place, fsync of the folder (exosuit/files.py).
        publish(partial, final)
        os.utime(final)
        self.evict(keep=(sha256,))
        return final

    def remove(self, sha256: str) -> None:
        """Remove the complete and the partial file of ``sha256`` (pinned or not)."""
        _unlink(self._complete(sha256))
        self.discard(sha256)

    @contextlib.contextmanager
    def lock(self, sha256: str) -> Iterator[None]:
        """Be the one writer of ``sha256``'s partial file (across processes) meanwhile."""
        os.makedirs(self.folder, exist_ok=True)
        final = self._complete(sha256)
        fd = os.open(final + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            # Once the file is complete no writer needs the lock (a writer looks for the
            # complete file first, whichever lock file it got): it goes. Else it stays
            # for the download that resumes.
            if os.path.isfile(final):
                _unlink(final + LOCK_SUFFIX)
            os.close(fd)  # closing releases the flock

    # -- the bound -----------------------------------------------------------------------

    def pin(self, sha256: str) -> None:
        """Keep ``sha256`` (complete or partial) from eviction until as many ``unpin``."""
        self._complete(sha256)  # validates
        self._pins[sha256] += 1

    def unpin(self, sha256: str) -> None:
        if self._pins[sha256] > 0:
            self._pins[sha256] -= 1
        if self._pins[sha256] == 0:
            del self._pins[sha256]

    def pinned(self) -> set[str]:
        return set(self._pins)

    def evict(self, keep: tuple[str, ...] = (), *, now: float | None = None) -> list[str]:
        """Remove least recently used files until the store is within ``max_bytes``;
        never a pinned one, one in ``keep``, or a partial file written to in the last
        ``STALE_PARTIAL_SECONDS``. Returns the paths removed."""
        now = time.time() if now is None else now
        files = self.files()
        total = sum(f.size for f in files)
        spared = set(self._pins) | set(keep)
        complete = [f for f in files if f.complete]
        stale = [f for f in files if not f.complete and now - f.used_at > STALE_PARTIAL_SECONDS]
        removed = []
        for candidate in complete + stale:
            if total <= self.max_bytes:
                break
            if candidate.sha256 in spared:
                continue
            _unlink(candidate.path)
            total -= candidate.size
            removed.append(candidate.path)
        return removed

    # -- helpers -------------------------------------------------------------------------

    def _complete(self, sha256: str) -> str:
        if not _SHA256.match(sha256):
            raise ValueError(f"not a SHA-256 in lower-case hex: {sha256!r}")
        return os.path.join(self.folder, sha256)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
