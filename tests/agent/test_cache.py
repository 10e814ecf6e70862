"""The agent cache: round trips, atomic writes, old and new versions."""

import json
import os

import pytest

from exosuit.agent.cache import (
    CACHE_VERSION,
    AgentCache,
    AgentState,
    CacheLocked,
    CacheTooNew,
)


def test_missing_file_reads_as_empty(tmp_path):
    state = AgentCache(str(tmp_path / "none")).load()
    assert state == AgentState()


def test_round_trip(tmp_path):
    cache = AgentCache(str(tmp_path))
    state = AgentState(
        acknowledged_hash="sha256:" + "a" * 64,
        acknowledged_snapshot={"devices": [{"x": 1}]},
        acknowledged_at=123.5,
        desired_state={"images": {"dev": "img"}},
        prepared={"mdevs": ["u1"]},
        devices={"id1": {"last_seen": 100.0, "device": {"type": "GPU"}}},
    )
    cache.save(state)
    assert cache.load() == state
    with open(cache.path) as f:
        assert json.load(f)["version"] == CACHE_VERSION


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path):
    cache = AgentCache(str(tmp_path))
    cache.save(AgentState(acknowledged_hash="h1"))
    cache.save(AgentState(acknowledged_hash="h2"))
    assert os.listdir(tmp_path) == ["agent-cache.json"]
    assert cache.load().acknowledged_hash == "h2"


def test_failed_write_keeps_the_previous_file(tmp_path):
    cache = AgentCache(str(tmp_path))
    cache.save(AgentState(acknowledged_hash="good"))
    broken = AgentState(acknowledged_hash="bad", prepared={"x": object()})  # not JSON
    with pytest.raises(TypeError):
        cache.save(broken)
    assert cache.load().acknowledged_hash == "good"
    assert os.listdir(tmp_path) == ["agent-cache.json"]


def test_a_newer_agent_reads_an_older_cache(tmp_path):
    cache = AgentCache(str(tmp_path))
    with open(cache.path, "w") as f:
        json.dump({"acknowledged_hash": "old", "desired_state": {"a": 1}}, f)  # version 0
    state = cache.load()
    assert state.acknowledged_hash == "old"
    assert state.desired_state == {"a": 1}
    assert state.devices == {}


def test_an_older_agent_refuses_a_newer_cache(tmp_path):
    cache = AgentCache(str(tmp_path))
    with open(cache.path, "w") as f:
        json.dump({"version": CACHE_VERSION + 1, "acknowledged_hash": "future"}, f)
    with pytest.raises(CacheTooNew):
        cache.load()
    with open(cache.path) as f:
        assert json.load(f)["acknowledged_hash"] == "future"  # untouched


def test_leftovers_of_an_interrupted_write_are_removed_by_the_lock_holder(tmp_path):
    cache = AgentCache(str(tmp_path))
    cache.save(AgentState(acknowledged_hash="kept"))
    (tmp_path / ".agent-cache.abc123").write_text('{"half": ')
    # A reader (status tool, test) leaves them: they may be the agent's write in progress.
    assert AgentCache(str(tmp_path)).load().acknowledged_hash == "kept"
    assert sorted(os.listdir(tmp_path)) == [".agent-cache.abc123", "agent-cache.json"]
    cache.lock()
    try:
        assert os.listdir(tmp_path) == ["agent-cache.json"]
        assert cache.load().acknowledged_hash == "kept"
    finally:
        cache.unlock()


def test_one_writer_per_state_directory(tmp_path):
    first, second = AgentCache(str(tmp_path / "state")), AgentCache(str(tmp_path / "state"))
    first.lock()
    with pytest.raises(CacheLocked, match="already uses the state directory"):
        second.lock()
    first.unlock()
    second.lock()  # free again
    second.unlock()
