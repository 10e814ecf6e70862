"""Building the snapshot from several drivers: one device per PCI function."""

from __future__ import annotations

import logging
from pathlib import Path

from exosuit.agent.snapshot import build_snapshot
from exosuit.drivers import DriverContext, load_driver

NVME_HOST = Path(__file__).resolve().parents[1] / "fixtures" / "nvme-host"
DRIVE = "0000:04:00.0"  # an NVMe controller the nvme driver reports


def _drivers(*names: str, spec: str):
    settings = {"pci": {"device_spec": [spec]}, "nvme": {}}
    return [load_driver(name, DriverContext(hostname="h", sysfs_root=str(NVME_HOST),
                                            settings=settings[name]))
            for name in names]


def test_a_device_two_drivers_find_is_reported_once_by_the_first(caplog):
    spec = '{"address": "0000:04:00.0"}'
    alone = build_snapshot("h", _drivers("nvme", spec=spec))
    assert DRIVE in [d["pci_address"] for d in alone["devices"]]

    with caplog.at_level(logging.WARNING, logger="exosuit.agent.snapshot"):
        for order in (("pci", "nvme"), ("nvme", "pci")):
            snapshot = build_snapshot("h", _drivers(*order, spec=spec))
            claimed = [d for d in snapshot["devices"] if d["pci_address"] == DRIVE]
            assert [d["driver_name"] for d in claimed] == [order[0]]
            # Every other NVMe controller is still there, once.
            assert sorted(d["pci_address"] for d in snapshot["devices"]) == sorted(
                d["pci_address"] for d in alone["devices"])
            build_snapshot("h", _drivers(*order, spec=spec))  # said once, not again
    said = [r.getMessage() for r in caplog.records if DRIVE in r.getMessage()]
    assert said == [
        f"device {DRIVE} is found by drivers pci and nvme: reported by pci (listed first "
        "in [agent] enabled_drivers)",
        f"device {DRIVE} is found by drivers nvme and pci: reported by nvme (listed first "
        "in [agent] enabled_drivers)",
    ]
