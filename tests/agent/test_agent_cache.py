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


ACTIVATION = {
    "action": "install",
    "generation": 12,
    "report": {"action": "install", "generation": 12, "state": "failed", "reason": "no vfio"},
    "acknowledged": False,
}
PARTITION = {
    "generation": 14,
    "report": {"generation": 14, "state": "applied", "reason": None},
    "acknowledged": True,
}
CONTAINERS = {
    "digest": "sha256:" + "c" * 64,
    "files": {"exosuit.dev-fpga_c1.json": "d" * 64, "exosuit.dev-gpu_c1.json": None},
    "state": "written",
    "report": {"cdi": "written", "reason": None, "devices": ["exosuit.dev/fpga=c1-0"]},
    "acknowledged": True,
}


def test_round_trip(tmp_path):
    cache = AgentCache(str(tmp_path))
    state = AgentState(
        acknowledged_hash="sha256:" + "a" * 64,
        acknowledged_at=123.5,
        desired_state={"images": {"dev": "img"}},
        devices={"id1": {"last_seen": 100.0, "device": {"type": "GPU"}}},
        programs={"p1": {"report": {"state": "done"}, "acknowledged": False}},
        image_ids={"ab" * 32: {"function_id": "f1", "interface_id": None}},
        observed_generation=12,
        activations={"d1": ACTIVATION},
        containers={"c1": CONTAINERS},
        partitions={"d1": PARTITION},
    )
    state.devices["id2"] = {"last_seen": 101.0, "device": {"type": "QAT"}, "found_by": "qat"}
    cache.save(state)
    assert cache.load() == state
    with open(cache.path) as f:
        assert json.load(f) == {
            "version": 6,
            "acknowledged_hash": "sha256:" + "a" * 64,
            "acknowledged_at": 123.5,
            "desired_state": {"images": {"dev": "img"}},
            "devices": {
                "id1": {"last_seen": 100.0, "device": {"type": "GPU"}},
                "id2": {"last_seen": 101.0, "device": {"type": "QAT"}, "found_by": "qat"},
            },
            "programs": {"p1": {"report": {"state": "done"}, "acknowledged": False}},
            "image_ids": {"ab" * 32: {"function_id": "f1", "interface_id": None}},
            "observed_generation": 12,
            "activations": {"d1": ACTIVATION},
            "containers": {"c1": CONTAINERS},
            "partitions": {"d1": PARTITION},
        }


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path):
    cache = AgentCache(str(tmp_path))
    cache.save(AgentState(acknowledged_hash="h1"))
    cache.save(AgentState(acknowledged_hash="h2"))
    assert os.listdir(tmp_path) == ["agent-cache.json"]
    assert cache.load().acknowledged_hash == "h2"


def test_failed_write_keeps_the_previous_file(tmp_path):
    cache = AgentCache(str(tmp_path))
    cache.save(AgentState(acknowledged_hash="good"))
    broken = AgentState(acknowledged_hash="bad", desired_state={"x": object()})  # not JSON
    with pytest.raises(TypeError):
        cache.save(broken)
    assert cache.load().acknowledged_hash == "good"
    assert os.listdir(tmp_path) == ["agent-cache.json"]


