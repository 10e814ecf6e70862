"""Atomic file writes: a file Exosuit replaces is whole or absent, never torn.

Every file Exosuit replaces on disk (the agent cache, CDI spec files, the kubelet
checkpoint, a driver's state, the image stores, the Glance cache's index) is written
the one way this module has, so that a crash, a ``kill -9`` or a power cut at any
moment leaves the old content or the new one:

1. the data goes to a temporary file in the target's folder (a rename is atomic only
   within one file system), named ``.<name>.<random>.tmp`` (hidden, and ignored by
   readers of ``*.json`` such as container engines' CDI loaders);
2. it is flushed and fsynced: the data is on disk before any name points at it;
3. it is renamed over the target (``os.replace``);
4. the folder is fsynced: the rename itself is on disk.

A failure before the rename removes the temporary file and leaves the target as it was
(or absent). ``publish`` is steps 2 to 4, and the one code path: ``atomic_file`` (a
context manager yielding the open temporary file, for a writer that streams) ends with
it, ``atomic_write`` (content in hand) is ``atomic_file`` with one write, and a writer
that learns the file's name only at the end (a file named by its hash) or resumes a
temporary file across restarts (a download) calls it directly.

A bottom module, like ``exosuit.backoff``: the standard library only, nothing of
Exosuit, so every floor may import it, the drivers too (their import contract allows
this module beside the driver SDK). It is not part of the driver SDK: the images store,
the Glance cache and the kubelet checkpoint use it too, and have nothing to do with
drivers.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import BinaryIO

__all__ = ["atomic_file", "atomic_write", "publish", "sync_folder"]


def sync_folder(folder: str) -> None:
    """fsync ``folder``: the names created, renamed or removed in it are on disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(temporary: str, path: str) -> None:
    """Make the file ``temporary`` the file ``path``, durably: fsync its data, rename it
    over ``path`` (atomic when both are on one file system: the same folder is), fsync
    ``path``'s folder. ``temporary`` is gone after it (FileNotFoundError if it was
    already)."""
    fd = os.open(temporary, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    sync_folder(os.path.dirname(os.path.abspath(path)))


def _create(folder: str, name: str, temporary: str | None, permissions: int) -> tuple[int, str]:
    """Open a new temporary file for ``name`` in ``folder``: (descriptor, path)."""
    if temporary is not None:
        path = os.path.join(folder, temporary)
        # A fixed name: the leftover of a crashed write is overwritten (one writer).
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        return os.open(path, flags, permissions), path
    while True:
        path = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
            return os.open(path, flags, permissions), path
        except FileExistsError:  # pragma: no cover - 32 random bits met another writer's
            continue


@contextlib.contextmanager
def atomic_file(
    path: str, *, permissions: int = 0o600, temporary: str | None = None
) -> Iterator[BinaryIO]:
    """Replace ``path`` with what the block writes to the binary file it is given.

    When the block ends normally the file is published (``publish``); when it raises,
    the temporary file is removed, ``path`` is left as it was, and the error goes on.
    ``path``'s folder is created if missing. ``permissions``: the new file's mode
    (before the umask). ``temporary``: a fixed name for the temporary file in the same
    folder (``.<name>.tmp``, say), for a file with one writer whose next write should
    replace what a crash left; default a unique name, safe with concurrent writers.
    """
    folder, name = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, temp = _create(folder, name, temporary, permissions)
    try:
        with os.fdopen(fd, "wb") as stream:
            yield stream
            stream.flush()
        publish(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def atomic_write(
    path: str, data: bytes | str, *, permissions: int = 0o600, temporary: str | None = None
) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8), atomically and
    durably; the keywords are ``atomic_file``'s."""
    with atomic_file(path, permissions=permissions, temporary=temporary) as stream:
        stream.write(data.encode() if isinstance(data, str) else data)
