"""The data of Exosuit's own catalogue: one folder per image under ``[images] data_dir``.

::

    <data_dir>/<image uuid>/<sha256>             the data: complete and verified
    <data_dir>/<image uuid>/.upload-<random>     an upload in progress

An upload streams into a temporary file in the image's folder, hashed as it is
written (never held in memory), bounded by ``[images] max_size`` (the declared length
is checked first, the bytes received as they come). It is then fsynced and verified
(not empty; the SHA-256 given when the image was created; its signature, when trusted
keys are configured or one is required), renamed to its SHA-256 and the image made
``active`` by compare-and-set. The file's name is its hash, so two concurrent
uploads never write over each other's data; the one that loses the compare-and-set
gets ``ImageHasData`` and its file goes. Deleting an image removes its folder (a
download already reading the file finishes: POSIX keeps an open file).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

from exosuit import exceptions, files
from exosuit.db import images as db
from exosuit.db.api import Database
from exosuit.images import verify

if TYPE_CHECKING:
    from _typeshed import SupportsRead

__all__ = [
    "folder_of",
    "open_data",
    "receive",
    "remove",
    "signature_of",
    "still_acceptable",
    "trusted_keys",
    "verify_signature",
]


def folder_of(conf: Any, uuid: str) -> str:
    return os.path.join(conf.images.data_dir, uuid)


def trusted_keys(conf: Any) -> verify.TrustedKeys:
    """The keys of ``[images] trusted_keys`` (read at each use: they are small, and an
    operator's change takes effect without a restart)."""
    return verify.TrustedKeys.load(conf.images.trusted_keys or {})


def verify_signature(
    conf: Any, uuid: str, hasher: verify.Hasher, signature: verify.Signature | None
) -> bool:
    """``verify.verify_signature`` with the configured keys and requirement;
    ImageSignatureInvalid (for image ``uuid``) when it refuses."""
    try:
        return verify.verify_signature(
            hasher, signature, trusted_keys(conf), require=conf.images.require_signature
        )
    except verify.SignatureInvalid as error:
        raise exceptions.ImageSignatureInvalid(uuid=uuid, reason=str(error)) from None


def still_acceptable(conf: Any, uuid: str, signature: verify.Signature | None) -> None:
    """ImageSignatureInvalid when data verified earlier would not be accepted now: a
    signature is required and it has none, or the key it names is no longer trusted
    (checked without reading the data again)."""
    if signature is None:
        if conf.images.require_signature:
            raise exceptions.ImageSignatureInvalid(
                uuid=uuid, reason="is missing, and [images] require_signature is set"
            )
        return
    keys = trusted_keys(conf)
    if (keys or conf.images.require_signature) and signature.key_id not in keys:
        raise exceptions.ImageSignatureInvalid(
            uuid=uuid, reason=f"names key {signature.key_id!r}, which is not trusted"
        )


def signature_of(image: Mapping[str, Any]) -> verify.Signature | None:
    """The catalogue image's detached signature, or None; ImageSignatureInvalid when
    its stored value cannot be one (checked at creation: only an edited row fails)."""
    if not image["signature"]:
        return None
    try:
        return verify.Signature.from_base64(
            image["signature_key_id"] or "", image["signature"], image["signature_algorithm"] or ""
        )
    except verify.SignatureInvalid as error:
        raise exceptions.ImageSignatureInvalid(uuid=image["uuid"], reason=str(error)) from None


def receive(
    conf: Any,
    database: Database,
    image: db.ImageRow,
    stream: SupportsRead[bytes],
    length: int | None,
) -> db.ImageRow:
    """Store the data of queued ``image`` read from ``stream`` (``length`` bytes when
    declared) and return the image, now active.

    ImageHasData (it has its data already, or a concurrent upload won), ImageTooLarge
    (above ``[images] max_size``), ImageInvalid (empty, cut short, or not the SHA-256
    it was created with), ImageSignatureInvalid, ImageNotFound (deleted meanwhile).
    """
    uuid = image["uuid"]
    if image["status"] != db.QUEUED:
        raise exceptions.ImageHasData(uuid=uuid)
    max_size = conf.images.max_size
    if length is not None and length > max_size:
        raise exceptions.ImageTooLarge(uuid=uuid, max_size=max_size)
    signature = signature_of(image)
    folder = folder_of(conf, uuid)
    os.makedirs(folder, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=".upload-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            hasher = _copy(stream, out, uuid, length, max_size, verify.required_hashes(signature))
        try:
            verify.check(hasher, sha256=image["sha256"])
        except verify.Mismatch as error:
            raise exceptions.ImageInvalid(uuid=uuid, reason=str(error)) from None
        verify_signature(conf, uuid, hasher, signature)
        final = os.path.join(folder, hasher.sha256)
        # Named by its hash, known only now: fsync, rename, fsync of the folder.
        files.publish(partial, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return _activate(conf, database, uuid, hasher, final)


def _copy(
    stream: SupportsRead[bytes],
    out: BinaryIO,
    uuid: str,
    length: int | None,
    max_size: int,
    algorithms: tuple[str, ...],
) -> verify.Hasher:
    """Copy and hash ``stream`` into ``out``: at most ``max_size`` bytes (one more is
    read when no length is declared, to tell a larger upload)."""
    hasher = verify.Hasher(*algorithms)
    try:
        for chunk in verify.read_chunks(stream, limit=max_size + 1 if length is None else length):
            hasher.update(chunk)
            if hasher.size > max_size:
                raise exceptions.ImageTooLarge(uuid=uuid, max_size=max_size)
            out.write(chunk)
    except OSError as error:  # the client went away (webob's DisconnectionError is one)
        raise exceptions.ImageInvalid(uuid=uuid, reason=f"the upload was cut: {error}") from None
    if length is not None and hasher.size < length:
        raise exceptions.ImageInvalid(
            uuid=uuid, reason=f"the upload was cut after {hasher.size} of {length} bytes"
        )
    if hasher.size == 0:
        raise exceptions.ImageInvalid(uuid=uuid, reason="it has no data")
    return hasher


def _activate(
    conf: Any, database: Database, uuid: str, hasher: verify.Hasher, final: str
) -> db.ImageRow:
    try:
        return database.write(db.activate, uuid, size=hasher.size, sha256=hasher.sha256)
    except exceptions.ImageNotFound:  # deleted while its data came in
        remove(conf, uuid)
        raise
    except (exceptions.ImageHasData, exceptions.Invalid):
        winner = database.read(db.get_any, uuid)
        if winner["sha256"] != hasher.sha256:  # not the same bytes: ours are not wanted
            with contextlib.suppress(FileNotFoundError):
                os.unlink(final)
        raise exceptions.ImageHasData(uuid=uuid) from None


def open_data(conf: Any, image: Mapping[str, Any]) -> tuple[BinaryIO, int, str]:
    """(stream at 0, size, sha256) of an active catalogue image; ImageNotActive."""
    if image["status"] != db.ACTIVE:
        raise exceptions.ImageNotActive(uuid=image["uuid"], status=image["status"])
    path = os.path.join(folder_of(conf, image["uuid"]), image["sha256"])
    return open(path, "rb"), int(image["size"]), str(image["sha256"])


def remove(conf: Any, uuid: str) -> None:
    """Remove the image's folder (its data and any upload in progress)."""
    shutil.rmtree(folder_of(conf, uuid), ignore_errors=True)
