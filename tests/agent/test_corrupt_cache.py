"""A cache file the agent cannot read (issue 24, item 3): empty, cut short, random bytes,
a JSON list, a field of the wrong type. The agent sets it aside (renamed, kept), says so
in one line, starts from nothing and reports the whole truth; the API keeps every device
once and every hold it knew.

The unit half reads each kind of file with ``AgentCache``; the end-to-end half runs a real
``exosuit-agent run`` against a real ``exosuit-api`` (SQLite) with a bound ARQ on the
host, corrupts the cache between two runs and watches the second one.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import uuid as uuidlib

import pytest

from exosuit.agent.cache import (
    CACHE_VERSION,
    FILE_NAME,
    AgentCache,
    AgentState,
    CacheCorrupt,
    CacheTooNew,
)
from exosuit.db.api import Database
from tests.agent.test_agent_e2e import (
    FIXTURE,
    T4,
    acknowledged,
    bind,
    discover,
    rp_of,
    stored,
)
from tests.conftest import new_database_url
from tests.helpers.agent_processes import AgentProcess, ApiProcess, call, wait_for

VALID = {
    "version": CACHE_VERSION,
    "acknowledged_hash": "sha256:" + "a" * 64,
    "acknowledged_at": 123.5,
    "desired_state": {"generation": 3},
    "devices": {"id1": {"last_seen": 100.0, "device": {"type": "GPU"}, "found_by": "x"}},
    "programs": {"p1": {"report": {"state": "done"}, "acknowledged": False}},
    "image_ids": {},
    "observed_generation": 3,
    "activations": {},
    "containers": {},
    "partitions": {},
}
_TEXT = json.dumps(VALID).encode()

# Each kind of file an agent may find instead of its cache: a disk that filled up, a
# write cut by a power loss on a file system without ordered data, a stray file, a
# hand edit gone wrong.
CORRUPT: dict[str, bytes] = {
    "empty": b"",
    "blank": b"  \n",
    "half-written": _TEXT[: len(_TEXT) // 2],
    "random": random.Random(24).randbytes(512),
    "not-utf8": b'{"version": "\xff\xfe"}',
    "list": b"[1, 2, 3]",
    "null": b"null",
    "string": b'"agent-cache"',
    "version-text": json.dumps({**VALID, "version": "6"}).encode(),
    "version-bool": json.dumps({**VALID, "version": True}).encode(),
    "version-negative": json.dumps({**VALID, "version": -1}).encode(),
    "devices-list": json.dumps({**VALID, "devices": []}).encode(),
    "device-last-seen-text": json.dumps(
        {**VALID, "devices": {"id1": {"last_seen": "yesterday", "device": {}}}}
    ).encode(),
    "program-wrong-types": json.dumps(
        {**VALID, "programs": {"p1": {"report": 5, "acknowledged": "no"}}}
    ).encode(),
    "hash-number": json.dumps({**VALID, "acknowledged_hash": 5}).encode(),
    "desired-list": json.dumps({**VALID, "desired_state": []}).encode(),
    "containers-files-list": json.dumps(
        {
            **VALID,
            "containers": {
                "c1": {
                    "digest": "d",
                    "files": ["a.json"],
                    "state": "written",
                    "report": None,
                    "acknowledged": True,
                }
            },
        }
    ).encode(),
    "old-version-wrong-type": json.dumps({"version": 3, "devices": {"x": 1}}).encode(),
    "deep": b"[" * 100_000,
}


def write(path, content: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content)


def set_aside(state_dir) -> list[str]:
    return sorted(n for n in os.listdir(state_dir) if n.startswith(FILE_NAME + ".corrupt-"))


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_a_corrupt_cache_is_refused_by_load(tmp_path, kind):
    cache = AgentCache(str(tmp_path))
    write(cache.path, CORRUPT[kind])
    with pytest.raises(CacheCorrupt):
        cache.load()
    # Without the state directory's lock nothing is renamed: only the agent moves it.
    with pytest.raises(CacheCorrupt):
        cache.load_or_set_aside()
    assert os.path.exists(cache.path)
    assert set_aside(tmp_path) == []


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_the_lock_holder_sets_a_corrupt_cache_aside_and_starts_empty(tmp_path, kind, caplog):
    cache = AgentCache(str(tmp_path))
    write(cache.path, CORRUPT[kind])
    cache.lock()
    try:
        with caplog.at_level(logging.WARNING, logger="exosuit.agent.cache"):
            assert cache.load_or_set_aside() == AgentState()
    finally:
        cache.unlock()
    assert not os.path.exists(cache.path)
    (aside,) = set_aside(tmp_path)
    with open(tmp_path / aside, "rb") as f:
        assert f.read() == CORRUPT[kind]  # kept as it was, for inspection
    (line,) = [r for r in caplog.records if r.name == "exosuit.agent.cache"]
    assert line.levelno == logging.WARNING
    message = line.getMessage()
    assert "unreadable" in message and aside in message and "\n" not in message
    # The next write makes a good cache beside the one set aside.
    cache.save(AgentState(acknowledged_hash="h"))
    assert cache.load().acknowledged_hash == "h"
    assert set_aside(tmp_path) == [aside]


def test_two_corrupt_caches_in_one_second_are_both_kept(tmp_path):
    cache = AgentCache(str(tmp_path))
    cache.lock()
    try:
        for content in (b"", b"[]"):
            write(cache.path, content)
            assert cache.load_or_set_aside() == AgentState()
    finally:
        cache.unlock()
    kept = set_aside(tmp_path)
    assert len(kept) == 2
    assert sorted((tmp_path / k).read_bytes() for k in kept) == [b"", b"[]"]


def test_a_newer_cache_is_not_set_aside(tmp_path):
    cache = AgentCache(str(tmp_path))
    write(cache.path, json.dumps({"version": CACHE_VERSION + 1}).encode())
    cache.lock()
    try:
        with pytest.raises(CacheTooNew):
            cache.load_or_set_aside()
    finally:
        cache.unlock()
    assert os.path.exists(cache.path) and set_aside(tmp_path) == []


def test_a_valid_cache_still_loads(tmp_path):
    cache = AgentCache(str(tmp_path))
    write(cache.path, _TEXT)
    cache.lock()
    try:
        state = cache.load_or_set_aside()
    finally:
        cache.unlock()
    assert state.acknowledged_hash == VALID["acknowledged_hash"]
    assert state.devices == VALID["devices"] and state.programs == VALID["programs"]


def test_doc_states_the_cache_version_the_code_reads():
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "doc", "agent.md")
    with open(doc) as f:
        text = f.read()
    assert f"The file carries a `version` ({CACHE_VERSION} in this release)" in text


# -- end to end: a real agent process, a real API, a bound ARQ ---------------------------

# The kinds the real process is run on (each costs two agent runs).
E2E = ["empty", "half-written", "random", "list", "devices-list"]


def reported(agent: AgentProcess, hash_: str) -> bool:
    """The agent's cache holds ``hash_`` (the API acknowledged it); a file still
    corrupt (not set aside yet) or absent does not."""
    try:
        return AgentCache(str(agent.state_dir)).load().acknowledged_hash == hash_
    except CacheCorrupt:
        return False


@pytest.fixture(scope="module")
def database_url(db_servers, tmp_path_factory):
    return new_database_url("sqlite", db_servers, tmp_path_factory)


@pytest.fixture(scope="module")
def api(database_url, tmp_path_factory):
    process = ApiProcess(database_url, tmp_path_factory.mktemp("api"))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def db(database_url):
    database = Database(database_url)
    yield database
    database.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("kind", E2E)
def test_the_agent_survives_a_corrupt_cache_and_the_api_keeps_its_holds(api, db, tmp_path, kind):
    host = tmp_path / "host"
    shutil.copytree(FIXTURE, host, symlinks=True)
    hostname = f"corrupt-{uuidlib.uuid4().hex[:8]}"
    snapshot = discover(host, hostname)
    agent = AgentProcess(tmp_path, hostname, api.url, host, report_interval=3600)
    try:
        agent.start()
        wait_for(lambda: acknowledged(agent, snapshot["hash"]), timeout=60, what="first report")
        arq = bind(api.url, hostname, rp_of(hostname, snapshot, T4))
        before = stored(db, hostname)
        assert agent.stop() == 0

        write(agent.cache_path, CORRUPT[kind])
        agent.start()
        # The agent sets the file aside and reports the whole snapshot again: the cache
        # it writes after the API acknowledged it holds the hash.
        wait_for(
            lambda: reported(agent, snapshot["hash"]) or not agent.running,
            timeout=60,
            what="the report after the corrupt cache",
        )
        log = agent.log()
        assert agent.running, log
        assert "Traceback" not in log, log
        (aside,) = set_aside(agent.state_dir)
        assert (agent.state_dir / aside).read_bytes() == CORRUPT[kind]
        lines = [line for line in log.splitlines() if "unreadable" in line]
        assert len(lines) == 1 and aside in lines[0], log

        # No device twice, none lost, the same uuids; the ARQ still holds its handle.
        after = stored(db, hostname)
        assert {i: u for i, (u, _) in after["devices"].items()} == {
            i: u for i, (u, _) in before["devices"].items()
        }
        assert after["deployables"] == before["deployables"]
        assert after["handles"] == before["handles"]
        status, now = call(api.url, "GET", f"/v2/accelerator_requests/{arq['uuid']}")
        assert status == 200 and now["state"] == "Bound", now
        assert now["attach_handle_info"] == arq["attach_handle_info"]
        status, body = call(api.url, "GET", f"/v2/devices?hostname={hostname}")
        assert status == 200
        addresses = [d["pci_address"] for d in body["devices"]]
        assert len(addresses) == len(set(addresses)) == len(snapshot["devices"])
        assert agent.stop() == 0
    finally:
        agent.kill()


@pytest.mark.parametrize(
    "kind",
    sorted(
        k
        for k in CORRUPT
        if k.startswith(("version", "dev", "pro", "hash", "desired", "containers", "old"))
    ),
)
def test_the_agent_check_agrees_with_json_schema(kind):
    """The agent reads its cache's shape without jsonschema (a lean agent): jsonschema
    refuses the same wrong-typed files by the same SCHEMA."""
    import jsonschema

    from exosuit.agent import cache as cache_module

    data = json.loads(CORRUPT[kind])
    if data.get("version") == 3:
        data = {**data, "version": CACHE_VERSION}
    assert not jsonschema.Draft202012Validator(cache_module.SCHEMA).is_valid(data)
    assert cache_module._problem(data, cache_module.SCHEMA, "") is not None
    assert jsonschema.Draft202012Validator(cache_module.SCHEMA).is_valid(VALID)
    assert cache_module._problem(VALID, cache_module.SCHEMA, "") is None
