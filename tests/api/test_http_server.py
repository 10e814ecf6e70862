"""exosuit serve's guarded cheroot (exosuit/api/http_server.py) with a small WSGI app, in
this process: what the read ahead must keep working (keep-alive, pipelining, bodies,
``Expect: 100-continue``) and what it refuses (a request too slow, in the API's format).
The same server under a slow-client load: tests/cmd/test_slow_clients.py."""

from __future__ import annotations

import http.client
import json
import socket
import threading

import pytest

from exosuit.api.http_server import GuardedServer, Guards


def _echo(environ, start_response):
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    data = json.dumps({"path": environ["PATH_INFO"], "body": body.decode()}).encode()
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]


@pytest.fixture
def server():
    guarded = GuardedServer(
        ("127.0.0.1", 0), _echo, numthreads=2, guards=Guards(header_timeout=2, body_timeout=2)
    )
    guarded.prepare()
    thread = threading.Thread(target=guarded.serve, daemon=True)
    thread.start()
    yield guarded.bind_addr
    guarded.stop()
    thread.join(timeout=30)


def test_keep_alive_and_bodies_work_through_the_read_ahead(server):
    conn = http.client.HTTPConnection(*server, timeout=30)
    for i in range(3):
        conn.request("POST", f"/r{i}", body=b"x" * (i * 50000))
        response = conn.getresponse()
        assert json.loads(response.read()) == {"path": f"/r{i}", "body": "x" * (i * 50000)}
    conn.close()


def test_pipelined_requests_are_each_answered(server):
    with socket.create_connection(server, timeout=30) as sock:
        sock.sendall(
            b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 3
    assert b'"path": "/a"' in data and b'"body": "abc"' in data and b'"path": "/c"' in data


def test_a_client_expecting_100_continue_gets_it(server):
    with socket.create_connection(server, timeout=30) as sock:
        sock.sendall(
            b"PUT /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\n\r\n"
        )
        assert sock.recv(65536).startswith(b"HTTP/1.1 100")
        sock.sendall(b"ok")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert b'"body": "ok"' in data


@pytest.mark.parametrize(
    "sent",
    [b"GET /slow HTTP/1.1\r\nHost: x\r\n", b"PUT /slow HTTP/1.1\r\nContent-Length: 10\r\n\r\nab"],
    ids=["headers", "body"],
)
def test_a_request_that_stops_arriving_is_answered_408_and_closed(server, sent):
    with socket.create_connection(server, timeout=30) as sock:
        sock.sendall(sent)
        # Keep it trickling (one byte a second) so that only the deadline can end it.
        data = b""
        sock.settimeout(1)
        for _ in range(60):
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                try:
                    sock.sendall(b"a")
                except OSError:
                    break
                continue
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), data
    fault = json.loads(json.loads(body)["error_message"])
    assert fault["code"] == "exosuit.request.timeout"
