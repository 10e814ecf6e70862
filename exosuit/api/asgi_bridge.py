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
from functools import partial
from typing import Any
from wsgiref.types import WSGIApplication

from exosuit.api import wsgi

__all__ = ["WsgiOverAsgi", "WsgiOverRsgi"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_DONE = object()  # what next() gives at the end of a response body


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
        read = await self._body(scope, receive, deadline)
        if read is None:
            await _refuse(send, 408, _timeout_message(self.body_timeout))
            return
        body, whole = read
        environ = _environ(scope, body, whole=whole)
        if not whole:  # the rest streams (an image upload)
            streamed = _Streamed(
                body, partial(_asgi_chunk, receive), loop, deadline, self.body_timeout, self.max_body
            )
            environ["wsgi.input"] = io.BufferedReader(streamed)
        started, chunks = await loop.run_in_executor(self.pool, _start, self.app, environ)
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


def _start(
    app: WSGIApplication, environ: dict[str, Any]
) -> tuple[tuple[str, list[tuple[str, str]]], Iterator[bytes] | list[bytes]]:
    """Call the application (in a pool thread) until it has started its response: its
    body's chunks then, when it gave them all at once, else their iterator."""
    started: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        started[:] = [(status, headers)]
        return lambda data: None  # the write() callable: no Exosuit code uses it

    result: Iterable[bytes] = app(environ, start_response)
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


class _Streamed(io.RawIOBase):
    """A request body read by a pool thread from the event loop, as it arrives, each read
    failing (TimeoutError: the application's 408) past the body's deadline. ``chunk``
    gives the next piece of the body and whether more follows."""

    def __init__(
        self,
        first: bytes,
        chunk: Callable[[], Awaitable[tuple[bytes, bool]]],
        loop: asyncio.AbstractEventLoop,
        deadline: float,
        timeout: float,
        unit: int,
    ) -> None:
        self.buffer = bytearray(first)
        self.chunk = chunk
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
            future: concurrent.futures.Future[tuple[bytes, bool]] = (
                asyncio.run_coroutine_threadsafe(_awaited(self.chunk), self.loop)
            )
            try:
                chunk, self.more = future.result(timeout=left)
            except TimeoutError:
                future.cancel()
                raise
            self.buffer += chunk
            self.received += len(chunk)
            while self.received >= self.unit:
                self.received -= self.unit
                self.deadline += self.timeout
        size = min(len(target), len(self.buffer))
        target[:size] = self.buffer[:size]
        del self.buffer[:size]
        return size


async def _awaited(chunk: Callable[[], Awaitable[tuple[bytes, bool]]]) -> tuple[bytes, bool]:
    return await chunk()


async def _asgi_chunk(receive: Receive) -> tuple[bytes, bool]:
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ConnectionResetError("the client left")
    return message.get("body", b""), bool(message.get("more_body", False))


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
    if whole:
        _whole_chunked(environ, body)
    return environ


def _whole_chunked(environ: dict[str, Any], body: bytes) -> None:
    """A chunked body read whole: its length is known now (CONTENT_LENGTH)."""
    chunked = environ.get("HTTP_TRANSFER_ENCODING", "").strip().lower() == "chunked"
    if chunked and "CONTENT_LENGTH" not in environ:
        environ["CONTENT_LENGTH"] = str(len(body))
        del environ["HTTP_TRANSFER_ENCODING"]


class WsgiOverRsgi:
    """The same over granian's own interface, RSGI (exosuit-api's default): the same
    guarantees as ``WsgiOverAsgi`` (a body read by the event loop within
    ``body_timeout``, else 408; only then a thread), with less work per request: the
    scope's fields are read as they are, without ASGI's message dictionaries, and a
    request without a body (a GET) reads none."""

    def __init__(
        self, app: WSGIApplication, *, threads: int, body_timeout: float, max_body: int
    ) -> None:
        self.app = app
        self.body_timeout = body_timeout
        self.max_body = max_body
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="exosuit-api")

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.proto != "http":
            return
        environ = _rsgi_environ(scope)
        loop = asyncio.get_running_loop()
        if "CONTENT_LENGTH" in environ or "HTTP_TRANSFER_ENCODING" in environ:
            deadline = loop.time() + self.body_timeout
            read = await self._body(environ, protocol, deadline)
            if read is None:
                body = wsgi.error_body(
                    408, _timeout_message(self.body_timeout), "exosuit.request.timeout"
                )
                protocol.response_bytes(
                    408,
                    [
                        ("content-type", "application/json"),
                        ("content-length", str(len(body))),
                        ("connection", "close"),
                    ],
                    body,
                )
                return
            body, rest = read
            if rest is None:
                environ["wsgi.input"] = io.BytesIO(body)
                _whole_chunked(environ, body)
            else:  # the rest streams (an image upload)
                streamed = _Streamed(
                    body, partial(_rsgi_chunk, rest), loop, deadline, self.body_timeout,
                    self.max_body,
                )
                environ["wsgi.input"] = io.BufferedReader(streamed)
        # NOTE: the thread sends a whole body itself (granian takes it from any thread),
        # then wakes the loop only to end this coroutine: the answer does not wait for
        # the loop, and no asyncio future is chained to the pool's.
        streamed: asyncio.Future[tuple[int, list[tuple[str, str]], _Chunks] | None]
        streamed = loop.create_future()
        self.pool.submit(self._respond, environ, protocol, loop, streamed)
        found = await streamed
        if found is None:  # answered by the thread
            return
        code, headers, chunks = found
        transport = protocol.response_stream(code, headers)
        try:
            while True:
                chunk = await loop.run_in_executor(self.pool, next, chunks, _DONE)
                if chunk is _DONE:
                    break
                if chunk:
                    await transport.send_bytes(chunk)
        finally:
            await loop.run_in_executor(self.pool, chunks.close)

    def _respond(
        self,
        environ: dict[str, Any],
        protocol: Any,
        loop: asyncio.AbstractEventLoop,
        done: asyncio.Future[tuple[int, list[tuple[str, str]], _Chunks] | None],
    ) -> None:
        """In a pool thread: run the application and send its answer when it is whole;
        ``done`` gets None then, else what the coroutine streams."""
        try:
            (status, headers), chunks = _start(self.app, environ)
            code = int(status.split(" ", 1)[0])
            if isinstance(chunks, list):
                protocol.response_bytes(code, headers, b"".join(chunks))
                loop.call_soon_threadsafe(_settle, done, None, None)
            else:
                loop.call_soon_threadsafe(_settle, done, (code, headers, chunks), None)
        except BaseException as error:  # noqa: BLE001 - the coroutine raises it (a 500)
            loop.call_soon_threadsafe(_settle, done, None, error)

    async def _body(
        self, environ: dict[str, Any], protocol: Any, deadline: float
    ) -> tuple[bytes, Any] | None:
        """The body and, when it is not whole, the iterator of its rest (None: it did not
        arrive by ``deadline``); as ``WsgiOverAsgi._body`` reads it."""
        length = environ.get("CONTENT_LENGTH")
        loop = asyncio.get_running_loop()
        if length is not None:
            if not length.isdigit() or int(length) > self.max_body:
                return b"", protocol.__aiter__()
            try:
                return await asyncio.wait_for(protocol(), deadline - loop.time()), None
            except (TimeoutError, *_CLOSED):
                return None
        body = bytearray()
        rest = protocol.__aiter__()
        while len(body) <= self.max_body:
            try:
                chunk, more = await asyncio.wait_for(_rsgi_chunk(rest), deadline - loop.time())
            except (TimeoutError, ConnectionResetError):
                return None
            body += chunk
            if not more:
                return bytes(body), None
        return bytes(body), rest


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _closed_errors() -> tuple[type[BaseException], ...]:
    try:
        from granian.rsgi import ProtocolClosed, ProtocolError
    except ImportError:  # pragma: no cover - granian is installed with exosuit
        return ()
    return (ProtocolClosed, ProtocolError)


_CLOSED = _closed_errors()


async def _rsgi_chunk(rest: Any) -> tuple[bytes, bool]:
    """The next chunk of an RSGI body, and whether more may follow."""
    try:
        return bytes(await rest.__anext__()), True
    except StopAsyncIteration:
        return b"", False
    except _CLOSED:
        raise ConnectionResetError("the client left") from None


def _rsgi_environ(scope: Any) -> dict[str, Any]:
    """PEP 3333's environ for an RSGI HTTP scope, as ``_environ`` makes it for ASGI's."""
    host, _, port = scope.server.rpartition(":")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": scope.path,
        "QUERY_STRING": scope.query_string,
        "SERVER_NAME": host,
        "SERVER_PORT": port,
        "SERVER_PROTOCOL": f"HTTP/{scope.http_version}",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.scheme,
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    client = scope.client
    if client:
        environ["REMOTE_ADDR"], _, environ["REMOTE_PORT"] = client.rpartition(":")
    for key, value in scope.headers.items():
        name = key.upper().replace("-", "_")
        if name not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = "HTTP_" + name
        environ[name] = f"{environ[name]},{value}" if name in environ else value
    return environ
