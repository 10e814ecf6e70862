"""``exosuit image …`` (API 2.6) against a real ``exosuit serve`` that trusts one RSA key
(made here): upload (hash given at creation, signature checked by the server, progress
on a terminal), list, show by name or UUID, delete; checked against the API.

An upload that does not end (Ctrl-C, a refusal, a lost connection) deletes the image it
created. To stop one half-way, the command line talks to the server through ``Relay``,
a small HTTP relay in the test that forwards every request but the upload of an image's
data, which it holds until the command is interrupted, or drops."""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import signal
import subprocess
import threading

import pytest
import requests
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from exosuit.cli.images import PROGRESS_FROM, ImageList
from tests.cli.conftest import CLI, cli_env, pick, run_on_terminal, write_conf
from tests.helpers.serve_fixture import ExosuitServer

pytestmark = pytest.mark.slow

VERSION = "2.6"
DEADLINE = 60.0


@pytest.fixture(scope="module")
def key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def server(tmp_path_factory, key):
    base = tmp_path_factory.mktemp("exosuit-cli-images")
    pem = base / "release.pem"
    pem.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    conf = write_conf(base / "exosuit.conf", f"[images]\ntrusted_keys = release:{pem}\n")
    started = ExosuitServer(base / "data", [conf])
    try:
        yield started.start()
    finally:
        started.kill()


@pytest.fixture(scope="module")
def cli(server) -> CLI:
    return CLI(server.url)


def _image(server, uuid: str) -> dict | None:
    r = requests.get(
        f"{server.url}/v2/images/{uuid}",
        headers={"OpenStack-API-Version": f"accelerator {VERSION}"},
        timeout=10,
    )
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json()


