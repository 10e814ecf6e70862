"""The WSGI application served over ASGI (granian's, in exosuit-api), each request's body
read whole before a thread takes it.

Under granian's WSGI interface a request took one of the worker's threads as soon as its
headers arrived, and kept it while the body trickled in: eight clients sending a byte
every 2 s held every thread of a 2 x 4 exosuit-api (issue 24). Here the body is read by
the worker's event loop, which holds no thread, within ``body_timeout`` of the headers
(else 408, and the connection closes); only then does one of ``threads`` threads run the
application. A body announced larger than ``max_body`` is not read: the application
refuses it from its Content-Length (413), as it does under any server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from wsgiref.types import WSGIApplication

from exosuit.api import wsgi

__all__ = ["WsgiOverAsgi"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_DONE = object()  # what next() gives at the end of a response body
_Started = tuple[str, list[tuple[str, str]]]  # a response's status and headers


class WsgiOverAsgi:
    """An ASGI application running ``app`` (WSGI) on a pool of ``threads`` threads."""

    def __init__(
        self, app: WSGIApplication, *, threads: int, body_timeout: float, max_body: int
    ) -> None:
        self.app = app
        self.body_timeout = body_timeout
        self.max_body = max_body
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="exosuit-api")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout
        if _bodiless(scope):
            read: tuple[bytes, bool] | None = (b"", True)
        else:
            read = await self._body(scope, receive, deadline)
        if read is None:
            await _refuse(send, 408, _timeout_message(self.body_timeout))
            return
        body, whole = read
        environ = _environ(scope, body, whole=whole)
        if not whole:  # the rest streams (an image upload)
            streamed = _Streamed(body, receive, loop, deadline, self.body_timeout, self.max_body)
            environ["wsgi.input"] = io.BufferedReader(streamed)
        # NOTE: not run_in_executor: its asyncio future chained to the pool's costs more
        # than the one callback the thread sends the loop here.
        answered: asyncio.Future[tuple[_Started, Iterator[bytes] | list[bytes]]]
        answered = loop.create_future()
        self.pool.submit(self._run, environ, loop, answered)
        started, chunks = await answered
        status, headers = started
        await send(
            {
                "type": "http.response.start",
                "status": int(status.split(" ", 1)[0]),
                "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
            }
        )
        if isinstance(chunks, list):  # the whole body, collected by the thread
            body = b"".join(chunks)
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        try:
            while True:
                chunk = await loop.run_in_executor(self.pool, next, chunks, _DONE)
                if chunk is _DONE:
                    break
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                await loop.run_in_executor(self.pool, close)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _body(
        self, scope: Scope, receive: Receive, deadline: float
    ) -> tuple[bytes, bool] | None:
        """The body, and whether it is whole (None: it did not arrive by ``deadline``).
        One announced larger than ``max_body`` is not read here: the application refuses
        it from its length (413), or streams it (an image upload: its reads hold a thread,
        each ``max_body`` bytes earning ``body_timeout`` more). One of unknown length is
        read up to one byte past ``max_body``, the rest streamed."""
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return b"", False
        body = bytearray()
        loop = asyncio.get_running_loop()
        more = True
        while more and len(body) <= self.max_body:
            try:
                message = await asyncio.wait_for(receive(), deadline - loop.time())
            except TimeoutError:
                return None
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
        return bytes(body), not more

    def _run(
        self,
        environ: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        answered: asyncio.Future[tuple[_Started, Iterator[bytes] | list[bytes]]],
    ) -> None:
        """``_start`` in a pool thread, its outcome handed to the loop."""
        try:
            outcome = self._start(environ)
        except BaseException as error:  # noqa: BLE001 - raised in the coroutine (a 500)
            loop.call_soon_threadsafe(_settle, answered, None, error)
        else:
            loop.call_soon_threadsafe(_settle, answered, outcome, None)

    def _start(self, environ: dict[str, Any]) -> tuple[_Started, Iterator[bytes] | list[bytes]]:
        """Call the application (in a pool thread) until it has started its response: its
        body's chunks then, when it gave them all at once, else their iterator."""
        started: list[_Started] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], object]:
            started[:] = [(status, headers)]
            return lambda data: None  # the write() callable: no Exosuit code uses it

        result: Iterable[bytes] = self.app(environ, start_response)
        if isinstance(result, list | tuple) and started:
            # A body sent whole (webob's): no more hops to the pool for it.
            whole = list(result)
            close = getattr(result, "close", None)
            if close is not None:
                close()
            return started[0], whole
        chunks = _Chunks(result)
        if not started:  # a streamed body starts its response with its first chunk
            chunks.first = next(chunks.inner, b"")
        return started[0], chunks


