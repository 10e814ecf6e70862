"""The one atomic write (exosuit/files.py): a file is whole or absent, its folder fsynced."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from exosuit import files


def _names(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary_file(tmp_path):
    path = str(tmp_path / "state" / "cache.json")  # the folder is made
    files.atomic_write(path, '{"one": 1}')
    files.atomic_write(path, b'{"two": 2}')
    with open(path, "rb") as f:
        assert f.read() == b'{"two": 2}'
    assert _names(tmp_path / "state") == ["cache.json"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # the default: private


def test_the_permissions_asked_for_are_given(tmp_path):
    path = str(tmp_path / "spec.json")
    old = os.umask(0o022)
    try:
        files.atomic_write(path, b"{}", permissions=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_a_failing_write_leaves_the_old_content_and_no_temporary_file(tmp_path):
    path = str(tmp_path / "cache.json")
    files.atomic_write(path, b"old")
    with pytest.raises(RuntimeError, match="the disk is full"):
        with files.atomic_file(path) as stream:
            stream.write(b"half of the n")
            raise RuntimeError("the disk is full")
    with open(path, "rb") as f:
        assert f.read() == b"old"
    assert _names(tmp_path) == ["cache.json"]


def test_a_failing_first_write_leaves_no_file_at_all(tmp_path):
    path = str(tmp_path / "cache.json")
    with pytest.raises(ValueError):
        with files.atomic_file(path) as stream:
            stream.write(b"{")
            raise ValueError("cannot encode")
    assert _names(tmp_path) == []


def test_the_data_is_fsynced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    """Each fsync is recorded with what it synced (a file or a folder) and what the
    target held at that moment: the data first (old content still in place), then the
    folder (the new content in place)."""
    path = tmp_path / "checkpoint.json"
    path.write_bytes(b"old")
    synced: list[tuple[str, bytes]] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        kind = "folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        synced.append((kind, path.read_bytes()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    files.atomic_write(str(path), b"new")
    assert synced == [("file", b"old"), ("folder", b"new")]


def test_a_fixed_temporary_name_replaces_what_a_crash_left(tmp_path):
    path = str(tmp_path / "checkpoint.json")
    (tmp_path / ".checkpoint.json.tmp").write_bytes(b'{"kind": "exo')  # a crash's leftover
    files.atomic_write(path, b"{}", temporary=".checkpoint.json.tmp")
    assert _names(tmp_path) == ["checkpoint.json"]


def test_unique_temporary_names_are_hidden(tmp_path):
    """Readers of ``*.json`` (CDI's loaders) never see a write in progress."""
    path = str(tmp_path / "spec.json")
    with files.atomic_file(path) as stream:
        stream.write(b"{}")
        (temporary,) = _names(tmp_path)
        assert temporary.startswith(".spec.json.") and temporary.endswith(".tmp")
    assert _names(tmp_path) == ["spec.json"]


@pytest.mark.slow  # runs a Python process that dies mid-write
def test_a_killed_writer_leaves_the_old_file_whole(tmp_path):
    """A process killed in the middle of a write (no exception handler runs): the
    target is the old content; only a hidden temporary file is left."""
    path = str(tmp_path / "cache.json")
    files.atomic_write(path, b"old")
    child = (
        "import os\n"
        "from exosuit import files\n"
        f"with files.atomic_file({path!r}) as stream:\n"
        "    stream.write(b'half')\n"
        "    stream.flush()\n"
        "    os._exit(9)\n"
    )
    assert subprocess.run([sys.executable, "-c", child], check=False).returncode == 9
    with open(path, "rb") as f:
        assert f.read() == b"old"
    assert [n for n in _names(tmp_path) if n != "cache.json"][0].startswith(".cache.json.")


def test_publish_makes_a_file_written_elsewhere_the_target(tmp_path):
    """A file named by its hash is written first, then published under that name."""
    partial = tmp_path / ".upload-x"
    partial.write_bytes(b"image data")
    final = str(tmp_path / "sha")
    files.publish(str(partial), final)
    assert _names(tmp_path) == ["sha"]
    with pytest.raises(FileNotFoundError):
        files.publish(str(partial), final)
