"""Files as responses: streamed in chunks, never read whole, with byte ranges.

``file_response`` answers 200 with the file, ``ETag: "<sha256>"`` and ``Accept-Ranges:
bytes``; webob's conditional response turns ``Range: bytes=N-`` (or ``N-M``, ``-N``)
into 206 with ``Content-Range`` (416 past the end) and ``If-None-Match`` into 304. The
file is closed when the server closes the response's iterator, whether or not it was
read (a 304, a client gone).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import webob

from exosuit.images import verify

__all__ = ["FileChunks", "file_response"]


class FileChunks:
    """Bytes ``start`` to ``stop`` of ``file`` in chunks; ``close`` closes the file."""

    def __init__(self, file: BinaryIO, start: int = 0, stop: int | None = None) -> None:
        self.file = file
        self.start = start
        self.stop = stop

    def __iter__(self) -> Iterator[bytes]:
        self.file.seek(self.start)
        limit = None if self.stop is None else self.stop - self.start
        return verify.read_chunks(self.file, limit=limit)

    def app_iter_range(self, start: int, stop: int | None) -> FileChunks:
        """What webob serves for a range (a 206)."""
        return FileChunks(self.file, start, stop)

    def close(self) -> None:
        self.file.close()


def file_response(file: BinaryIO, size: int, sha256: str) -> webob.Response:
    """200 (or 206 for a Range) with the ``size`` bytes of ``file``, which it closes."""
    response = webob.Response(
        status=200,
        app_iter=FileChunks(file),
        content_type="application/octet-stream",
        conditional_response=True,
    )
    response.content_length = size
    response.etag = sha256
    response.accept_ranges = "bytes"
    return response
