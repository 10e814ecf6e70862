"""The plugin's checkpoint file (exosuit/kubelet/checkpoint.py): round trips, the
version-1 file every later release must read, atomic writes, refusals."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from exosuit.kubelet import checkpoint
from exosuit.kubelet.checkpoint import (
    Checkpoint,
    CheckpointError,
    ClaimEntry,
    PreparedDevice,
)

DATA = Path(__file__).parent / "data"

FPGA = PreparedDevice(
    request_names=("fpga",),
    pool_name="node-a",
    device_name="fpga-0000-0c-00-1",
    cdi_device_ids=("exosuit.dev/fpga=8d2b6c3e-5f14-4a0b-9c7d-e1f2a3b4c5d6-0",),
)
PREPARED = ClaimEntry(
    namespace="ml",
    name="inference",
    state="prepared",
    claim_uuid="8d2b6c3e-5f14-4a0b-9c7d-e1f2a3b4c5d6",
    devices=(FPGA,),
)
PREPARING = ClaimEntry(namespace="default", name="batch")
V1_CLAIMS = {
    "2c9f7e1a-8a64-4c7e-a3f1-0d8f4b6a9e11": PREPARED,
    "7a1e0c55-1d2b-4f3a-8e9d-0a1b2c3d4e5f": PREPARING,
}


def test_a_missing_file_is_an_empty_checkpoint(tmp_path):
    assert checkpoint.read(tmp_path / "checkpoint.json") == {}
    assert Checkpoint(tmp_path / "nowhere" / "checkpoint.json").uids() == []


def test_written_then_read_gives_the_same_claims(tmp_path):
    path = tmp_path / "plugin" / "checkpoint.json"
    checkpoint.write(path, V1_CLAIMS)
    assert checkpoint.read(path) == V1_CLAIMS
    assert json.loads(path.read_text())["version"] == checkpoint.CURRENT_VERSION


def test_the_version_1_file_reads(tmp_path):
    """The frozen shape of version 1 (tests/kubelet/data/checkpoint-v1.json): a later
    plugin must go on reading what this one wrote."""
    path = tmp_path / "checkpoint.json"
    path.write_bytes((DATA / "checkpoint-v1.json").read_bytes())
    assert checkpoint.read(path) == V1_CLAIMS


def test_this_version_writes_the_version_1_file_while_it_is_current():
    """While version 1 is current, the fixture is exactly what ``dump`` writes (when the
    format changes, the fixture stays and this test goes)."""
    if checkpoint.CURRENT_VERSION != 1:
        pytest.skip("the current version is newer than the fixture")
    assert checkpoint.dump(V1_CLAIMS) == json.loads((DATA / "checkpoint-v1.json").read_text())


def test_a_newer_version_is_refused(tmp_path):
    path = tmp_path / "checkpoint.json"
    document = checkpoint.dump(V1_CLAIMS)
    document["version"] = checkpoint.CURRENT_VERSION + 1
    path.write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="newer than this plugin"):
        Checkpoint(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not JSON"),
        ('{"kind": "something-else", "version": 1, "claims": {}}', "not a checkpoint"),
        ('{"kind": "exosuit-kubelet-plugin-checkpoint", "version": "1"}', "not a version"),
        ('{"kind": "exosuit-kubelet-plugin-checkpoint", "version": 1, "claims": []}', "claims"),
        (
            '{"kind": "exosuit-kubelet-plugin-checkpoint", "version": 1, '
            '"claims": {"u": {"namespace": "n", "name": "x", "state": "done"}}}',
            "state",
        ),
        (
            '{"kind": "exosuit-kubelet-plugin-checkpoint", "version": 1, "claims": {"u": '
            '{"namespace": "n", "name": "x", "state": "prepared", "devices": '
            '[{"pool_name": "p", "device_name": "d", "cdi_device_ids": "one"}]}}}',
            "cdi_device_ids",
        ),
    ],
)
def test_a_damaged_file_is_refused_with_its_reason(tmp_path, text, message):
    path = tmp_path / "checkpoint.json"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=message):
        checkpoint.read(path)


def test_every_change_is_on_disk_before_it_returns(tmp_path):
    path = tmp_path / "checkpoint.json"
    store = Checkpoint(path)
    store.put("a", PREPARING)
    assert checkpoint.read(path) == {"a": PREPARING}
    store.update("a", claim_uuid="c-1")
    assert checkpoint.read(path)["a"].claim_uuid == "c-1"
    store.put("b", PREPARED)
    store.remove(["a", "unknown"])
    assert checkpoint.read(path) == {"b": PREPARED}
    assert Checkpoint(path).get("b") == PREPARED  # a new process reads the same
    store.remove(["b"])
    assert checkpoint.read(path) == {}


def test_writes_leave_no_temporary_file_and_replace_by_rename(tmp_path):
    """The old file is replaced, never rewritten in place: a reader holding it open
    still reads the old content whole (the rename took a new inode)."""
    path = tmp_path / "checkpoint.json"
    checkpoint.write(path, {"a": PREPARING})
    before = os.stat(path).st_ino
    with open(path) as old:
        checkpoint.write(path, V1_CLAIMS)
        assert checkpoint.parse(json.load(old)) == {"a": PREPARING}
    assert os.stat(path).st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json"]


def test_a_temporary_file_of_a_crashed_write_changes_nothing(tmp_path):
    """A crash before the rename leaves ``.checkpoint.json.tmp``: the checkpoint is the
    last complete one, and the next write replaces the leftover."""
    path = tmp_path / "checkpoint.json"
    checkpoint.write(path, {"a": PREPARING})
    (tmp_path / ".checkpoint.json.tmp").write_text('{"kind": "exosuit-kubelet-plu')
    assert checkpoint.read(path) == {"a": PREPARING}
    checkpoint.write(path, V1_CLAIMS)
    assert checkpoint.read(path) == V1_CLAIMS
    assert not (tmp_path / ".checkpoint.json.tmp").exists()


def test_concurrent_changes_all_land(tmp_path):
    path = tmp_path / "checkpoint.json"
    store = Checkpoint(path)

    def put(index: int) -> None:
        store.put(f"uid-{index}", ClaimEntry(namespace="ns", name=f"c{index}"))

    threads = [threading.Thread(target=put, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(checkpoint.read(path)) == sorted(f"uid-{i}" for i in range(32))