SEEN = {"id1": {"last_seen": 100.0, "device": {"type": "GPU"}}}


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        pytest.param(
            {"acknowledged_hash": "old", "desired_state": {"a": 1}},
            AgentState(acknowledged_hash="old", desired_state={"a": 1}),
            id="v0-no-version-no-device-ages",
        ),
        pytest.param(
            {
                "version": 1,
                "acknowledged_hash": "h1",
                "acknowledged_at": 12.5,
                "acknowledged_snapshot": {"hash": "h1", "devices": [{"type": "GPU"}]},
                "desired_state": {"a": 1},
                "prepared": {"mdevs": ["u1"]},
                "devices": SEEN,
            },
            AgentState(
                acknowledged_hash="h1", acknowledged_at=12.5, desired_state={"a": 1}, devices=SEEN
            ),
            id="v1-snapshot-content-and-prepared-dropped",
        ),
        pytest.param(
            {
                "version": 2,
                "acknowledged_hash": "h2",
                "acknowledged_at": 13.5,
                "desired_state": {},
                "devices": SEEN,
            },
            AgentState(acknowledged_hash="h2", acknowledged_at=13.5, devices=SEEN),
            id="v2-no-programs",
        ),
        pytest.param(
            {
                "version": 3,
                "acknowledged_hash": "h3",
                "acknowledged_at": 14.5,
                "desired_state": {"generation": 2, "programs": []},
                "devices": SEEN,
                "programs": {"p": {"report": {"state": "failed"}, "acknowledged": True}},
            },
            AgentState(
                acknowledged_hash="h3",
                acknowledged_at=14.5,
                desired_state={"generation": 2, "programs": []},
                devices=SEEN,
                programs={"p": {"report": {"state": "failed"}, "acknowledged": True}},
            ),
            id="v3-no-activations",
        ),
        pytest.param(
            {
                "version": 4,
                "acknowledged_hash": "h4",
                "acknowledged_at": 15.5,
                "desired_state": {"generation": 12, "drivers": {"pci": {"enabled": False}}},
                "devices": SEEN,
                "programs": {},
                "image_ids": {},
                "observed_generation": 12,
                "activations": {"d1": ACTIVATION},
            },
            AgentState(
                acknowledged_hash="h4",
                acknowledged_at=15.5,
                desired_state={"generation": 12, "drivers": {"pci": {"enabled": False}}},
                devices=SEEN,
                observed_generation=12,
                activations={"d1": ACTIVATION},
            ),
            id="v4-no-containers",
        ),
        pytest.param(
            {
                "version": 5,
                "acknowledged_hash": "h5",
                "acknowledged_at": 16.5,
                "desired_state": {"generation": 13, "containers": []},
                "devices": SEEN,
                "programs": {},
                "image_ids": {},
                "observed_generation": 13,
                "activations": {},
                "containers": {"c1": CONTAINERS},
            },
            AgentState(
                acknowledged_hash="h5",
                acknowledged_at=16.5,
                desired_state={"generation": 13, "containers": []},
                devices=SEEN,
                observed_generation=13,
                containers={"c1": CONTAINERS},
            ),
            id="v5-no-partitions",
        ),
        pytest.param(
            {
                "version": 6,
                "acknowledged_hash": "h6",
                "acknowledged_at": 17.5,
                "desired_state": {"generation": 14, "partitions": []},
                "devices": SEEN,
                "programs": {},
                "image_ids": {},
                "observed_generation": 14,
                "activations": {},
                "containers": {},
                "partitions": {"d1": PARTITION},
            },
            AgentState(
                acknowledged_hash="h6",
                acknowledged_at=17.5,
                desired_state={"generation": 14, "partitions": []},
                devices=SEEN,
                observed_generation=14,
                partitions={"d1": PARTITION},
            ),
            id="v6-current",
        ),
    ],
)
def test_every_older_version_loads(tmp_path, written, expected):
    cache = AgentCache(str(tmp_path))
    with open(cache.path, "w") as f:
        json.dump(written, f)
    assert cache.load() == expected
    # Written back in the current version, read back equal.
    cache.save(cache.load())
    with open(cache.path) as f:
        assert json.load(f)["version"] == CACHE_VERSION == 6
    assert cache.load() == expected


def test_an_older_agent_refuses_a_newer_cache(tmp_path):
    cache = AgentCache(str(tmp_path))
    with open(cache.path, "w") as f:
        json.dump({"version": 7, "acknowledged_hash": "future"}, f)
    with pytest.raises(CacheTooNew, match="version 7, written by a newer agent"):
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
