"""Images from a real Glance (tests/glance/glance_fixture.py: the file store, behind the
tests' real Keystone): resolved with their properties, their data fetched once into the
API's cache and served to agents through /agent/v1, refused when Glance's data is not
what Glance says, found by function id, seen only by those Glance would show them to,
and signatures checked with trusted keys made here."""

from __future__ import annotations

import base64
import hashlib
import os
import uuid

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from exosuit import exceptions
from exosuit.api.deploy import loadapp
from exosuit.conf import make_conf
from exosuit.glance import sources
from exosuit.glance.cache import GlanceCache
from tests.conftest import PERSONAS, ApiClient
from tests.helpers.keystone_fixture import REGION

pytestmark = pytest.mark.slow

KEY_ID = "4c1b0f52-3f1e-4f0b-9c53-7a1f0e5d6a10"  # as Glance names it: a certificate uuid


class Images:
    """Glance's API as the tests' Keystone users call it."""

    def __init__(self, glance, keystone) -> None:
        self.glance = glance
        self.keystone = keystone
        self.sessions: dict[str, object] = {}

    def session(self, user: str):
        if user not in self.sessions:
            self.sessions[user] = self.keystone.session(self.keystone.password(user))
        return self.sessions[user]

    def request(self, user: str, method: str, path: str, **kwargs):
        response = self.session(user).request(
            f"{self.glance.url}{path}", method, raise_exc=False, **kwargs
        )
        assert response.status_code < 300, (
            f"{method} {path}: {response.status_code} {response.text}"
        )
        return response

    def create(self, user: str, data: bytes | None = None, **properties) -> dict:
        body = {"name": "bitstream", "disk_format": "raw", "container_format": "bare"}
        image = self.request(user, "POST", "/v2/images", json={**body, **properties}).json()
        if data is not None:
            self.request(
                user,
                "PUT",
                f"/v2/images/{image['id']}/file",
                data=data,
                headers={"Content-Type": "application/octet-stream"},
            )
        return self.get(user, image["id"])

    def get(self, user: str, image: str) -> dict:
        return self.request(user, "GET", f"/v2/images/{image}").json()

    def patch(self, user: str, image: str, **properties) -> dict:
        ops = [{"op": "add", "path": f"/{k}", "value": v} for k, v in properties.items()]
        return self.request(
            user,
            "PATCH",
            f"/v2/images/{image}",
            json=ops,
            headers={"Content-Type": "application/openstack-images-v2.1-json-patch"},
        ).json()

    def data(self, user: str, image: str) -> bytes:
        return self.request(user, "GET", f"/v2/images/{image}/file").content


@pytest.fixture(scope="module")
def images(glance, keystone) -> Images:
    return Images(glance, keystone)


@pytest.fixture(scope="module")
def signing_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _conf(tmp_path, keystone, glance, extra: str = "", *, service_user: bool = True):
    if service_user:
        user = glance.users["exosuit-glance"]
        access = f"""\
auth_type = password
auth_url = {keystone.url}
username = {user.name}
password = {user.password}
project_name = service
user_domain_name = Default
project_domain_name = Default
region_name = {REGION}
"""
    else:
        access = f"endpoint_override = {glance.url}\n"
    path = tmp_path / f"exosuit-{uuid.uuid4().hex[:8]}.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}/state\n"
        f"[images]\nsources = exosuit, glance\n{extra}\n[glance]\n{access}"
        # New devices ready, as before activation existed: binds program them.
        "[inventory]\nnew_device_activation = ready\n"
    )
    return make_conf([str(path)])


