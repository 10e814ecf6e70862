"""Hardware change notifications: PCI add/remove/change uevents through pyudev.

Where udevd runs, its processed events are used; otherwise the kernel's own
uevents (netlink, as root). Without pyudev or libudev the agent falls back to
its periodic discovery alone, and says so once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Protocol

LOG = logging.getLogger(__name__)

__all__ = ["UeventWatcher"]

SUBSYSTEMS = ("pci", "mdev", "net", "nvme")


class _Device(Protocol):
    """What the watcher reads of a ``pyudev.Device``."""

    @property
    def action(self) -> str | None: ...

    @property
    def sys_path(self) -> str: ...


class _Observer(Protocol):
    """What the watcher calls of a ``pyudev.MonitorObserver``."""

    def send_stop(self) -> None: ...


class UeventWatcher:
    """Calls ``callback(action, sys_path)`` for each device event, in a background thread."""

    def __init__(self, callback: Callable[[str, str], None]) -> None:
        self.callback = callback
        self._observer: _Observer | None = None

    def start(self) -> bool:
        try:
            import pyudev
        except ImportError:
            LOG.info(
                "pyudev is not installed: hardware changes are seen at the next periodic discovery"
            )
            return False
        try:
            context = pyudev.Context()
            source = "udev" if os.path.exists("/run/udev/control") else "kernel"
            monitor = pyudev.Monitor.from_netlink(context, source=source)
            for subsystem in SUBSYSTEMS:
                monitor.filter_by(subsystem)
            observer = pyudev.MonitorObserver(monitor, callback=self._on_device, name="uevents")
            observer.daemon = True
            observer.start()
            self._observer = observer
        except Exception as error:  # no libudev, no netlink permission …
            LOG.info(
                "uevents unavailable (%s): hardware changes are seen at the next "
                "periodic discovery",
                error,
            )
            return False
        LOG.info("watching %s uevents (%s)", "/".join(SUBSYSTEMS), source)
        return True

    def _on_device(self, device: _Device) -> None:
        try:
            self.callback(device.action or "change", device.sys_path)
        except Exception:
            LOG.exception("uevent callback failed")

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.send_stop()
            self._observer = None
