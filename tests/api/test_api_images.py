"""The catalogue's data through the API (microversion 2.6), on SQLite, PostgreSQL and
MariaDB: uploads stream in chunks and are bounded, verified against their hash and
signature (keys made here), downloaded whole or from a byte on, by users and agents;
an image a program uses is not deleted. tests/gabbits/images.yaml tells the story;
this covers what needs bytes, keys and concurrency."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import threading
import uuid

import pytest
import sqlalchemy as sa
import webob
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from exosuit.api.router import ROUTES
from exosuit.db import models
from exosuit.images import verify
from tests.conftest import PERSONAS

VERSION = "2.6"
DATA = os.urandom(3 * verify.CHUNK_SIZE + 1234)  # several chunks
SHA256 = hashlib.sha256(DATA).hexdigest()


class Input(io.RawIOBase):
    """A request body as a server hands it over (not seekable), recording the largest
    read the API asked for: the upload must never ask for all of it at once."""

    def __init__(self, data: bytes) -> None:
        self.stream = io.BytesIO(data)
        self.largest_read = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.largest_read = max(
            self.largest_read, len(self.stream.getvalue()) if size < 0 else size
        )
        return self.stream.read(size)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _request(api, method: str, path: str, headers=None, **environ) -> webob.Response:
    req = webob.Request.blank(path, method=method, environ=environ or None)
    req.headers["OpenStack-API-Version"] = f"accelerator {VERSION}"
    for key, value in (headers or {}).items():
        req.headers[key] = value
    return req.get_response(api.app)


def upload(api, image: str, data: bytes, *, length: bool = True, headers=None):
    """PUT the data as a streamed body: with a Content-Length, or chunked without one."""
    body = Input(data)
    environ = {"wsgi.input": body, "CONTENT_TYPE": "application/octet-stream"}
    if length:
        environ["CONTENT_LENGTH"] = str(len(data))
    else:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
        environ["wsgi.input_terminated"] = True
    response = _request(api, "PUT", f"/v2/images/{image}/file", headers, **environ)
    return response, body


def create(api, headers=None, **fields) -> dict:
    body = {"name": "bitstream", "format": "gbs", **fields}
    r = api.post("/v2/images", body, version=VERSION, headers=headers)
    assert r.status_code == 201, r.text
    return r.json


def image(api, uuid: str) -> dict:
    r = api.get(f"/v2/images/{uuid}", version=VERSION)
    assert r.status_code == 200, r.text
    return r.json


def error(r) -> dict:
    return json.loads(r.json["error_message"])


@pytest.fixture
def conf(conf, tmp_path):
    conf.set_override("state_path", str(tmp_path / "state"))
    return conf


def data_files(conf, uuid: str) -> list[str]:
    folder = os.path.join(conf.images.data_dir, uuid)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_upload_streams_in_chunks_and_download_gives_it_back(api, conf):
    new = create(api, sha256=SHA256)
    r, body = upload(api, new["uuid"], DATA)
    assert r.status_code == 204, r.text
    assert body.largest_read <= verify.CHUNK_SIZE
    shown = image(api, new["uuid"])
    assert (shown["status"], shown["size"], shown["sha256"]) == ("active", len(DATA), SHA256)
    assert data_files(conf, new["uuid"]) == [SHA256]  # the file is named by its hash
    r = api.get(f"/v2/images/{new['uuid']}/file", version=VERSION)
    assert r.status_code == 200 and r.body == DATA
    assert r.headers["ETag"] == f'"{SHA256}"' and r.headers["Accept-Ranges"] == "bytes"
    r = api.get(
        f"/v2/images/{new['uuid']}/file", version=VERSION, headers={"Range": "bytes=1000000-"}
    )
    assert r.status_code == 206 and r.body == DATA[1000000:]
    assert r.headers["Content-Range"] == f"bytes 1000000-{len(DATA) - 1}/{len(DATA)}"


def test_chunked_upload_without_a_length(api):
    new = create(api)
    r, _ = upload(api, new["uuid"], DATA, length=False)
    assert r.status_code == 204, r.text
    assert image(api, new["uuid"])["sha256"] == SHA256


def test_agent_reads_the_data_whole_and_resumes(api):
    new = create(api, visibility="private")
    assert upload(api, new["uuid"], DATA)[0].status_code == 204
    agent = api.as_(PERSONAS["service"])  # another project's service user: any image
    r = agent.get(f"/agent/v1/images/{new['uuid']}/data")
    assert r.status_code == 200 and r.body == DATA and r.headers["ETag"] == f'"{SHA256}"'
    r = agent.get(
        f"/agent/v1/images/{new['uuid']}/data", headers={"Range": f"bytes={len(DATA) - 7}-"}
    )
    assert r.status_code == 206 and r.body == DATA[-7:]


def test_too_large_by_its_length_or_by_its_bytes(api, conf):
    conf.set_override("max_size", len(DATA) - 1, group="images")
    new = create(api)
    r, body = upload(api, new["uuid"], DATA)
    assert r.status_code == 413, r.text
    assert error(r)["code"] == "exosuit.image.too_large"
    assert body.largest_read == 0  # refused on its Content-Length, before reading
    r, body = upload(api, new["uuid"], DATA, length=False)
    assert r.status_code == 413, r.text
    assert body.largest_read <= verify.CHUNK_SIZE
    assert image(api, new["uuid"])["status"] == "queued"
    assert data_files(conf, new["uuid"]) == []  # nothing left behind


def test_a_cut_upload_or_an_empty_one_is_refused(api, conf):
    new = create(api)
    body = Input(DATA[:1000])
    environ = {"wsgi.input": body, "CONTENT_LENGTH": str(len(DATA))}
    r = _request(api, "PUT", f"/v2/images/{new['uuid']}/file", **environ)
    assert r.status_code == 400, r.text
    assert "the upload was cut" in error(r)["faultstring"]
    r, _ = upload(api, new["uuid"], b"")
    assert r.status_code == 400 and "it has no data" in error(r)["faultstring"]
    assert image(api, new["uuid"])["status"] == "queued"
    assert data_files(conf, new["uuid"]) == []


def test_concurrent_uploads_of_different_data_have_one_winner(api, conf):
    new = create(api)
    datas = [DATA[:-1] + bytes([n]) for n in range(4)]
    statuses: list[int] = []
    barrier = threading.Barrier(len(datas))

    def put(data: bytes) -> None:
        barrier.wait(timeout=60)
        statuses.append(upload(api, new["uuid"], data)[0].status_code)

    threads = [threading.Thread(target=put, args=(d,)) for d in datas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(statuses) == [204, 409, 409, 409]
    winner = image(api, new["uuid"])["sha256"]
    assert data_files(conf, new["uuid"]) == [winner]
    r = api.get(f"/v2/images/{new['uuid']}/file", version=VERSION)
    assert hashlib.sha256(r.body).hexdigest() == winner


def test_delete_removes_the_data_and_waits_for_programs(api, conf, database):
    new = create(api)
    assert upload(api, new["uuid"], DATA)[0].status_code == 204
    program = str(uuid.uuid4())
    programs = models.programs
    database.write(
        lambda conn: conn.execute(
            sa.insert(programs).values(
                uuid=program,
                hostname="host1",
                image_uuid=new["uuid"],
                image_source="exosuit",
                state="programming",
                created_at=models.utcnow(),
            )
        )
    )
    r = api.delete(f"/v2/images/{new['uuid']}", version=VERSION)
    assert r.status_code == 409 and error(r)["code"] == "exosuit.image.in_use"
    assert program in error(r)["faultstring"]
    database.write(
        lambda conn: conn.execute(
            sa.update(programs).where(programs.c.uuid == program).values(state="done")
        )
    )
    assert api.delete(f"/v2/images/{new['uuid']}", version=VERSION).status_code == 204
    assert not os.path.exists(os.path.join(conf.images.data_dir, new["uuid"]))


# -- signatures -------------------------------------------------------------------------------


@pytest.fixture
def keys(conf, tmp_path):
    """Two trusted keys, an RSA one and an EC one, in [images] trusted_keys."""
    private = {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec": ec.generate_private_key(ec.SECP256R1()),
    }
    paths = {}
    for name, key in private.items():
        path = tmp_path / f"{name}.pem"
        path.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        paths[name] = str(path)
    conf.set_override("trusted_keys", paths, group="images")
    return private


def _signature(key, algorithm: str, data: bytes = DATA) -> str:
    if algorithm == "ECDSA-SHA384":
        value = key.sign(data, ec.ECDSA(hashes.SHA384()))
    else:
        pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.MAX_LENGTH)
        value = key.sign(data, pss, hashes.SHA256())
    return base64.b64encode(value).decode()


@pytest.mark.parametrize(("key", "algorithm"), [("rsa", "RSA-PSS-SHA256"), ("ec", "ECDSA-SHA384")])
def test_a_signed_upload_verifies(api, keys, key, algorithm):
    signature = {"key_id": key, "value": _signature(keys[key], algorithm), "algorithm": algorithm}
    new = create(api, signature=signature)
    assert new["signed"] is True and new["signature_key_id"] == key
    assert upload(api, new["uuid"], DATA)[0].status_code == 204
    assert image(api, new["uuid"])["status"] == "active"


def test_a_wrong_signature_is_refused_and_the_image_stays_queued(api, keys, conf):
    value = _signature(keys["rsa"], "RSA-PSS-SHA256", DATA + b"other")
    new = create(api, signature={"key_id": "rsa", "value": value, "algorithm": "RSA-PSS-SHA256"})
    r, _ = upload(api, new["uuid"], DATA)
    assert r.status_code == 400, r.text
    assert error(r)["code"] == "exosuit.image.signature"
    assert "does not verify with key 'rsa'" in error(r)["faultstring"]
    assert image(api, new["uuid"])["status"] == "queued"
    assert data_files(conf, new["uuid"]) == []


def test_a_signature_by_an_unknown_key_is_refused_at_creation(api, keys):
    value = _signature(keys["rsa"], "RSA-PSS-SHA256")
    body = {"name": "b", "format": "gbs"}
    body["signature"] = {"key_id": "nobody", "value": value, "algorithm": "RSA-PSS-SHA256"}
    r = api.post("/v2/images", body, version=VERSION)
    assert r.status_code == 400 and error(r)["code"] == "exosuit.image.signature"
    assert (
        "names key 'nobody', which is not trusted ([images] trusted_keys: ec, rsa)"
        in (error(r)["faultstring"])
    )


def test_required_signature(api, keys, conf):
    conf.set_override("require_signature", True, group="images")
    r = api.post("/v2/images", {"name": "b", "format": "gbs"}, version=VERSION)
    assert r.status_code == 400 and error(r)["code"] == "exosuit.image.signature"
    assert "is missing, and [images] require_signature is set" in error(r)["faultstring"]


def test_a_signature_required_after_creation_is_checked_at_upload(api, keys, conf):
    new = create(api)
    conf.set_override("require_signature", True, group="images")
    r, _ = upload(api, new["uuid"], DATA)
    assert r.status_code == 400 and error(r)["code"] == "exosuit.image.signature"


# -- microversions ----------------------------------------------------------------------------

IMAGE_ROUTES = [
    (path, method)
    for path, methods in ROUTES.items()
    if path.startswith("/v2/images")
    for method in methods
]


@pytest.mark.parametrize(("path", "method"), IMAGE_ROUTES)
def test_images_are_masked_before_2_6_whoever_asks(sqlite_api, path, method):
    """Below 2.6 an image path is an unknown path (404), before any policy check."""
    path = path.replace("{uuid}", str(uuid.uuid4())).replace("{project_id}", "p2")
    for persona in ("admin", "reader"):
        r = sqlite_api.as_(PERSONAS[persona]).request(method, path, version="2.5")
        assert r.status_code == 404, r.text
        assert error(r)["code"] == "exosuit.not_found"
