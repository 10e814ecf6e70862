"""The plugin's two gRPC servers on Unix sockets, as the kubelet finds them.

* registration, ``<registry dir>/exosuit.dev-reg.sock`` (the kubelet watches that
  directory): ``GetInfo`` says DRAPlugin ``exosuit.dev``, the DRA socket's path and the
  versions served; ``NotifyRegistrationStatus`` is the kubelet's verdict, logged.
* the DRA node service, ``<plugins dir>/exosuit.dev/dra.sock``: ``NodePrepareResources``
  and ``NodeUnprepareResources`` in API versions v1 (kubelet 1.34+) and v1beta1
  (1.32–1.33), the same messages answered by the same ``Driver``.

Stale sockets of an earlier run are removed before binding; stopping removes the
registration socket first (the kubelet then deregisters the plugin), the DRA socket last.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from exosuit.kubelet.driver import ClaimRef, Driver, Outcome
from exosuit.kubelet.protos import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from exosuit.kubernetes.slices import DRIVER

__all__ = [
    "PLUGIN_TYPE",
    "SUPPORTED_VERSIONS",
    "PluginServers",
    "RegistrationStatus",
    "dra_socket",
    "registration_socket",
]

LOG = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
WORKERS = 16
KUBELET_TIMEOUT = 45.0
MARGIN = 3.0  # answer this long before the kubelet's deadline


def registration_socket(registry_dir: Path) -> Path:
    return Path(registry_dir) / f"{DRIVER}-reg.sock"


def dra_socket(plugins_dir: Path) -> Path:
    return Path(plugins_dir) / DRIVER / "dra.sock"


@dataclass
class RegistrationStatus:
    """What the kubelet said last (None: nothing yet)."""

    registered: bool | None = None
    error: str = ""


class _Registration(pluginregistration_pb2_grpc.RegistrationServicer):
    def __init__(self, endpoint: Path, status: RegistrationStatus, changed: threading.Event):
        self.endpoint = endpoint
        self.status = status
        self.changed = changed

    def GetInfo(self, request: Any, context: Any) -> Any:
        return pluginregistration_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRIVER,
            endpoint=str(self.endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.status.registered = request.plugin_registered
        self.status.error = request.error
        if request.plugin_registered:
            LOG.info("registered with the kubelet as %s", DRIVER)
        else:
            LOG.error("the kubelet refused the registration: %s", request.error)
        self.changed.set()
        return pluginregistration_pb2.RegistrationStatusResponse()


class _DraService:
    """NodePrepareResources and NodeUnprepareResources of one API version (``pb2``:
    its messages module); the versions' messages are the same."""

    def __init__(self, driver: Driver, pb2: ModuleType) -> None:
        self.driver = driver
        self.pb2 = pb2

    def _refs(self, request: Any) -> list[ClaimRef]:
        return [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]

    def _timeout(self, context: Any) -> float:
        remaining: float | None = context.time_remaining()
        if remaining is None:
            remaining = KUBELET_TIMEOUT
        return max(1.0, remaining - MARGIN)

    def _prepared(self, outcome: Outcome) -> Any:
        return self.pb2.NodePrepareResourceResponse(
            devices=[
                self.pb2.Device(
                    request_names=list(d.request_names),
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    cdi_device_ids=list(d.cdi_device_ids),
                )
                for d in outcome.devices
            ],
            error=outcome.error,
        )

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        outcomes = self.driver.prepare(self._refs(request), self._timeout(context))
        response = self.pb2.NodePrepareResourcesResponse()
        for uid, outcome in outcomes.items():
            response.claims[uid].CopyFrom(self._prepared(outcome))
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        outcomes = self.driver.unprepare(self._refs(request))
        response = self.pb2.NodeUnprepareResourcesResponse()
        for uid, outcome in outcomes.items():
            response.claims[uid].error = outcome.error
        return response


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _server(path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    _unlink(path)  # left by a process that did not stop cleanly
    server = grpc.server(ThreadPoolExecutor(max_workers=WORKERS))
    server.add_insecure_port(f"unix://{path}")
    return server


class PluginServers:
    """Both servers: ``start()``, then ``stop()``."""

    def __init__(self, driver: Driver, registry_dir: Path, plugins_dir: Path) -> None:
        self.driver = driver
        self.registration_path = registration_socket(registry_dir).absolute()
        self.dra_path = dra_socket(plugins_dir).absolute()
        self.status = RegistrationStatus()
        self.status_changed = threading.Event()
        self._dra: Any = None
        self._registration: Any = None

    def start(self) -> None:
        self._dra = _server(self.dra_path)
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(
            _DraService(self.driver, dra_v1_pb2), self._dra
        )
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
            _DraService(self.driver, dra_v1beta1_pb2), self._dra
        )
        self._dra.start()
        # Registration last: the kubelet calls the DRA socket as soon as it registers us.
        self._registration = _server(self.registration_path)
        pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(
            _Registration(self.dra_path, self.status, self.status_changed), self._registration
        )
        self._registration.start()
        LOG.info("serving %s on %s and %s", DRIVER, self.registration_path, self.dra_path)

    def stop(self, grace: float = 5.0) -> None:
        if self._registration is not None:
            self._registration.stop(grace).wait()
            _unlink(self.registration_path)
        if self._dra is not None:
            self._dra.stop(grace).wait()
            _unlink(self.dra_path)
