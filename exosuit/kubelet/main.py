"""The plugin's life: servers up, ResourceSlices kept equal to the inventory until told
to stop, servers down. ``exosuit-kubelet-plugin`` (exosuit/cmd/kubelet_plugin.py)
builds the clients and calls ``run``."""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from exosuit.kubelet.checkpoint import Checkpoint
from exosuit.kubelet.driver import PREPARE_TIMEOUT, Driver
from exosuit.kubelet.exosuit_api import ExosuitApi, ExosuitError
from exosuit.kubelet.server import PluginServers
from exosuit.kubernetes.publisher import SlicePublisher
from exosuit.kubernetes.resource_claims import allocated_devices

__all__ = ["CHECKPOINT_FILE", "Settings", "run"]

LOG = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.json"


@dataclass(frozen=True)
class Settings:
    node: str  # the Kubernetes node (the pool's name)
    hostname: str  # the same machine's name in Exosuit
    registry_dir: Path
    plugins_dir: Path
    checkpoint_dir: Path
    publish_interval: float = 30.0
    prepare_timeout: float = PREPARE_TIMEOUT


def publish_once(publisher: SlicePublisher, exosuit: ExosuitApi, settings: Settings) -> bool:
    """One sync of the ResourceSlices; False (logged) when Exosuit or Kubernetes failed."""
    try:
        publisher.sync(exosuit.inventory(settings.hostname, settings.node))
    except ExosuitError as error:
        LOG.warning("ResourceSlices not synced: Exosuit: %s", error)
        return False
    except ApiException as error:
        LOG.warning("ResourceSlices not synced: Kubernetes: %s %s", error.status, error.reason)
        return False
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
        LOG.warning("ResourceSlices not synced: %s", error)
        return False
    return True


def run(
    settings: Settings,
    exosuit: ExosuitApi,
    kube: client.ApiClient,
    stop: threading.Event,
) -> int:
    """Serve until ``stop`` is set; 0."""
    checkpoint = Checkpoint(settings.checkpoint_dir / CHECKPOINT_FILE)
    driver = Driver(
        node=settings.node,
        hostname=settings.hostname,
        exosuit=exosuit,
        read_allocation=functools.partial(allocated_devices, client.ResourceV1Api(kube)),
        checkpoint=checkpoint,
        prepare_timeout=settings.prepare_timeout,
    )
    publisher = SlicePublisher(kube, settings.node)
    servers = PluginServers(driver, settings.registry_dir, settings.plugins_dir)
    LOG.info(
        "exosuit-kubelet-plugin for node %s (Exosuit host %s, %s); %d claims in %s",
        settings.node,
        settings.hostname,
        exosuit.url,
        len(checkpoint.uids()),
        checkpoint.path,
    )
    servers.start()
    try:
        while not stop.is_set():
            publish_once(publisher, exosuit, settings)
            stop.wait(settings.publish_interval)
    finally:
        servers.stop()
        LOG.info("stopped")
    return 0
