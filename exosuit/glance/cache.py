"""The API's cache of Glance image data: downloaded once, verified, served to every agent.

::

    <cache_dir>/<sha256>                  complete, verified data (exosuit.images.store)
    <cache_dir>/<sha256>.part             a download in progress, resumed from its length
    <cache_dir>/glance/<uuid>.json        what Glance image <uuid> hashes to: {"sha256",
                                          "size", "algorithm", "value"} (its os_hash_*)
    <cache_dir>/glance/<uuid>.download    a download whose SHA-256 is not known yet
    <cache_dir>/glance/<uuid>.lock        one download of an image at a time

Bounded by ``[images] cache_size`` (least recently used first out: the store's
bound). A Glance image is fetched once whatever the number of hosts that program it:
later look-ups read the index and find the file. When Glance hashes with SHA-256
(glance-api ``hashing_algorithm = sha256``) its ``os_hash_value`` names the file
before the download, which then resumes after an interruption; with Glance's default
(SHA-512) the SHA-256 is known only once the data is in, so the index records it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from exosuit import files
from exosuit.images import verify
from exosuit.images.store import ContentStore

__all__ = ["Expected", "GlanceCache"]

# Where Glance's data comes from: the data from byte N on, in chunks.
Download = Callable[[int], Iterator[bytes]]
# What else the data must pass once hashed (its signature): raises to refuse it.
Check = Callable[[verify.Hasher], None]


@dataclasses.dataclass(frozen=True)
class Expected:
    """What a Glance image's data must be: its size, hashes by algorithm (Glance's
    ``os_hash_algo``/``os_hash_value``, or the MD5 ``checksum`` of an older Glance),
    and the signature it must carry."""

    size: int
    hashes: Mapping[str, str]
    signature: verify.Signature | None = None

    @property
    def sha256(self) -> str | None:
        value = self.hashes.get("sha256")
        return value.lower() if value else None

    def index_key(self) -> dict[str, Any]:
        """What the index entry must say for the cached file to be this image's (as
        verified: a signature set or changed since is checked again)."""
        signature = self.signature
        return {
            "size": self.size,
            "hashes": {k: v.lower() for k, v in self.hashes.items()},
            "signature": None
            if signature is None
            else [signature.key_id, signature.algorithm, signature.base64],
        }


class GlanceCache:
    """Glance images' data by SHA-256 under ``folder``, at most ``max_bytes`` of it."""

    def __init__(self, folder: str, max_bytes: int) -> None:
        self.store = ContentStore(folder, max_bytes)
        self.index = os.path.join(folder, "glance")

    def known(self, uuid: str, expected: Expected) -> str | None:
        """The SHA-256 of image ``uuid`` recorded by an earlier download, if its size
        and hashes are still those ``expected`` (Glance's data never changes, but an
        image deleted and re-created with the same uuid would not match)."""
        try:
            with open(self._entry(uuid)) as f:
                entry = json.load(f)
        except (OSError, ValueError):
            return None
        if {k: entry.get(k) for k in ("size", "hashes", "signature")} != expected.index_key():
            return None
        sha256 = entry.get("sha256")
        return sha256 if isinstance(sha256, str) else None

    def path(self, uuid: str, expected: Expected) -> tuple[str, str] | None:
        """(path, sha256) of the image's complete file when it is cached."""
        sha256 = self.known(uuid, expected) or expected.sha256
        path = self.store.path(sha256) if sha256 else None
        return None if path is None or sha256 is None else (path, sha256)

    def fetch(
        self, uuid: str, expected: Expected, download: Download, check: Check
    ) -> tuple[str, str]:
        """(path, sha256) of the image's data, downloaded first unless cached.

        ``download(offset)`` streams Glance's data; ``check(hasher)`` verifies the
        signature (and raises to refuse it). Raises verify.Mismatch when the data is
        not ``expected``; nothing wrong is ever kept. One download per image at a
        time, across the API's processes; the others wait and find the file.
        """
        with self._lock(uuid):
            found = self.path(uuid, expected)
            if found is not None:
                return found
            if expected.sha256:
                sha256 = self._resume(expected, download, check)
            else:
                sha256 = self._download(uuid, expected, download, check)
            path = self.store.commit(sha256, expected.size)
            self._record(uuid, expected, sha256)
            return path, sha256

    def _resume(self, expected: Expected, download: Download, check: Check) -> str:
        """Download into the store's partial file of the known SHA-256, from where an
        earlier download stopped."""
        sha256 = expected.sha256
        assert sha256 is not None
        with self.store.lock(sha256):
            partial, have = self.store.partial(sha256)
            if have > expected.size:
                self.store.discard(sha256)
                partial, have = self.store.partial(sha256)
            hasher = _hasher(expected)
            with open(partial, "ab+") as out:
                out.seek(0)
                for chunk in verify.read_chunks(out, limit=have):
                    hasher.update(chunk)
                if have < expected.size:
                    _append(out, download(have), hasher, expected.size)
            self._verify(hasher, expected, check, discard=lambda: self.store.discard(sha256))
        return sha256

    def _download(self, uuid: str, expected: Expected, download: Download, check: Check) -> str:
        """Download from the start (the SHA-256 is not known yet), then hand the file to
        the store as the partial file of the SHA-256 it turned out to have."""
        os.makedirs(self.index, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=f"{uuid}.", suffix=".download", dir=self.index)
        try:
            hasher = _hasher(expected)
            with os.fdopen(fd, "wb") as out:
                _append(out, download(0), hasher, expected.size)
            self._verify(hasher, expected, check, discard=lambda: None)
            with self.store.lock(hasher.sha256):
                # Handed to the store as its partial file, which its commit publishes.
                files.publish(partial, self.store.partial(hasher.sha256)[0])
            return hasher.sha256
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)

    @staticmethod
    def _verify(
        hasher: verify.Hasher,
        expected: Expected,
        check: Check,
        discard: Callable[[], None],
    ) -> None:
        try:
            verify.check(hasher, size=expected.size, hashes=expected.hashes)
            check(hasher)
        except BaseException:
            discard()  # wrong data is never resumed
            raise

    def _record(self, uuid: str, expected: Expected, sha256: str) -> None:
        entry = {**expected.index_key(), "sha256": sha256}
        files.atomic_write(self._entry(uuid), json.dumps(entry, sort_keys=True))

    def _entry(self, uuid: str) -> str:
        return os.path.join(self.index, f"{uuid}.json")

    @contextlib.contextmanager
    def _lock(self, uuid: str) -> Iterator[None]:
        os.makedirs(self.index, exist_ok=True)
        fd = os.open(os.path.join(self.index, f"{uuid}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _hasher(expected: Expected) -> verify.Hasher:
    return verify.Hasher(*expected.hashes, *verify.required_hashes(expected.signature))


def _append(out: Any, chunks: Iterator[bytes], hasher: verify.Hasher, size: int) -> None:
    """Write and hash ``chunks``; Mismatch as soon as there is more than ``size``."""
    for chunk in chunks:
        hasher.update(chunk)
        if hasher.size > size:
            raise verify.Mismatch("size", size, f"more than {size}")
        out.write(chunk)
    out.flush()
    os.fsync(out.fileno())
