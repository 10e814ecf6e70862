"""Debian's podman as the consumer of the CDI specs the agent writes.

podman 4.3.1 (Debian 12) reads CDI specs from /etc/cdi and /var/run/cdi only: its
containers.conf has no ``cdi_spec_dirs`` (added in later releases), so these tests write
into /var/run/cdi, under a fresh claim uuid each (nothing of anyone else's is touched,
and everything written is removed). podman runs with a storage and run root of its own
in the test's temporary folder (``--root``, ``--runroot``, the vfs driver), so the
host's containers are not touched either. ``make test`` installs podman when missing
(Makefile, SYSTEM_PACKAGES); without it, or without the right to write /var/run/cdi,
the tests skip with the reason (and fail under CI=true).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid

import pytest

from tests.conftest import require

CDI_DIR = "/var/run/cdi"
TIMEOUT = 120  # seconds a podman command may take on a loaded machine


class Podman:
    """podman with a storage of its own; containers it creates are removed after."""

    def __init__(self) -> None:
        # A short path: podman refuses a run root longer than 50 characters.
        self.root = tempfile.mkdtemp(prefix="exosuit-podman-")
        self.rootfs = os.path.join(self.root, "rootfs")
        os.makedirs(os.path.join(self.rootfs, "bin"))
        shutil.copy("/bin/true", os.path.join(self.rootfs, "bin", "true"))
        self.names: list[str] = []

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [
            "podman",
            "--root",
            os.path.join(self.root, "storage"),
            "--runroot",
            os.path.join(self.root, "run"),
            "--storage-driver",
            "vfs",
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "none",
            *args,
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)

    def create(self, *devices: str) -> str:
        """``podman create --device …`` on a rootfs folder; the container's name."""
        name = f"exosuit-cdi-{uuid.uuid4().hex[:12]}"
        argv = ["create", "--name", name]
        for device in devices:
            argv += ["--device", device]
        result = self.run(*argv, "--rootfs", self.rootfs, "/bin/true")
        assert result.returncode == 0, result.stderr
        self.names.append(name)
        return name

    def init(self, name: str) -> subprocess.CompletedProcess[str]:
        """``podman init``: resolves the CDI devices and writes the OCI config. This
        sandbox then refuses to set the container's process up (crun's setrlimit);
        elsewhere it succeeds. Either way the config is written."""
        return self.run("init", name)

    def config(self, name: str) -> dict:
        """The container's generated OCI config.json (in its bundle, podman inspect's
        StaticDir)."""
        result = self.run("inspect", name, "--format", "{{.StaticDir}}")
        assert result.returncode == 0, result.stderr
        with open(os.path.join(result.stdout.strip(), "config.json")) as f:
            return json.load(f)

    def remove_all(self) -> None:
        for name in self.names:
            self.run("rm", "--force", name)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def podman():
    require(shutil.which("podman") is not None, "podman is not installed (apt-get install podman)")
    require(os.geteuid() == 0, f"writing CDI specs into {CDI_DIR} for podman needs root")
    found = Podman()
    try:
        yield found
    finally:
        found.remove_all()


@pytest.fixture
def claim_uuid():
    """A fresh claim uuid; whatever spec file carries it is removed after the test."""
    claim = str(uuid.uuid4())
    yield claim
    if os.path.isdir(CDI_DIR):
        for name in os.listdir(CDI_DIR):
            if claim in name:
                os.unlink(os.path.join(CDI_DIR, name))
