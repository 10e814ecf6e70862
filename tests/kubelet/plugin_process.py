"""``exosuit-kubelet-plugin`` as a real process, and a gRPC client of its sockets
built from the plugin's protos (what the kubelet is to it)."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from exosuit.kubelet.protos import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from tests.helpers.serve_fixture import _script

DEADLINE = 60.0  # generous: the machine may be busy
VERSIONS = {
    "v1": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}


def version_of(text: str) -> tuple[int, int]:
    """A microversion as numbers ("2.10" is above "2.8")."""
    major, _, minor = text.partition(".")
    return int(major), int(minor)


def short_dir() -> Path:
    """A directory with a short path: a Unix socket's path has at most 107 bytes."""
    return Path(tempfile.mkdtemp(prefix="exo-k-", dir="/tmp"))


class PluginProcess:
    """One ``exosuit-kubelet-plugin`` (start, stop, start again on the same dirs)."""

    def __init__(
        self, base: Path, node: str, exosuit_url: str, kubeconfig: Path, *extra: str
    ) -> None:
        self.base = base
        self.node = node
        self.exosuit_url = exosuit_url
        self.kubeconfig = kubeconfig
        self.extra = list(extra)
        self.registry_dir = base / "plugins_registry"
        self.plugins_dir = base / "plugins"
        self.registration_socket = self.registry_dir / "exosuit.dev-reg.sock"
        self.dra_socket = self.plugins_dir / "exosuit.dev" / "dra.sock"
        self.checkpoint = self.plugins_dir / "exosuit.dev" / "checkpoint.json"
        self.process: subprocess.Popen | None = None
        self.lines: list[str] = []

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def argv(self) -> list[str]:
        return [
            _script("exosuit-kubelet-plugin"),
            "--node-name",
            self.node,
            "--os-endpoint",
            self.exosuit_url,
            "--kubeconfig",
            str(self.kubeconfig),
            "--registry-dir",
            str(self.registry_dir),
            "--plugins-dir",
            str(self.plugins_dir),
            "--publish-interval",
            "0.5",
            *self.extra,
        ]

    def start(self) -> PluginProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        env.pop("EXOSUIT_URL", None)
        env.pop("KUBECONFIG", None)
        self.lines = []
        self.process = subprocess.Popen(
            self.argv(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env={**env, "PYTHONUNBUFFERED": "1"},
        )
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + DEADLINE
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the plugin exited {self.process.returncode}:\n{self.output}")
            if self.registration_socket.exists():
                try:
                    self.info(timeout=2)
                    return self
                except grpc.RpcError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the plugin did not register:\n{self.output}")
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with self.process.stdout as stream:
            for line in stream:
                self.lines.append(line)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def wait_for_output(self, text: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while text not in self.output:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in the plugin's output:\n{self.output}")
            time.sleep(0.05)

    # -- the kubelet's side ----------------------------------------------------------------

    def info(self, timeout: float = 10) -> Any:
        with grpc.insecure_channel(f"unix://{self.registration_socket}") as channel:
            stub = pluginregistration_pb2_grpc.RegistrationStub(channel)
            return stub.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=timeout)

    def notify(self, registered: bool, error: str = "") -> Any:
        with grpc.insecure_channel(f"unix://{self.registration_socket}") as channel:
            stub = pluginregistration_pb2_grpc.RegistrationStub(channel)
            status = pluginregistration_pb2.RegistrationStatus(
                plugin_registered=registered, error=error
            )
            return stub.NotifyRegistrationStatus(status, timeout=10)

    def prepare(
        self, claims: list[tuple[str, str, str]], version: str = "v1", timeout: float = 45
    ) -> Any:
        """NodePrepareResources for (namespace, uid, name) claims, with the kubelet's
        45 s deadline."""
        pb2, grpc_module = VERSIONS[version]
        with grpc.insecure_channel(f"unix://{self.dra_socket}") as channel:
            stub = grpc_module.DRAPluginStub(channel)
            request = pb2.NodePrepareResourcesRequest(
                claims=[pb2.Claim(namespace=n, uid=u, name=c) for n, u, c in claims]
            )
            return stub.NodePrepareResources(request, timeout=timeout)

    def unprepare(self, claims: list[tuple[str, str, str]], version: str = "v1") -> Any:
        pb2, grpc_module = VERSIONS[version]
        with grpc.insecure_channel(f"unix://{self.dra_socket}") as channel:
            stub = grpc_module.DRAPluginStub(channel)
            request = pb2.NodeUnprepareResourcesRequest(
                claims=[pb2.Claim(namespace=n, uid=u, name=c) for n, u, c in claims]
            )
            return stub.NodeUnprepareResources(request, timeout=45)
