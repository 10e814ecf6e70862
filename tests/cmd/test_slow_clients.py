"""Issue 24 through the real servers: exosuit serve (cheroot, guarded) and exosuit-api
under granian (its default server), real processes on loopback.

- Slow clients (item 2): 64 connections sending a byte every 2 s (half their headers,
  half their bodies) held every thread before; now ordinary GETs are answered meanwhile
  and the server closes the slow connections itself ([api] header_timeout, body_timeout).
  exosuit serve also bounds the connections of one client address (503 beyond).
- Refusals (items 4, 6): a body over the limit is answered 413 from its Content-Length
  while the client has sent almost none of it; an invalid 8 MiB body gets a small 400; a
  body in gzip transfer coding gets the API's error format from exosuit serve (501).

Times asserted are generous client timeouts, never durations."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from bench._common import api_server
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.serve_fixture import ExosuitServer

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
SLOW = 64
CLIENT_TIMEOUT = 30.0  # an ordinary GET answered within this is "prompt"
CLOSE_DEADLINE = 120.0  # the server closes the slow connections within this (generous)
API_SETTINGS = "header_timeout = 5\nbody_timeout = 5\nmax_client_connections = 70\n"


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    config = folder / "exosuit.conf"
    config.write_text(f"[api]\n{API_SETTINGS}")
    server = ExosuitServer(folder / "data", [config]).start()
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture(scope="module")
def granian(tmp_path_factory):
    db_url = f"sqlite:///{tmp_path_factory.mktemp('granian')}/api.sqlite"
    with api_server(db_url, workers=2, threads=4, extra=f"server = granian\n{API_SETTINGS}") as (
        url,
        _,
    ):
        yield url


@pytest.fixture(params=["serve", "granian"])
def url(request):
    return request.getfixturevalue(request.param)


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=CLIENT_TIMEOUT) as response:
        response.read()
        return int(response.status)


class Dripper:
    """``count`` connections from ``source``, each sent one byte every 2 s: half of them
    their request line and headers, half (after whole headers) their body."""

    def __init__(self, url: str, count: int, source: str = "127.0.0.2") -> None:
        self.sockets: list[socket.socket] = []
        self.pending: dict[socket.socket, bytes] = {}
        self.stopped = threading.Event()
        for i in range(count):
            sock = socket.socket()
            sock.bind((source, 0))
            sock.connect(_address(url))
            if i % 2:
                sock.sendall(
                    b"PUT /agent/v1/hosts/h1/inventory HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                )
                self.pending[sock] = b"{" * 200
            else:
                self.pending[sock] = b"GET /v2/devices HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200
            self.sockets.append(sock)
        self.thread = threading.Thread(target=self._drip, name="dripper", daemon=True)
        self.thread.start()

    def _drip(self) -> None:
        while not self.stopped.wait(2):
            for sock, rest in list(self.pending.items()):
                if not rest:
                    continue
                with contextlib.suppress(OSError):
                    sock.send(rest[:1])
                self.pending[sock] = rest[1:]

    def wait_closed(self, deadline: float) -> list[bytes]:
        """What each connection received until the server closed it."""
        received = []
        for sock in self.sockets:
            data = b""
            while True:
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    break
                except TimeoutError:
                    pytest.fail(f"a slow connection is still open: {data!r}")
                if not chunk:
                    break
                data += chunk
            received.append(data)
        return received

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        for sock in self.sockets:
            sock.close()


def test_ordinary_gets_are_answered_while_64_slow_connections_are_held(url):
    dripper = Dripper(url, SLOW)
    try:
        time.sleep(3)  # every slow connection has sent something (no assertion on time)
        for _ in range(5):
            assert _get(url + "/v2/devices") == 200
        received = dripper.wait_closed(time.monotonic() + CLOSE_DEADLINE)
    finally:
        dripper.close()
    # Those the server answered before closing were told why, in the API's format.
    for data in received:
        if data:
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408"), data
            assert b"exosuit.request.timeout" in body, data


def test_exosuit_serve_bounds_the_connections_of_one_client(serve):
    """max_client_connections = 70: of 75 idle connections from one address, 5 are
    answered 503 at once; another address is served meanwhile."""
    sockets = []
    try:
        for _ in range(75):
            sock = socket.socket()
            sock.bind(("127.0.0.3", 0))
            sock.connect(_address(serve))
            sock.settimeout(CLIENT_TIMEOUT)
            sockets.append(sock)
        refused = []
        for sock in sockets[-5:]:
            data = sock.recv(65536)
            refused.append(data)
        assert _get(serve + "/v2/devices") == 200
    finally:
        for sock in sockets:
            sock.close()
    for data in refused:
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503"), data
        fault = json.loads(json.loads(body)["error_message"])
        assert fault["code"] == "exosuit.connections.busy"
        assert "limit of 70 open connections" in fault["faultstring"]


def _exchange(url: str, head: bytes, body: bytes = b"") -> tuple[bytes, dict]:
    """Send ``head`` and ``body`` (perhaps less than announced); the status line and the
    inner fault of the answer, which must come and be small."""
    with socket.create_connection(_address(url), timeout=CLIENT_TIMEOUT) as sock:
        sock.sendall(head + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data:
                header, _, rest = data.partition(b"\r\n\r\n")
                length = [
                    int(line.split(b":")[1])
                    for line in header.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ]
                if length and len(rest) >= length[0]:
                    break
    header, _, rest = data.partition(b"\r\n\r\n")
    assert len(rest) < 4096, len(rest)
    return header.split(b"\r\n")[0], json.loads(json.loads(rest)["error_message"])


def test_a_body_over_the_limit_is_refused_from_its_content_length(url):
    head = (
        b"PUT /agent/v1/hosts/h1/inventory HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (40 * MiB)
    )
    status, fault = _exchange(url, head, b"[" * 1024)  # 1 KiB of the 40 MiB announced
    assert status.startswith(b"HTTP/1.1 413")
    assert fault["code"] == "exosuit.body.too_large"


def test_an_invalid_8_mib_body_gets_a_small_answer(url):
    report = snapshot("h1", [fpga("0000:0c:00.0")])
    report["devices"][0]["model"] = "x" * (8 * MiB)
    body = json.dumps(report).encode()
    head = (
        b"PUT /agent/v1/hosts/h1/inventory HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    status, fault = _exchange(url, head, body)
    assert status.startswith(b"HTTP/1.1 400")
    assert fault["code"] == "exosuit.body.invalid"


def test_a_gzip_transfer_coding_gets_the_apis_error_format(serve):
    """exosuit serve's HTTP server refused it with an empty plain-text 501. (granian's
    HTTP library refuses it before the application, with an empty 400: not ours to word.)"""
    head = (
        b"POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: gzip\r\n\r\n"
    )
    status, fault = _exchange(serve, head, b"\x1f\x8b\x08\x00")
    assert status.startswith(b"HTTP/1.1 501"), status
    assert fault["code"] == "exosuit.request.transfer_encoding"
    assert "only chunked" in fault["faultstring"]


def test_an_image_larger_than_every_body_limit_still_uploads(url):
    """What is not read ahead (40 MiB: over the largest body limit) streams to the
    application, each MiB earning more time."""
    import hashlib
    import os

    headers = {"Content-Type": "application/json", "OpenStack-API-Version": "accelerator 2.6"}
    create = urllib.request.Request(
        url + "/v2/images", json.dumps({"name": "big", "format": "gbs"}).encode(), headers
    )
    with urllib.request.urlopen(create, timeout=CLIENT_TIMEOUT) as response:
        image = json.loads(response.read())["uuid"]
    data = os.urandom(40 * MiB)
    upload = urllib.request.Request(
        f"{url}/v2/images/{image}/file",
        data,
        {**headers, "Content-Type": "application/octet-stream"},
        method="PUT",
    )
    with urllib.request.urlopen(upload, timeout=120) as response:
        assert response.status == 204
    download = urllib.request.Request(f"{url}/v2/images/{image}/file", headers=headers)
    with urllib.request.urlopen(download, timeout=120) as response:
        assert hashlib.sha256(response.read()).digest() == hashlib.sha256(data).digest()