def _bodiless(scope: Scope) -> bool:
    """Whether an HTTP/1 request has no body: neither a length nor a transfer coding
    (nothing to read: the application runs at once)."""
    if scope.get("http_version") not in ("1.1", "1.0"):
        return False  # HTTP/2 frames a body without either
    return not any(
        bytes(key).lower() in (b"content-length", b"transfer-encoding")
        for key, _ in scope["headers"]
    )


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Streamed(io.RawIOBase):
    """A request body read by a pool thread from the event loop, as it arrives, each read
    failing (TimeoutError: the application's 408) past the body's deadline."""

    def __init__(
        self,
        first: bytes,
        receive: Receive,
        loop: asyncio.AbstractEventLoop,
        deadline: float,
        timeout: float,
        unit: int,
    ) -> None:
        self.buffer = bytearray(first)
        self.receive = receive
        self.loop = loop
        # Each ``unit`` bytes received earn ``timeout`` more: an image upload goes on at
        # least that fast, however large (doc/limits.md).
        self.deadline = deadline
        self.timeout = timeout
        self.unit = unit
        self.received = 0
        self.more = True

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self.buffer and self.more:
            left = self.deadline - self.loop.time()
            if left <= 0:
                raise TimeoutError("timed out")
            future: concurrent.futures.Future[Message] = asyncio.run_coroutine_threadsafe(
                _received(self.receive), self.loop
            )
            try:
                message = future.result(timeout=left)
            except TimeoutError:
                future.cancel()
                raise
            if message["type"] == "http.disconnect":
                raise ConnectionResetError("the client left")
            chunk = message.get("body", b"")
            self.buffer += chunk
            self.more = bool(message.get("more_body", False))
            self.received += len(chunk)
            while self.received >= self.unit:
                self.received -= self.unit
                self.deadline += self.timeout
        size = min(len(target), len(self.buffer))
        target[:size] = self.buffer[:size]
        del self.buffer[:size]
        return size


async def _received(receive: Receive) -> Message:
    return await receive()


class _Chunks:
    """A response body's iterator, its first chunk perhaps taken already."""

    def __init__(self, result: Iterable[bytes]) -> None:
        self.result = result
        self.inner = iter(result)
        self.first: bytes | None = None

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if self.first is not None:
            first, self.first = self.first, None
            return first
        return next(self.inner)

    def close(self) -> None:
        close = getattr(self.result, "close", None)
        if close is not None:
            close()


def _timeout_message(seconds: float) -> str:
    return f"The request body did not arrive within {seconds:g}s of its headers."


async def _refuse(send: Send, status: int, message: str) -> None:
    body = wsgi.error_body(status, message, "exosuit.request.timeout")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value).decode("latin-1").strip()
    return None


def _environ(scope: Scope, body: bytes, *, whole: bool = True) -> dict[str, Any]:
    """PEP 3333's environ for an ASGI HTTP scope (the path as the client sent it);
    ``whole``: the body is all there."""
    raw_path = scope.get("raw_path")
    path = bytes(raw_path).decode("latin-1") if raw_path else scope["path"]
    path = path.split("?", 1)[0]
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root,
        "PATH_INFO": path,
        "QUERY_STRING": bytes(scope.get("query_string", b"")).decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if client:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = str(client[0]), str(client[1])
    for key, value in scope["headers"]:
        name = bytes(key).decode("latin-1").upper().replace("-", "_")
        text = bytes(value).decode("latin-1")
        if name not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = "HTTP_" + name
        environ[name] = f"{environ[name]},{text}" if name in environ else text
    chunked = environ.get("HTTP_TRANSFER_ENCODING", "").strip().lower() == "chunked"
    if whole and chunked and "CONTENT_LENGTH" not in environ:
        environ["CONTENT_LENGTH"] = str(len(body))  # read whole: its length is known now
        del environ["HTTP_TRANSFER_ENCODING"]
    return environ