def _download(server, uuid: str) -> bytes:
    r = requests.get(
        f"{server.url}/v2/images/{uuid}/file",
        headers={"OpenStack-API-Version": f"accelerator {VERSION}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.content


def _sign(key, data: bytes) -> bytes:
    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.MAX_LENGTH)
    return key.sign(data, pss, hashes.SHA256())


def test_upload_list_show_delete_round_trip(cli, server, tmp_path):
    data = os.urandom(300_000)
    path = tmp_path / "afu.gbs"
    path.write_bytes(data)
    function = "d8424dc4-a4a9-4e29-9e2a-df0bbc0e2c8e"
    shown = cli.json(
        "image",
        "upload",
        str(path),
        "--name",
        "cli-afu",
        "--image-format",
        "gbs",
        "--function-id",
        function,
        "--vendor",
        "0x8086",
        "--visibility",
        "public",
    )
    assert shown["status"] == "active" and shown["size"] == len(data)
    assert shown["sha256"] == hashlib.sha256(data).hexdigest()
    assert (shown["function_id"], shown["vendor"], shown["visibility"]) == (
        function,
        "0x8086",
        "public",
    )
    stored = _image(server, shown["uuid"])
    assert shown == {k: v for k, v in stored.items() if k != "links"}
    assert _download(server, shown["uuid"]) == data

    assert cli.json("image", "show", "cli-afu") == shown
    assert cli.json("image", "show", shown["uuid"]) == shown
    listed = cli.json("image", "list", "--function-id", function)
    assert listed == pick([stored], ImageList.columns)

    deleted = cli.json("image", "delete", "cli-afu")
    assert deleted == [{"uuid": shown["uuid"], "name": "cli-afu"}]
    assert _image(server, shown["uuid"]) is None
    gone = cli.run("image", "show", "cli-afu", check=False)
    assert gone.returncode == 1
    assert gone.stderr.count("\n") == 1 and "(HTTP 404, exosuit.image.not_found)" in gone.stderr


@pytest.mark.parametrize("encoding", ["raw", "base64"])
def test_a_signed_upload_is_verified_by_the_server(cli, server, tmp_path, key, encoding):
    data = os.urandom(50_000)
    path, signature = tmp_path / f"signed-{encoding}.gbs", tmp_path / f"sig-{encoding}"
    path.write_bytes(data)
    value = _sign(key, data)
    signature.write_bytes(value if encoding == "raw" else base64.b64encode(value) + b"\n")
    shown = cli.json(
        "image",
        "upload",
        str(path),
        "--name",
        f"signed-{encoding}",
        "--image-format",
        "gbs",
        "--signature-file",
        str(signature),
        "--key-id",
        "release",
        "--algorithm",
        "RSA-PSS-SHA256",
    )
    assert shown["status"] == "active" and shown["signed"] is True
    assert shown["signature_key_id"] == "release"


def test_a_wrong_signature_is_refused_on_one_line(cli, server, tmp_path, key):
    path, signature = tmp_path / "tampered.gbs", tmp_path / "tampered.sig"
    path.write_bytes(b"the data as uploaded")
    signature.write_bytes(_sign(key, b"the data as signed"))
    result = cli.run(
        "image",
        "upload",
        str(path),
        "--name",
        "tampered",
        "--image-format",
        "gbs",
        "--signature-file",
        str(signature),
        "--key-id",
        "release",
        check=False,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "does not verify with key 'release'" in result.stderr
    assert "(HTTP 400, exosuit.image.signature)" in result.stderr
    # The image created for the data is deleted again: nothing is left half-made.
    assert cli.json("image", "list", "--name", "tampered") == []
    uuid = result.stderr.rstrip("\n").split("; image ")[1].removesuffix(" was deleted")
    assert result.stderr.endswith(f"; image {uuid} was deleted\n"), result.stderr
    assert _image(server, uuid) is None


def test_a_signature_without_its_key_is_refused_before_anything_is_sent(cli, tmp_path):
    path = tmp_path / "lonely.gbs"
    path.write_bytes(b"data")
    result = cli.run(
        "image",
        "upload",
        str(path),
        "--name",
        "lonely",
        "--image-format",
        "gbs",
        "--signature-file",
        str(path),
        check=False,
    )
    assert result.returncode == 1
    assert "--signature-file and --key-id go together" in result.stderr
    assert cli.json("image", "list", "--name", "lonely") == []


def test_a_large_upload_shows_its_progress_on_a_terminal(cli, server, tmp_path):
    data = os.urandom(PROGRESS_FROM + 1234)
    path = tmp_path / "large.xclbin"
    path.write_bytes(data)
    code, output = run_on_terminal(
        [cli.script, "--os-endpoint", cli.url, "image", "upload", str(path), "--name", "large"]
        + ["--image-format", "xclbin", "-c", "status"],
        columns=120,
        env=cli_env(),
    )
    assert code == 0, output
    assert "uploading large: 100% (4.0 of 4.0 MiB)" in output
    assert "active" in output
    (image,) = cli.json("image", "list", "--name", "large")
    assert _download(server, image["uuid"]) == data


def test_images_need_api_2_6(cli):
    result = cli.run("--os-accelerator-api-version", "2.5", "image", "list", check=False)
    assert result.returncode == 1
    assert "`exosuit image list` needs API 2.6" in result.stderr


# -- an upload that does not end -------------------------------------------------------------

# Not forwarded either way: they are about one hop, or recomputed.
HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}
)


class Relay(http.server.ThreadingHTTPServer):
    """Forwards each request to ``target``, except the upload of an image's data (``PUT
    …/file``): ``hold`` keeps it unanswered until the relay closes, ``drop`` closes its
    connection at once. ``refuse_deletes``: a DELETE is answered 503 instead."""

    daemon_threads = True

    def __init__(self, target: str, upload: str, refuse_deletes: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Relaying)
        self.target = target
        self.upload = upload
        self.refuse_deletes = refuse_deletes
        self.uploading = threading.Event()
        self.closing = threading.Event()
        self.deletes: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=10)