@pytest.fixture
def conf(tmp_path, keystone, glance, signing_key):
    pem = tmp_path / "release.pem"
    pem.write_bytes(
        signing_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return _conf(tmp_path, keystone, glance, f"trusted_keys = {KEY_ID}:{pem}\n")


def _project(keystone, name: str) -> str:
    return keystone.projects[name]


def _properties(function_id: str) -> dict:
    return {
        "vendor": "0x8086",
        "board": "pac_a10",
        "accel:function_id": function_id,
        "interface_id": "69528db6-eb31-577a-8c36-68f9faa081f6",
        "format": "gbs",
    }


def test_a_glance_image_resolves_with_its_properties(images, conf, sqlite_database, keystone):
    data = os.urandom(3 * 1024 * 1024 + 5)
    function = str(uuid.uuid4())
    image = images.create("p1-member", data, name="afu-a", **_properties(function))
    assert image["os_hash_algo"] == "sha512"  # Glance's default: the SHA-256 is ours to find

    ref = sources.resolve_image(
        conf, sqlite_database, image["id"], project_id=_project(keystone, "p1"), is_admin=False
    )

    assert ref == sources.ImageRef(
        uuid=image["id"],
        source="glance",
        name="afu-a",
        format="gbs",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        function_id=function,
        interface_id="69528db6-eb31-577a-8c36-68f9faa081f6",
        vendor="0x8086",
        board="pac_a10",
    )
    cache = GlanceCache(conf.images.cache_dir, conf.images.cache_size)
    assert [f.sha256 for f in cache.store.files()] == [ref.sha256]


def test_agents_get_glance_data_through_the_agent_api(
    images, conf, sqlite_database, glance, keystone
):
    data = os.urandom(2 * 1024 * 1024 + 77)
    image = images.create("p1-member", data, name="afu-b", **_properties(str(uuid.uuid4())))
    agent = ApiClient(loadapp(conf, sqlite_database)).as_(PERSONAS["service"])
    sha256 = hashlib.sha256(data).hexdigest()

    r = agent.get(f"/agent/v1/images/{image['id']}/data")

    assert r.status_code == 200, r.text
    assert r.body == images.data("p1-member", image["id"]) == data
    assert r.headers["ETag"] == f'"{sha256}"' and r.headers["Accept-Ranges"] == "bytes"
    r = agent.get(f"/agent/v1/images/{image['id']}/data", headers={"Range": "bytes=1000-"})
    assert r.status_code == 206 and r.body == data[1000:]

    # Downloaded once: with Glance's copy gone, agents are still served from the cache.
    os.remove(glance.store / image["id"])
    r = agent.get(f"/agent/v1/images/{image['id']}/data")
    assert r.status_code == 200 and r.body == data


def test_data_that_is_not_what_glance_says_is_refused(images, conf, sqlite_database, glance):
    data = os.urandom(100_000)
    image = images.create("p1-member", data, name="tampered", **_properties(str(uuid.uuid4())))
    stored = glance.store / image["id"]
    stored.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])  # the store's copy rots

    with pytest.raises(exceptions.ImageInvalid, match="does not match: its sha512 is"):
        sources.resolve_image(conf, sqlite_database, image["id"], project_id=None, is_admin=True)
    agent = ApiClient(loadapp(conf, sqlite_database)).as_(PERSONAS["service"])
    r = agent.get(f"/agent/v1/images/{image['id']}/data")
    assert r.status_code == 400 and "exosuit.image.invalid" in r.text
    cache = GlanceCache(conf.images.cache_dir, conf.images.cache_size)
    assert cache.store.files() == []  # nothing wrong is kept


def test_find_by_function_finds_exactly_one(images, conf, sqlite_database, keystone):
    unique, twice, older = (str(uuid.uuid4()) for _ in range(3))
    found = images.create("p1-member", b"unique", name="unique", **_properties(unique))
    images.create("p1-member", b"one", **_properties(twice))
    images.create("p1-member", b"two", **_properties(twice))
    # Cyborg's older property name is found too.
    legacy = images.create("p1-member", b"legacy", function_uuid=older, format="gbs")
    images.create("p1-member", None, **_properties(str(uuid.uuid4())))  # queued: no data
    p1 = {"project_id": _project(keystone, "p1"), "is_admin": False}

    ref = sources.find_by_function(conf, sqlite_database, unique, **p1)
    assert (ref.uuid, ref.name, ref.function_id) == (found["id"], "unique", unique)
    assert sources.find_by_function(conf, sqlite_database, older, **p1).uuid == legacy["id"]
    with pytest.raises(exceptions.ImageAmbiguous, match=twice):
        sources.find_by_function(conf, sqlite_database, twice, **p1)
    with pytest.raises(exceptions.ImageNotFound):
        sources.find_by_function(conf, sqlite_database, str(uuid.uuid4()), **p1)
    # Another project does not see p1's private images.
    p2 = {"project_id": _project(keystone, "p2"), "is_admin": False}
    with pytest.raises(exceptions.ImageNotFound):
        sources.find_by_function(conf, sqlite_database, unique, **p2)


def test_the_service_user_shows_each_caller_what_glance_would(
    images, conf, sqlite_database, keystone
):
    p1, p2 = _project(keystone, "p1"), _project(keystone, "p2")
    private = images.create("p1-member", b"private")
    shared = images.create("p1-member", b"shared", visibility="shared")
    public = images.create("p1-admin", b"public", visibility="public")

    def resolve(image: dict, project: str, admin: bool = False):
        return sources.resolve_image(
            conf, sqlite_database, image["id"], project_id=project, is_admin=admin
        )

    assert resolve(private, p1).uuid == private["id"]
    assert resolve(private, p2, admin=True).uuid == private["id"]
    assert resolve(public, p2).uuid == public["id"]
    for image in (private, shared):
        with pytest.raises(exceptions.ImageNotFound):
            resolve(image, p2)
    images.request("p1-member", "POST", f"/v2/images/{shared['id']}/members", json={"member": p2})
    with pytest.raises(exceptions.ImageNotFound):  # pending: not accepted yet
        resolve(shared, p2)
    images.request(
        "p2-member", "PUT", f"/v2/images/{shared['id']}/members/{p2}", json={"status": "accepted"}
    )
    assert resolve(shared, p2).uuid == shared["id"]


