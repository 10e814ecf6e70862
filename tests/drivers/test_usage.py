"""Usage (``UsageReader``): the live figures drivers read, on the recorded trees.

Figures are named from the vocabulary of doc/drivers.md ("Usage figures"); a driver
returns only those it can read, and reading has no side effects.
"""

from __future__ import annotations

import os

import pytest

from exosuit.drivers import DriverContext, RecordedRunner, UsageReader
from exosuit.drivers.intel_fpga import IntelFpgaDriver
from exosuit.drivers.intel_qat import IntelQatDriver, parse_fw_counters
from exosuit.drivers.nvidia_gpu import NvidiaGpuDriver
from exosuit.drivers.nvml import RecordedNvml
from tests.drivers.fpga_tools import FIXTURES, writable_copy

# The documented vocabulary (doc/drivers.md, "Usage figures").
FIGURES = {
    "utilization_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "errors_total",
    "requests_total",
    "responses_total",
}


def usage_by_address(driver) -> dict[str, dict[str, float]]:
    assert isinstance(driver, UsageReader)
    found = {d.pci_address: dict(driver.usage(d)) for d in driver.discover()}
    for figures in found.values():
        assert set(figures) <= FIGURES
        assert all(isinstance(v, float) for v in figures.values())
    return found


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (
            "intel-qat-host",
            {
                "0000:6b:00.0": {"requests_total": 10981298.0, "responses_total": 10981297.0},
                "0000:70:00.0": {},  # no debugfs directory for it
            },
        ),
        (
            "intel-qat-c62x-host",
            {
                "0000:3d:00.0": {"requests_total": 2606361.0, "responses_total": 2606361.0},
                "0000:3f:00.0": {},
            },
        ),
    ],
    ids=["in-tree-table", "out-of-tree-box"],
)
def test_intel_qat_reads_the_firmware_counters_from_debugfs(host, expected):
    root = os.path.join(FIXTURES, host)
    driver = IntelQatDriver(DriverContext(hostname="qat-1", sysfs_root=root))
    assert usage_by_address(driver) == expected


@pytest.mark.parametrize(
    ("text", "figures"),
    [
        ("AE  Requests Responses\n  0:  5  4\n  1:  7  7\n", {"requests": 12, "responses": 11}),
        (
            "+---+\n| Firmware Requests [AE  0]:   9 |\n| Firmware Responses[AE  0]:   8 |\n"
            "| RAS Events        [AE  0]:   1 |\n",
            {"requests": 9, "responses": 8},
        ),
        ("", None),
        ("+------------------------------------------------+\n", None),
        ("AE Requests Responses\n 0: lots none\n", None),
    ],
    ids=["table", "box", "empty", "banner-only", "garbage"],
)
def test_fw_counters_in_either_format(text, figures):
    expected = (
        {}
        if figures is None
        else {
            "requests_total": float(figures["requests"]),
            "responses_total": float(figures["responses"]),
        }
    )
    assert parse_fw_counters(text) == expected


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        # D5005: port 0 clean; N3000: its VF0's port has two error bits (0x11).
        ("fpga-dfl-host", {"0000:3b:00.0": 0.0, "0000:b1:00.0": 2.0}),
        # The intel-fpga layout has the same file: port 0 clean, port 1 (on the VF) 0x4.
        ("fpga-opae-host", {"0000:5e:00.0": 0.0, "0000:d8:00.0": 1.0}),
    ],
)
def test_intel_fpga_counts_the_error_bits_of_its_ports(host, expected):
    root = os.path.join(FIXTURES, host)
    driver = IntelFpgaDriver(
        DriverContext(hostname="h", sysfs_root=root, runner=RecordedRunner({}))
    )
    assert usage_by_address(driver) == {a: {"errors_total": n} for a, n in expected.items()}


def test_intel_fpga_without_port_error_files_reports_no_figure(tmp_path):
    root = writable_copy("fpga-dfl-host", tmp_path)
    for directory, _dirs, files in os.walk(os.path.join(root, "sys", "devices")):
        if os.path.basename(directory) == "errors" and "errors" in files:
            os.remove(os.path.join(directory, "errors"))
    driver = IntelFpgaDriver(
        DriverContext(hostname="h", sysfs_root=root, runner=RecordedRunner({}))
    )
    assert usage_by_address(driver) == {"0000:3b:00.0": {}, "0000:b1:00.0": {}}


def test_nvidia_gpu_reads_utilization_and_memory_through_nvml():
    root = os.path.join(FIXTURES, "nvidia-gpu-host")
    nvml = RecordedNvml.from_file(os.path.join(root, "nvml.json"))
    context = DriverContext(
        hostname="h",
        sysfs_root=root,
        runner=RecordedRunner.from_file(os.path.join(root, "commands.json")),
    )
    assert usage_by_address(NvidiaGpuDriver(context, nvml=nvml)) == {
        "0000:3b:00.0": {
            "utilization_percent": 37.0,
            "memory_used_bytes": 2147483648.0,
            "memory_total_bytes": 16106127360.0,
        },
        # MIG enabled: NVML gives no utilisation for the whole GPU, memory it does.
        "0000:41:00.0": {"memory_used_bytes": 19327352832.0, "memory_total_bytes": 42949672960.0},
        "0000:81:00.0": {
            "utilization_percent": 0.0,
            "memory_used_bytes": 3145728.0,
            "memory_total_bytes": 42949672960.0,
        },
        "0000:af:00.0": {
            "utilization_percent": 5.0,
            "memory_used_bytes": 1073741824.0,
            "memory_total_bytes": 16106127360.0,
        },
    }
    # Without NVML (or when it fails) there is nothing to say.
    without = usage_by_address(NvidiaGpuDriver(context, nvml=None))
    assert without == dict.fromkeys(without, {}) and len(without) == 4
    failing = NvidiaGpuDriver(context, nvml=RecordedNvml({"error": "NVML_ERROR_DRIVER_NOT_LOADED"}))
    assert [dict(failing.usage(d)) for d in NvidiaGpuDriver(context, nvml=None).discover()] == [
        {}
    ] * 4