class _Relaying(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Relay

    def log_message(self, format, *args) -> None:  # noqa: A002 (BaseHTTPRequestHandler's name)
        pass

    def relay(self) -> None:
        relay = self.server
        if self.command == "PUT" and self.path.endswith("/file"):
            relay.uploading.set()
            if relay.upload == "hold":
                relay.closing.wait(DEADLINE)
            self.close_connection = True  # no answer: the connection closes
            return
        if self.command == "DELETE":
            relay.deletes.append(self.path)
            if relay.refuse_deletes:
                self.answer(503, b'{"error_message": "the relay refuses deletes"}')
                return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        r = requests.request(
            self.command, relay.target + self.path, headers=headers, data=body, timeout=30
        )
        kept = {k: v for k, v in r.headers.items() if k.lower() not in HOP_HEADERS}
        self.answer(r.status_code, r.content, kept)

    def answer(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {"Content-Type": "application/json"}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = relay


def _upload_through(relay: Relay, cli: CLI, path, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [cli.script, "--os-endpoint", relay.url, "image", "upload", str(path), "--name", name,
         "--image-format", "gbs", "-f", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )  # fmt: skip


def _queued(cli: CLI, name: str) -> dict:
    [image] = cli.json("image", "list", "--name", name, "--long")
    assert image["status"] == "queued", image
    return image


def test_ctrl_c_during_the_upload_deletes_the_image(cli, server, tmp_path):
    path = tmp_path / "interrupted.gbs"
    path.write_bytes(os.urandom(200_000))
    with Relay(server.url, "hold") as relay:
        process = _upload_through(relay, cli, path, "interrupted")
        try:
            assert relay.uploading.wait(DEADLINE), "the data was never sent"
            # The image exists, without data, while its upload is on the way.
            image = _queued(cli, "interrupted")
            process.send_signal(signal.SIGINT)  # as Ctrl-C
            stdout, stderr = process.communicate(timeout=DEADLINE)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 130, stderr
    assert stdout == ""
    assert stderr == f"upload interrupted: image {image['uuid']} was deleted\n"
    assert relay.deletes == [f"/v2/images/{image['uuid']}"]
    assert _image(server, image["uuid"]) is None
    assert cli.json("image", "list", "--name", "interrupted") == []


def test_a_lost_connection_during_the_upload_deletes_the_image(cli, server, tmp_path):
    path = tmp_path / "dropped.gbs"
    path.write_bytes(os.urandom(50_000))
    with Relay(server.url, "drop") as relay:
        process = _upload_through(relay, cli, path, "dropped")
        stdout, stderr = process.communicate(timeout=DEADLINE)
    assert process.returncode == 1, stderr
    assert stdout == "" and stderr.count("\n") == 1, stderr
    assert stderr.startswith("error: ")
    [deleted] = relay.deletes
    uuid = deleted.removeprefix("/v2/images/")
    assert stderr.endswith(f"; image {uuid} was deleted\n"), stderr
    assert _image(server, uuid) is None


def test_an_image_that_cannot_be_deleted_is_named_with_the_command_that_deletes_it(
    cli, server, tmp_path
):
    path = tmp_path / "stuck.gbs"
    path.write_bytes(os.urandom(50_000))
    with Relay(server.url, "drop", refuse_deletes=True) as relay:
        process = _upload_through(relay, cli, path, "stuck")
        _, stderr = process.communicate(timeout=DEADLINE)
    assert process.returncode == 1, stderr
    image = _queued(cli, "stuck")
    assert stderr.count("\n") == 1, stderr
    assert stderr.endswith(
        f"; image {image['uuid']} was created without data and could not be deleted "
        f"(the relay refuses deletes (HTTP 503)): `exosuit image delete {image['uuid']}`\n"
    ), stderr
    # What the message says to run does it.
    assert cli.json("image", "delete", image["uuid"]) == [{"uuid": image["uuid"], "name": "stuck"}]
    assert _image(server, image["uuid"]) is None