def test_with_the_callers_token_glance_decides(images, tmp_path, keystone, glance, sqlite_database):
    conf = _conf(tmp_path, keystone, glance, service_user=False)
    image = images.create("p1-member", b"token data")
    p1_token, p2_token = keystone.token("p1-member"), keystone.token("p2-member")

    ref = sources.resolve_image(
        conf, sqlite_database, image["id"], project_id=None, is_admin=False, token=p1_token
    )
    assert ref.sha256 == hashlib.sha256(b"token data").hexdigest()
    with pytest.raises(exceptions.ImageNotFound):
        sources.resolve_image(
            conf, sqlite_database, image["id"], project_id=None, is_admin=False, token=p2_token
        )
    with pytest.raises(exceptions.GlanceUnavailable, match="carries no token"):
        sources.resolve_image(conf, sqlite_database, image["id"], project_id=None, is_admin=False)


def _sign(key, data: bytes) -> str:
    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.MAX_LENGTH)
    return base64.b64encode(key.sign(data, pss, hashes.SHA256())).decode()


def _signature_properties(value: str, key_id: str = KEY_ID) -> dict:
    return {
        "img_signature": value,
        "img_signature_hash_method": "SHA-256",
        "img_signature_key_type": "RSA-PSS",
        "img_signature_certificate_uuid": key_id,
    }


def test_glance_signatures_are_checked_with_trusted_keys(
    images, conf, sqlite_database, signing_key
):
    data = os.urandom(200_000)
    signed = images.create("p1-member", data)
    # Set once the data is in: Glance itself would look the certificate up in Barbican.
    images.patch("p1-member", signed["id"], **_signature_properties(_sign(signing_key, data)))
    wrong = images.create("p1-member", data)
    images.patch("p1-member", wrong["id"], **_signature_properties(_sign(signing_key, b"x")))
    unknown = images.create("p1-member", data)
    images.patch(
        "p1-member", unknown["id"], **_signature_properties(_sign(signing_key, data), "other")
    )
    unsigned = images.create("p1-member", data)

    def resolve(image: dict):
        return sources.resolve_image(
            conf, sqlite_database, image["id"], project_id=None, is_admin=True
        )

    assert resolve(signed).sha256 == hashlib.sha256(data).hexdigest()
    with pytest.raises(exceptions.ImageSignatureInvalid, match="does not verify with key"):
        resolve(wrong)
    with pytest.raises(exceptions.ImageSignatureInvalid, match="names key 'other'"):
        resolve(unknown)
    assert resolve(unsigned).uuid == unsigned["id"]
    conf.set_override("require_signature", True, group="images")
    with pytest.raises(exceptions.ImageSignatureInvalid, match="is missing"):
        resolve(unsigned)


def test_an_image_without_data_is_not_active(images, conf, sqlite_database):
    queued = images.create("p1-member", None)
    with pytest.raises(exceptions.ImageNotActive):
        sources.resolve_image(conf, sqlite_database, queued["id"], project_id=None, is_admin=True)


def test_glance_unreachable_is_503_for_agents(tmp_path, keystone, glance, sqlite_database):
    conf = _conf(tmp_path, keystone, glance, service_user=False)
    from tests.helpers.keystone_fixture import _free_port

    conf.set_override("endpoint_override", f"http://127.0.0.1:{_free_port()}", group="glance")
    agent = ApiClient(loadapp(conf, sqlite_database)).as_(
        {**PERSONAS["service"], "X-Auth-Token": keystone.token("nova")}
    )
    r = agent.get(f"/agent/v1/images/{uuid.uuid4()}/data")
    assert r.status_code == 503, r.text
    assert "exosuit.glance.unavailable" in r.text and r.headers["Retry-After"]


def test_the_catalogue_and_glance_together(images, conf, sqlite_database, keystone):
    """[images] sources = exosuit, glance: a catalogue image resolves from the catalogue;
    a function id in both sources is ambiguous."""
    from exosuit.db import images as catalogue_db

    function = str(uuid.uuid4())
    row = sqlite_database.write(
        catalogue_db.create, name="local", format="gbs", owner=None, function_id=function
    )
    sqlite_database.write(catalogue_db.activate, row["uuid"], size=4, sha256="0" * 64)
    ref = sources.resolve_image(conf, sqlite_database, row["uuid"], project_id=None, is_admin=True)
    assert (ref.source, ref.name) == ("exosuit", "local")
    assert (
        sources.find_by_function(conf, sqlite_database, function, project_id=None, is_admin=True)
        == ref
    )
    images.create("p1-member", b"remote", **_properties(function))
    with pytest.raises(exceptions.ImageAmbiguous, match=row["uuid"]):
        sources.find_by_function(conf, sqlite_database, function, project_id=None, is_admin=True)
    with pytest.raises(exceptions.ImageNotFound):
        sources.resolve_image(conf, sqlite_database, "not-a-uuid", project_id=None, is_admin=True)


def test_glance_refusing_a_request_is_a_glance_error(conf):
    from exosuit.glance.client import GlanceClient, make_adapter

    client = GlanceClient(make_adapter(conf))
    with pytest.raises(exceptions.GlanceError, match="400") as caught:
        client.list_images({"sort_key": "no such key"})
    assert not isinstance(caught.value, exceptions.GlanceUnavailable)
    with pytest.raises(exceptions.ImageNotFound):
        client.get_image(str(uuid.uuid4()))
