"""Building the snapshot from several drivers: one device per PCI function."""

from __future__ import annotations

import logging
import types
from pathlib import Path

import pytest

from exosuit import schemas
from exosuit.agent import snapshot as snapshot_module
from exosuit.agent.snapshot import build_snapshot
from exosuit.drivers import DriverContext, load_driver

NVME_HOST = Path(__file__).resolve().parents[1] / "fixtures" / "nvme-host"
DRIVE = "0000:04:00.0"  # an NVMe controller the nvme driver reports


def _drivers(*names: str, spec: str):
    settings = {"pci": {"device_spec": [spec]}, "nvme": {}}
    return [
        load_driver(
            name, DriverContext(hostname="h", sysfs_root=str(NVME_HOST), settings=settings[name])
        )
        for name in names
    ]


def test_a_device_two_drivers_find_is_reported_once_by_the_first(caplog):
    # The warning is said once per process: start from a process that has not said it
    # (another test may have discovered the same tree before).
    snapshot_module._CLAIMS_LOGGED.clear()
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
                d["pci_address"] for d in alone["devices"]
            )
            build_snapshot("h", _drivers(*order, spec=spec))  # said once, not again
    said = [r.getMessage() for r in caplog.records if DRIVE in r.getMessage()]
    assert said == [
        f"device {DRIVE} is found by drivers pci and nvme: reported by pci (listed first "
        "in [agent] enabled_drivers)",
        f"device {DRIVE} is found by drivers nvme and pci: reported by nvme (listed first "
        "in [agent] enabled_drivers)",
    ]


@pytest.mark.parametrize(
    ("controlpath_id", "expected"),
    [
        pytest.param(
            {
                "cpid_type": "PCI",
                "cpid_info": {"domain": "0000", "bus": "3b", "device": "00", "function": "0"},
            },
            '{"cpid_info":{"bus":"3b","device":"00","domain":"0000","function":"0"},'
            '"cpid_type":"PCI"}',
            id="pci-keys-sorted-no-spaces",
        ),
        pytest.param(
            {"cpid_type": "simulated", "cpid_info": {"name": "carte é"}},
            '{"cpid_info":{"name":"carte é"},"cpid_type":"simulated"}',
            id="non-ascii-kept",
        ),
        pytest.param(
            types.MappingProxyType({"cpid_type": "PCI", "cpid_info": {}}),
            '{"cpid_info":{},"cpid_type":"PCI"}',
            id="any-mapping",
        ),
    ],
)
def test_device_identity_is_the_canonical_json_the_database_stores(controlpath_id, expected):
    assert schemas.device_identity(controlpath_id) == expected
    assert schemas.device_identity(controlpath_id) == schemas.canonical_json(dict(controlpath_id))


# -- what one discovery found: counts, errors, who found what, usage ----------------------


class _Failing:
    name = "failing"

    def discover(self):
        raise OSError("sysfs went away")


def test_discover_counts_what_each_driver_found_and_reads_usage_where_it_can(caplog):
    import math

    from exosuit.agent.snapshot import discover, make_snapshot
    from tests.agent.small_drivers import Bench, Counted, Metered

    bench = Bench(buses={"meter": "0a", "plain": "0b"})
    bench.usage = {
        "utilization_percent": 37.5,
        "memory_used_bytes": 2**33,
        "Bad-Name": 1.0,  # not a figure name the wire takes
        "errors_total": math.inf,  # not finite
        "requests_total": math.nan,
        "flag": True,  # not a number
    }
    meter = Metered("meter", {"count": 2}, bench)
    plain = Counted("plain", {"count": 1}, bench)
    found = discover([meter, plain, _Failing()], usage=True)
    assert found.found == {"meter": 2, "plain": 1}
    assert found.failed == {"failing": "OSError: sysfs went away"}
    assert found.driver_errors == [{"driver": "failing", "error": "OSError: sysfs went away"}]
    by_address = {
        d["pci_address"]: schemas.device_identity(d["controlpath_id"]) for d in found.devices
    }
    assert found.found_by == {
        by_address["0000:0a:00.0"]: "meter",
        by_address["0000:0a:01.0"]: "meter",
        by_address["0000:0b:00.0"]: "plain",
    }
    figures = {"utilization_percent": 37.5, "memory_used_bytes": 2**33}
    assert found.usage == {by_address["0000:0a:00.0"]: figures, by_address["0000:0a:01.0"]: figures}
    # Not asked: not read.
    assert discover([meter], usage=False).usage == {}

    # A driver that cannot read usage is said once; the report goes on without it.
    bench.broken.add("usage")
    with caplog.at_level(logging.WARNING, logger="exosuit.agent.snapshot"):
        assert discover([meter], usage=True).usage == {}
        assert discover([meter], usage=True).found == {"meter": 2}
    said = [r.getMessage() for r in caplog.records if "usage" in r.getMessage()]
    assert said == ["driver meter could not read usage: nvml: GPU is lost"]

    # Usage never reaches the hash; the drivers' report does, when given.
    bare = make_snapshot("h", found)
    assert "drivers" not in bare and "usage" not in bare
    assert bare["hash"] == schemas.snapshot_hash(found.devices, found.driver_errors)
    drivers = [{"name": "meter", "enabled": True}]
    carried = make_snapshot("h", found, drivers)
    assert carried["drivers"] == drivers
    assert carried["hash"] == schemas.snapshot_hash(found.devices, found.driver_errors, drivers)
    assert carried["hash"] != bare["hash"]


def test_services_are_in_the_snapshot_and_its_hash_only_when_a_device_has_some():
    import dataclasses

    from exosuit.drivers.base import Service
    from tests.helpers.inventory import fpga

    plain = fpga("0000:0c:00.0")
    offering = dataclasses.replace(
        plain,
        services=(
            Service("fpga_function", "f00d", True, {"region": "0"}),
            Service("sriov", "vf", False, {"current": "0", "total": "8"}),
        ),
    )

    class _One:
        name = "one"

        def __init__(self, device):
            self.device = device

        def discover(self):
            return [self.device]

    without = build_snapshot("h", [_One(plain)])
    with_services = build_snapshot("h", [_One(offering)])
    assert "services" not in without["devices"][0]
    assert with_services["devices"][0]["services"] == [
        {"kind": "fpga_function", "name": "f00d", "enabled": True, "details": {"region": "0"}},
        {
            "kind": "sriov",
            "name": "vf",
            "enabled": False,
            "details": {"current": "0", "total": "8"},
        },
    ]
    assert with_services["hash"] != without["hash"]
