"""exosuit.glance.cache: a Glance image's data is downloaded once, verified, resumed after
an interruption when its SHA-256 is known, and never kept when it is wrong. The
"download" here is a function over bytes (what GlanceClient.data gives), recording how
it was called."""

from __future__ import annotations

import hashlib
import os
import threading
import uuid

import pytest

from exosuit import exceptions
from exosuit.glance.cache import Expected, GlanceCache
from exosuit.images import verify

DATA = os.urandom(2 * verify.CHUNK_SIZE + 123)
SHA256 = hashlib.sha256(DATA).hexdigest()
SHA512 = hashlib.sha512(DATA).hexdigest()


class Glance:
    """Serves DATA from an offset; ``cut_after`` bytes into a download it fails as a
    dropped connection would."""

    def __init__(self, data: bytes = DATA, cut_after: int | None = None) -> None:
        self.data = data
        self.cut_after = cut_after
        self.offsets: list[int] = []

    def download(self, offset: int):
        self.offsets.append(offset)
        sent = 0
        for start in range(offset, len(self.data), 1000_000):
            chunk = self.data[start : start + 1000_000]
            if self.cut_after is not None and sent + len(chunk) > self.cut_after:
                yield chunk[: self.cut_after - sent]
                raise exceptions.GlanceUnavailable(
                    method="GET", url="/v2/images/x/file", status=None, detail="cut"
                )
            sent += len(chunk)
            yield chunk


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def no_check(hasher: verify.Hasher) -> None:
    pass


@pytest.fixture
def cache(tmp_path) -> GlanceCache:
    return GlanceCache(str(tmp_path / "cache"), 10 * len(DATA))


def test_downloaded_once_then_found_by_its_index(cache):
    image, glance = str(uuid.uuid4()), Glance()
    expected = Expected(size=len(DATA), hashes={"sha512": SHA512})
    path, sha256 = cache.fetch(image, expected, glance.download, no_check)
    assert sha256 == SHA256 and read(path) == DATA
    assert cache.fetch(image, expected, glance.download, no_check) == (path, SHA256)
    assert glance.offsets == [0]
    assert cache.known(image, expected) == SHA256
    assert cache.path(image, expected) == (path, SHA256)
    # The same uuid with other data (deleted and re-created in Glance) is not it.
    other = Expected(size=len(DATA), hashes={"sha512": "0" * 128})
    assert cache.known(image, other) is None and cache.path(image, other) is None


def test_two_images_with_the_same_data_share_one_file(cache):
    expected = Expected(size=len(DATA), hashes={"sha512": SHA512})
    first, _ = cache.fetch(str(uuid.uuid4()), expected, Glance().download, no_check)
    second, _ = cache.fetch(str(uuid.uuid4()), expected, Glance().download, no_check)
    assert first == second and len(cache.store.files()) == 1


def test_a_known_sha256_resumes_where_the_download_stopped(cache):
    image = str(uuid.uuid4())
    expected = Expected(size=len(DATA), hashes={"sha256": SHA256.upper()})
    cut = Glance(cut_after=verify.CHUNK_SIZE + 5)
    with pytest.raises(exceptions.GlanceUnavailable):
        cache.fetch(image, expected, cut.download, no_check)
    assert cache.store.partial(SHA256)[1] == verify.CHUNK_SIZE + 5
    glance = Glance()
    path, sha256 = cache.fetch(image, expected, glance.download, no_check)
    assert glance.offsets == [verify.CHUNK_SIZE + 5]
    assert sha256 == SHA256 and read(path) == DATA


def test_wrong_data_is_refused_and_not_kept(cache):
    image = str(uuid.uuid4())
    expected = Expected(size=len(DATA), hashes={"sha512": "f" * 128})
    with pytest.raises(verify.Mismatch, match="its sha512 is"):
        cache.fetch(image, expected, Glance().download, no_check)
    assert cache.store.files() == [] and cache.known(image, expected) is None
    known = Expected(size=len(DATA), hashes={"sha256": "e" * 64})
    with pytest.raises(verify.Mismatch, match="its sha256 is"):
        cache.fetch(image, known, Glance().download, no_check)
    assert cache.store.files() == []


def test_more_data_than_the_size_is_refused_as_it_comes(cache):
    image = str(uuid.uuid4())
    expected = Expected(size=10, hashes={"sha512": SHA512})
    with pytest.raises(verify.Mismatch, match="its size is more than 10 bytes, not 10"):
        cache.fetch(image, expected, Glance().download, no_check)
    assert cache.store.files() == []


def test_a_refused_signature_keeps_nothing(cache):
    image = str(uuid.uuid4())
    expected = Expected(size=len(DATA), hashes={"sha256": SHA256})

    def refuse(hasher: verify.Hasher) -> None:
        assert hasher.size == len(DATA)
        raise exceptions.ImageSignatureInvalid(uuid=image, reason="does not verify")

    with pytest.raises(exceptions.ImageSignatureInvalid):
        cache.fetch(image, expected, Glance().download, refuse)
    assert cache.store.files() == [] and cache.known(image, expected) is None


def test_concurrent_fetches_download_once(cache):
    image, glance = str(uuid.uuid4()), Glance()
    expected = Expected(size=len(DATA), hashes={"sha512": SHA512})
    results: list[tuple[str, str]] = []
    barrier = threading.Barrier(4)

    def fetch() -> None:
        barrier.wait(timeout=60)
        results.append(cache.fetch(image, expected, glance.download, no_check))

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 4 and len(set(results)) == 1 and glance.offsets == [0]


def test_the_cache_is_bounded(tmp_path):
    cache = GlanceCache(str(tmp_path / "cache"), 2 * len(DATA))
    shas = []
    for n in range(3):
        data = DATA[:-1] + bytes([n])
        expected = Expected(size=len(data), hashes={"md5": hashlib.md5(data).hexdigest()})
        _, sha256 = cache.fetch(str(uuid.uuid4()), expected, Glance(data).download, no_check)
        shas.append(sha256)
    assert [f.sha256 for f in cache.store.files()] == shas[1:]  # the oldest went


def test_a_signature_set_after_caching_is_checked_again(cache):
    image, glance = str(uuid.uuid4()), Glance()
    unsigned = Expected(size=len(DATA), hashes={"sha512": SHA512})
    cache.fetch(image, unsigned, glance.download, no_check)
    signed = Expected(
        size=len(DATA),
        hashes={"sha512": SHA512},
        signature=verify.Signature("k1", b"signature", "RSA-PSS-SHA256"),
    )
    checked: list[int] = []
    assert cache.known(image, signed) is None
    cache.fetch(image, signed, glance.download, lambda hasher: checked.append(hasher.size))
    assert checked == [len(DATA)] and glance.offsets == [0, 0]
    assert cache.known(image, signed) == SHA256
