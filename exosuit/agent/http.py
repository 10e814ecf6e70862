"""A small HTTP/1.1 client for an agent that talks to a plain ``http://`` API without
Keystone: what keystoneauth1 (with requests, urllib3 and ssl) would cost an agent in
memory, about 10 MB, for nothing it uses there.

``PlainSession`` implements the part of a keystoneauth1 session the agent uses
([exosuit.agent.reporter.Session], ``get`` and ``put`` with JSON, headers and a timeout),
over one keep-alive connection that is opened again when the server closed it. Errors
of the network are ``OSError`` (``ConnectionError``, ``TimeoutError``), which every
caller treats as "API unreachable". ``transport_errors()`` is what callers catch: these,
and keystoneauth's client errors when a keystoneauth session is in use.

``exosuit.agent.main.make_session`` picks it when ``[agent] api_url`` is ``http://…`` and
no ``auth_type``, ``auth_section``, CA or client certificate is configured.
"""

from __future__ import annotations

import json as jsonlib
import socket
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["PlainResponse", "PlainSession", "transport_errors"]

# The largest response head (status line and headers) read: a server sends far less.
_MAX_HEAD = 64 * 1024


def transport_errors() -> tuple[type[BaseException], ...]:
    """What a request may raise when the API cannot be reached or answered badly:
    ``OSError``, and keystoneauth's client errors once keystoneauth is loaded (a
    keystoneauth session is then in use). Evaluated where an exception is caught, so
    no keystoneauth import is ever needed for it."""
    ksa = sys.modules.get("keystoneauth1.exceptions")
    if ksa is None:
        return (OSError,)
    return (OSError, ksa.ClientException)


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` means the API could not be reached (not a failed call)."""
    if isinstance(error, OSError):
        return True
    ksa = sys.modules.get("keystoneauth1.exceptions")
    return ksa is not None and isinstance(error, ksa.ConnectionError)


class _Headers(dict[str, str]):
    """Response headers, looked up without regard to case."""

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


class PlainResponse:
    """The parts of a requests response the agent reads."""

    def __init__(self, status_code: int, headers: _Headers, body: bytes) -> None:
        self.status_code = status_code
        self.headers: Mapping[str, str] = headers
        self._body = body

    @property
    def text(self) -> str:
        return self._body.decode(errors="replace")

    @property
    def content(self) -> bytes:
        return self._body

    def json(self) -> Any:
        return jsonlib.loads(self._body)

    def iter_content(self, chunk_size: int = 65536) -> Iterator[bytes]:
        for start in range(0, len(self._body), chunk_size):
            yield self._body[start : start + chunk_size]

    def close(self) -> None:
        pass


class PlainSession:
    """Implements [exosuit.agent.reporter.Session] over plain HTTP, with no auth."""

    auth = None

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._address: tuple[str, int] | None = None
        self._buffer = b""
        self._lock = threading.Lock()  # the reconcilers share the session

    def put(
        self,
        url: str,
        *,
        json: dict[str, Any],
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **_ignored: object,
    ) -> PlainResponse:
        body = jsonlib.dumps(json, separators=(",", ":")).encode()
        return self.request("PUT", url, body, headers, timeout)

    def get(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **_ignored: object,
    ) -> PlainResponse:
        return self.request("GET", url, None, headers, timeout)

    def request(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: float | None,
    ) -> PlainResponse:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"PlainSession speaks plain http:// only, not {url!r}")
        address = (parts.hostname, parts.port or 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Accept: application/json"]
        for key, value in (headers or {}).items():
            if "\r" in key + value or "\n" in key + value:
                raise ValueError(f"a header may not hold a line break: {key!r}")
            lines.append(f"{key}: {value}")
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        with self._lock:
            for attempt in (0, 1):
                fresh = self._sock is None or self._address != address
                try:
                    sock = self._connect(address, timeout) if fresh else self._sock
                    assert sock is not None
                    sock.settimeout(timeout if timeout is not None else self.timeout)
                    sock.sendall(data)
                    return self._response(sock, method)
                except (ConnectionError, _Closed):
                    self.close()
                    # A kept-alive connection the server had closed: once more, afresh.
                    if fresh or attempt:
                        raise ConnectionError(f"{host}: the connection was closed") from None
                except OSError:
                    self.close()
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock, self._buffer = None, b""

    def _connect(self, address: tuple[str, int], timeout: float | None) -> socket.socket:
        self.close()
        sock = socket.create_connection(
            address, timeout=timeout if timeout is not None else self.timeout
        )
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._address = sock, address
        return sock

    def _read(self, sock: socket.socket) -> None:
        chunk = sock.recv(65536)
        if not chunk:
            raise _Closed
        self._buffer += chunk

    def _response(self, sock: socket.socket, method: str) -> PlainResponse:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > _MAX_HEAD:
                raise ConnectionError("the API's response head is too large")
            self._read(sock)
        head = self._buffer[:end].decode("latin-1").split("\r\n")
        self._buffer = self._buffer[end + 4 :]
        try:
            status = int(head[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise ConnectionError(f"not an HTTP response: {head[0][:100]!r}") from None
        headers = _Headers()
        for line in head[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked(sock)
        elif method == "HEAD" or status in (204, 304) or status < 200:
            body = b""
        elif "content-length" in headers:
            length = int(headers["content-length"])
            while len(self._buffer) < length:
                self._read(sock)
            body, self._buffer = self._buffer[:length], self._buffer[length:]
        else:  # the body runs to the end of the connection
            try:
                while True:
                    self._read(sock)
            except _Closed:
                pass
            body, self._buffer = self._buffer, b""
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        return PlainResponse(status, headers, body)

    def _chunked(self, sock: socket.socket) -> bytes:
        body = b""
        while True:
            while (end := self._buffer.find(b"\r\n")) < 0:
                self._read(sock)
            size = int(self._buffer[:end].split(b";", 1)[0], 16)
            self._buffer = self._buffer[end + 2 :]
            while len(self._buffer) < size + 2:
                self._read(sock)
            body += self._buffer[:size]
            self._buffer = self._buffer[size + 2 :]
            if size == 0:
                return body


class _Closed(Exception):
    """The server closed the connection before a whole response came."""
