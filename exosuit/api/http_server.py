"""exosuit serve's HTTP server: cheroot, guarded against slow and greedy clients.

cheroot gives a connection one of its worker threads as soon as a byte of a request
arrives, until the request is read and answered: four clients sending a byte every 2 s
held every thread of exosuit serve (issue 24). Here (doc/limits.md, "Slow clients"):

- a request reaches a worker only once its request line and headers have all arrived:
  they are read as they come, without blocking, by cheroot's connection-manager thread,
  and must all be there within ``header_timeout`` of the first byte (else 408, closed);
- its body must arrive within ``body_timeout`` of its headers (else 408, closed). A body
  of at most ``read_ahead`` bytes (``[api] max_body_size``: every body of /v2) is read
  ahead the same way, holding no worker; a larger one (the agent API's, an image) is read
  by the worker, each ``read_ahead`` bytes earning ``body_timeout`` more, its reads
  failing past that time: a trickle holds a worker ``body_timeout`` at most;
- a client address has at most ``max_client_connections`` open connections and the
  server ``max_connections`` in all: one more is answered 503 and closed at once;
- a body the application did not read (it refused the request) is not read afterwards
  either: the connection is closed instead;
- cheroot's own refusals (400, 408, 413, 414, 501 …) are in the API's error format.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
import time
from collections import Counter
from typing import Any

from cheroot import server as cheroot_server
from cheroot import wsgi as cheroot_wsgi
from cheroot.makefile import MakeFile

from exosuit.api import wsgi

__all__ = ["Guards", "GuardedServer"]

# Longest request line and headers cheroot is given (its own default has no bound).
MAX_HEADER_SIZE = 64 * 1024

# The stable code of each refusal cheroot writes itself, by status.
_CODES = {
    400: "exosuit.request.malformed",
    408: "exosuit.request.timeout",
    413: "exosuit.body.too_large",
    405: "exosuit.method_not_allowed",
    414: "exosuit.request.too_long",
    501: "exosuit.request.transfer_encoding",
    503: "exosuit.connections.busy",
    505: "exosuit.request.version",
}
# What cheroot says with them (it gives most no words of its own).
_MESSAGES = {
    408: "The request did not arrive in time: its headers must arrive within {header}s "
    "of its first byte, its body within {body}s of its headers.",
    413: "The request's headers are larger than {size} bytes.",
    414: "The request line is larger than {size} bytes.",
    501: wsgi.UNSUPPORTED_TRANSFER_CODING[0],
}


@dataclasses.dataclass(frozen=True)
class Guards:
    """The limits (the ``[api]`` options of the same names)."""

    header_timeout: float = 10.0
    body_timeout: float = 60.0
    max_connections: int = 1000
    max_client_connections: int = 100
    # Bodies up to this size are read ahead with the headers, before a worker takes them.
    read_ahead: int = 1024 * 1024


def _body_end(head: bytes, start: int, limit: int) -> int:
    """Where the body of the request whose headers are ``head`` ends, its headers ending
    at ``start``; -1 when it is not to be read ahead: larger than ``limit``, of unknown
    length (chunked), or awaited by a client expecting 100 Continue first."""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name in (b"transfer-encoding", b"expect"):
            return -1
        if name == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return -1  # the reader answers 400
    return start + length if 0 <= length <= limit else -1


class _DeadlineSocket:
    """The socket as the request reader sees it: first the bytes read ahead (the headers,
    read by the connection manager), then the socket, each read failing once the
    connection's deadline has passed (``socket.timeout``: cheroot answers 408)."""

    def __init__(self, sock: socket.socket, conn: GuardedConnection) -> None:
        self._sock = sock
        self._conn = conn

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        conn = self._conn
        if conn.ahead:
            size = min(len(buffer), nbytes or len(buffer), len(conn.ahead))
            buffer[:size] = conn.ahead[:size]
            del conn.ahead[:size]
            return size
        timeout = conn.server.timeout
        if conn.deadline is not None:
            left = conn.deadline - time.monotonic()
            if left <= 0:
                conn.timed_out = True
                raise TimeoutError("timed out")  # cheroot's words for a timeout
            timeout = min(timeout, left)
        self._sock.settimeout(timeout)
        try:
            size = self._sock.recv_into(buffer, nbytes, flags)
            if conn.deadline is not None and conn.in_body:
                # Each read_ahead bytes of a large body earn body_timeout more: an image
                # upload goes on at least that fast, however large (doc/limits.md).
                guards = conn.server.guards
                conn.body_read += size
                if conn.body_read >= guards.read_ahead:
                    conn.body_read -= guards.read_ahead
                    conn.deadline += guards.body_timeout
            return size
        except TimeoutError:
            conn.timed_out = True
            raise TimeoutError("timed out") from None
        finally:
            self._sock.settimeout(conn.server.timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class GuardedRequest(cheroot_server.HTTPRequest):
    conn: GuardedConnection
    server: GuardedServer

    def __init__(self, server: Any, conn: Any, proxy_mode: bool = False, strict_mode: bool = True):
        super().__init__(server, conn, proxy_mode, strict_mode)
        self.max_request_header_size = MAX_HEADER_SIZE

    def parse_request(self) -> None:
        guards = self.server.guards
        conn = self.conn
        if conn.deadline is None:  # read ahead already set it from the first byte
            conn.deadline = time.monotonic() + guards.header_timeout
        super().parse_request()
        conn.deadline = time.monotonic() + guards.body_timeout
        conn.in_body = True
        conn.body_read = 0

    def send_headers(self) -> None:
        # NOTE: cheroot reads the rest of a body the application left unread, to keep
        # the connection: a refused 30 MiB body was read anyway (or a slow one waited
        # for). Closing costs the client a new connection instead.
        if getattr(self.rfile, "remaining", 0) > 0 or self.chunked_read or self.conn.timed_out:
            self.close_connection = True
        super().send_headers()

    def simple_response(self, status: Any, msg: Any = "") -> None:
        """cheroot's own refusals, in the API's error format (JSON, a stable code)."""
        line = str(status)
        code = int(line[:3])
        guards = self.server.guards
        message = _MESSAGES.get(code, "").format(
            header=guards.header_timeout, body=guards.body_timeout, size=MAX_HEADER_SIZE
        )
        if isinstance(msg, bytes):
            msg = msg.decode("ISO-8859-1")
        message = msg or message or line
        body = wsgi.error_body(code, message, _CODES.get(code, "exosuit.request.refused"))
        if code >= 400:
            self.close_connection = True
        head = (
            f"{self.server.protocol} {line}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        try:
            self.conn.wfile.write(head.encode("ISO-8859-1") + body)
        except OSError:
            pass  # the client left: nothing to tell


class GuardedConnection(cheroot_server.HTTPConnection):
    RequestHandlerClass = GuardedRequest
    server: GuardedServer

    def __init__(self, server: Any, sock: Any, makefile: Any = MakeFile) -> None:
        # What the manager read ahead of the request reader; the deadline of the read in
        # progress (headers, then body); whether a read missed it.
        self.ahead = bytearray()
        self.deadline: float | None = None
        # Whether the request reader reads a body, and how much of it since its deadline
        # was last moved.
        self.in_body = False
        self.body_read = 0
        self.timed_out = False
        # Where the body read ahead ends in ``ahead`` (-1: it is not read ahead).
        self.body_end: int | None = None
        self.admitted = False
        self._released = False
        super().__init__(server, sock, makefile)
        self.rfile = makefile(_DeadlineSocket(sock, self), "rb", self.rbufsize)

    def communicate(self) -> bool:
        try:
            return bool(super().communicate())  # type: ignore[no-untyped-call]
        finally:
            self.deadline = None  # until the next request's first byte
            self.in_body = False

    def read_ahead(self) -> bool | None:
        """Read what has arrived, without blocking. True: the request line and headers
        are all here (or too many to wait for), and its body too when it has a length of
        at most ``read_ahead`` bytes; False: more to wait for; None: the client left, or
        its time is up (answered 408)."""
        # NOTE: not MSG_DONTWAIT alone: Python waits for a socket with a timeout to be
        # readable before it reads, flags or not.
        self.socket.settimeout(0)
        try:
            data = self.socket.recv(65536)
        except BlockingIOError:
            data = None
        except OSError:
            return None
        finally:
            with contextlib.suppress(OSError):
                self.socket.settimeout(self.server.timeout)
        if data == b"":
            return None
        now = time.monotonic()
        guards = self.server.guards
        if self.deadline is None:
            self.deadline = now + guards.header_timeout
        if data:
            self.ahead += data
        end = self.ahead.find(b"\r\n\r\n")
        if end < 0:
            if len(self.ahead) > MAX_HEADER_SIZE:
                return True  # the reader answers 413
        else:
            if self.body_end is None:
                self.body_end = _body_end(bytes(self.ahead[:end]), end + 4, guards.read_ahead)
                self.deadline = now + guards.body_timeout
            if self.body_end < 0 or len(self.ahead) >= self.body_end:
                self.body_end = None
                return True
        if now >= self.deadline:
            self.refuse(408)
            return None
        return False

    def refuse(self, status: int, message: str = "") -> None:
        request = GuardedRequest(self.server, self)
        text = {408: "408 Request Timeout", 503: "503 Service Unavailable"}[status]
        try:
            self.socket.settimeout(1)  # a reply a client does not read is dropped
            request.simple_response(text, message)
        except OSError:
            pass

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.admitted and not self._released:
                self._released = True
                self.server.release(self)


class GuardedServer(cheroot_wsgi.Server):
    """A cheroot WSGI server with the guards of this module."""

    ConnectionClass = GuardedConnection

    def __init__(self, *args: Any, guards: Guards | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guards = guards or Guards()
        self._open: Counter[str] = Counter()
        self._open_lock = threading.Lock()
        self.refused = 0  # connections refused by the bounds (for tests and logs)

    def process_conn(self, conn: GuardedConnection) -> None:
        """Called by the connection manager for a new connection and for one with bytes
        to read: hand it to a worker once its headers are all here."""
        if not conn.admitted and not self._admit(conn):
            return
        if not conn.rfile.has_data():
            ready = conn.read_ahead()
            if ready is None:
                conn.close()
                return
            if not ready:
                # Back to the selector (cheroot's connection manager), for its next bytes.
                self._connections.put(conn)  # type: ignore[attr-defined]
                return
        super().process_conn(conn)

    def put_conn(self, conn: GuardedConnection) -> None:
        """A connection whose request is answered: to the selector until its next bytes,
        unless they are here already (read ahead with the last request's)."""
        if conn.ahead and self.ready:
            self.process_conn(conn)
        else:
            super().put_conn(conn)

    def _admit(self, conn: GuardedConnection) -> bool:
        client = str(conn.remote_addr)
        with self._open_lock:
            total = sum(self._open.values())
            busy = (
                "the server's"
                if total >= self.guards.max_connections
                else "your address's"
                if self._open[client] >= self.guards.max_client_connections
                else None
            )
            if busy is None:
                self._open[client] += 1
                conn.admitted = True
                return True
            self.refused += 1
        limit = (
            self.guards.max_connections
            if busy == "the server's"
            else self.guards.max_client_connections
        )
        conn.refuse(
            503,
            f"Too many connections: {busy} limit of {limit} open connections is reached; "
            "retry when one closes.",
        )
        conn.close()
        return False

    def release(self, conn: GuardedConnection) -> None:
        client = str(conn.remote_addr)
        with self._open_lock:
            self._open[client] -= 1
            if self._open[client] <= 0:
                del self._open[client]

    def open_connections(self) -> int:
        with self._open_lock:
            return sum(self._open.values())
