"""``GET /v2/deployables`` answered from the response cache before routing
(exosuit/api/deploy.py's ``CachedLists``): byte for byte the full path's answer, headers
included (but the request id), and only where the full path would give the same."""

from __future__ import annotations

import itertools
import threading

import pytest

from exosuit.api.deploy import loadapp
from exosuit.api.handlers import deployables
from exosuit.db import changes, inventory
from tests.conftest import PERSONAS, ApiClient
from tests.helpers.inventory import fpga, snapshot

HOST = "lists-host"


@pytest.fixture
def app(conf, sqlite_database):
    devices = [fpga(f"0000:{0x10 + i:02x}:00.0", handles=2) for i in range(3)]
    sqlite_database.write(inventory.apply_snapshot, HOST, snapshot(HOST, devices))
    return loadapp(conf, sqlite_database)


def _answer(response) -> tuple[str, list[tuple[str, str]], bytes]:
    headers = [(k, v) for k, v in response.headerlist if k.lower() != "x-openstack-request-id"]
    assert len(headers) == len(response.headerlist) - 1  # one request id, always
    return response.status, headers, response.body


def _both(app, monkeypatch, headers: dict[str, str], path: str = "/v2/deployables"):
    """The answer through the pipeline, and the full path's with the early answer off;
    and whether the early answer was given."""
    client = ApiClient(app, headers)
    client.get(path)  # fills the cache where the full path does
    before = app.cached_lists.answered
    early = _answer(client.get(path))
    answered = app.cached_lists.answered > before
    with monkeypatch.context() as patch:
        patch.setattr(deployables, "cached_answer", lambda app, environ: None)
        full = _answer(client.get(path))
    return early, full, answered


ANSWERED = {
    "no version (Nova's default)": {},
    "accelerator 2.0": {"OpenStack-API-Version": "accelerator 2.0"},
    "accelerator 2.3": {"OpenStack-API-Version": "accelerator 2.3"},
    "a bare 2.1": {"OpenStack-API-Version": "2.1"},
    "another service's version only": {"OpenStack-API-Version": "compute 2.90"},
    "an admin": PERSONAS["admin"],
    "a manager": {"X-User-Id": "u-m", "X-Project-Id": "p1", "X-Roles": "manager,member,reader"},
    "another host name": {"Host": "api.example.com:8443"},
}


@pytest.mark.parametrize("headers", ANSWERED.values(), ids=list(ANSWERED))
def test_a_cached_list_is_answered_early_as_the_full_path_answers_it(app, monkeypatch, headers):
    early, full, answered = _both(app, monkeypatch, headers)
    assert answered
    assert early == full
    assert early[0] == "200 OK" and b'"deployables"' in early[2]


LEFT = {
    "latest (paged)": ({"OpenStack-API-Version": "accelerator latest"}, "/v2/deployables"),
    "2.4 (paged)": ({"OpenStack-API-Version": "accelerator 2.4"}, "/v2/deployables"),
    "an unknown version": ({"OpenStack-API-Version": "accelerator 2.99"}, "/v2/deployables"),
    "a malformed version": ({"OpenStack-API-Version": "accelerator x"}, "/v2/deployables"),
    "a query": ({}, "/v2/deployables?limit=1"),
    "a trailing slash": ({}, "/v2/deployables/"),
    "no /v2": ({}, "/deployables"),
    "a member (403)": ({**PERSONAS["member"]}, "/v2/deployables"),
    "the service (403)": ({**PERSONAS["service"]}, "/v2/deployables"),
    "no project": ({"X-User-Id": "u", "X-Roles": "reader"}, "/v2/deployables"),
    "no role": ({"X-User-Id": "u", "X-Project-Id": "p", "X-Roles": ""}, "/v2/deployables"),
    "a long user id": ({**PERSONAS["member"], "X-User-Id": "u" * 300}, "/v2/deployables"),
}


@pytest.mark.parametrize(("headers", "path"), LEFT.values(), ids=list(LEFT))
def test_any_other_request_is_left_to_the_full_path(app, monkeypatch, headers, path):
    early, full, answered = _both(app, monkeypatch, headers, path)
    assert not answered
    assert early == full


def test_a_change_is_never_answered_from_the_cache(app, sqlite_database):
    client = ApiClient(app)
    first = client.get("/v2/deployables").body
    assert client.get("/v2/deployables").body == first
    devices = [fpga("0000:30:00.0", handles=2)]
    sqlite_database.write(inventory.apply_snapshot, "other-host", snapshot("other-host", devices))
    before = app.cached_lists.answered
    after = client.get("/v2/deployables").body
    assert app.cached_lists.answered == before  # the version moved: the full path read it
    assert after != first and b"0000:30:00.0" in after


def test_a_shared_read_started_after_the_caller_asked():
    """Callers that asked while a read ran get the next read's value, never that one's."""
    started = threading.Event()
    release = threading.Event()
    values = itertools.count(1)
    calls = []

    def read() -> int:
        calls.append(1)
        if len(calls) == 1:
            started.set()
            assert release.wait(30)
        return next(values)

    shared = changes.SharedRead(read)
    got: list[int] = []
    first = threading.Thread(target=lambda: got.append(shared()))
    first.start()
    assert started.wait(30)
    # Asked while the first read runs: they must not get its value (1).
    later = [threading.Thread(target=lambda: got.append(shared())) for _ in range(3)]
    for thread in later:
        thread.start()
    release.set()
    for thread in [first, *later]:
        thread.join(30)
    assert sorted(got)[0] == 1 and got.count(1) == 1
    assert all(value >= 2 for value in got if value != 1)
    assert shared() > max(got)  # asked after every read so far: a read of its own
