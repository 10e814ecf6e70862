"""Device health as the drivers judge it (exosuit.drivers.health, HealthReader): PCIe AER
counters within a window, a degraded link, a function fallen off the bus, hwmon limits;
NVML's findings; an NVMe drive's SMART critical warning; the simulated driver's faults."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from exosuit.agent.plugins import health_options
from exosuit.conf import make_conf
from exosuit.drivers import (
    HEALTH_OK,
    HEALTH_UNHEALTHY,
    HEALTH_WARNING,
    CounterWindow,
    DriverContext,
    Health,
    HealthReader,
    HealthSettings,
    PciHealth,
    RecordedRunner,
    Sysfs,
    hwmon_health,
    load_driver,
)
from exosuit.drivers.nvidia_gpu import NvidiaGpuDriver, nvml_findings
from exosuit.drivers.nvml import NvmlHealth, RecordedNvml

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
NVME_HOST = os.path.join(FIXTURES, "nvme-host")
GPU_HOST = os.path.join(FIXTURES, "nvidia-gpu-host")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _write(root, rel: str, text: str) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _function(root, address: str = "0000:3b:00.0") -> str:
    """A bare PCI function under ``root``: its directory and the bus link to it."""
    device = f"sys/devices/pci0000:3a/{address}"
    os.makedirs(os.path.join(root, device), exist_ok=True)
    os.makedirs(os.path.join(root, "sys/bus/pci/devices"), exist_ok=True)
    os.symlink(f"../../../devices/pci0000:3a/{address}", f"{root}/sys/bus/pci/devices/{address}")
    return device


def _aer(correctable: int = 0, nonfatal: int = 0, fatal: int = 0) -> dict[str, str]:
    return {
        "aer_dev_correctable": f"RxErr 0\nBadTLP {correctable}\nTOTAL_ERR_COR {correctable}\n",
        "aer_dev_nonfatal": f"Undefined 0\nCmpltTO {nonfatal}\nTOTAL_ERR_NONFATAL {nonfatal}\n",
        "aer_dev_fatal": f"Undefined 0\nSurpDown {fatal}\nTOTAL_ERR_FATAL {fatal}\n",
    }


def test_a_health_is_ok_without_reasons_and_the_worst_finding_wins():
    assert Health() == Health(HEALTH_OK) and Health().reason is None
    with pytest.raises(ValueError, match="no reason"):
        Health(HEALTH_OK, ("why",))
    with pytest.raises(ValueError, match="one of ok, warning, unhealthy"):
        Health("sick", ("why",))
    worst = Health.worst(
        Health(HEALTH_WARNING, ("slow link",)),
        Health(),
        Health(HEALTH_UNHEALTHY, ("fatal AER",)),
        Health(HEALTH_WARNING, ("slow link",)),
    )
    assert worst == Health(HEALTH_UNHEALTHY, ("fatal AER", "slow link"))
    assert worst.to_snapshot() == {"state": "unhealthy", "reason": "fatal AER; slow link"}
    assert Health.worst() == Health.worst(Health(), Health()) == Health()
    assert len(Health(HEALTH_WARNING, ("x" * 2000,)).reason or "") == 1024


def test_a_counter_window_counts_the_growth_of_the_last_window_and_survives_a_reset():
    clock = Clock()
    window = CounterWindow(60, clock)
    assert window.add(500) == 0  # the first reading is the baseline: old errors count not
    clock.now += 30
    assert window.add(503) == 3
    clock.now += 40  # the baseline is the newest reading at or before the window's start
    assert window.add(504) == 4
    clock.now += 30  # now the one at 30 s is
    assert window.add(505) == 2
    clock.now += 100
    assert window.add(504) == 0
    assert window.add(2) == 0  # reset (a driver reload): starts over from there


def test_aer_counters_judge_fatal_by_total_and_the_others_within_the_window(tmp_path):
    root = str(tmp_path)
    device = _function(root)
    for name, text in _aer(correctable=1000).items():
        _write(root, f"{device}/{name}", text)
    clock = Clock()
    settings = HealthSettings(window=60, aer_correctable_warning=10)
    judge = PciHealth(Sysfs(root), settings, now=clock)
    assert judge.check("0000:3b:00.0") == Health()  # a thousand old errors, none new
    clock.now += 10
    for name, text in _aer(correctable=1012, nonfatal=1).items():
        _write(root, f"{device}/{name}", text)
    found = judge.check("0000:3b:00.0")
    assert found == Health(
        HEALTH_WARNING,
        (
            "PCIe AER: 1 or more non-fatal errors within 60 s",
            "PCIe AER: 10 or more correctable errors within 60 s",
        ),
    )
    clock.now += 120  # nothing new for longer than the window: healthy again
    assert judge.check("0000:3b:00.0") == Health()
    for name, text in _aer(correctable=1012, nonfatal=1, fatal=1).items():
        _write(root, f"{device}/{name}", text)
    assert judge.check("0000:3b:00.0") == Health(
        HEALTH_UNHEALTHY, ("PCIe AER: fatal errors reported (SurpDown)",)
    )
    assert (
        PciHealth(Sysfs(root), HealthSettings(aer_fatal_unhealthy=0)).aer("0000:3b:00.0")
        == Health()
    )


def test_a_degraded_link_and_a_function_fallen_off_the_bus(tmp_path):
    root = str(tmp_path)
    device = _function(root)
    for name, value in (
        ("current_link_width", "8"),
        ("max_link_width", "16"),
        ("current_link_speed", "8.0 GT/s PCIe"),
        ("max_link_speed", "16.0 GT/s PCIe"),
    ):
        _write(root, f"{device}/{name}", value + "\n")
    judge = PciHealth(Sysfs(root))
    assert judge.check("0000:3b:00.0") == Health(
        HEALTH_WARNING, ("PCIe link x8, below its maximum x16",)
    )
    strict = PciHealth(
        Sysfs(root),
        HealthSettings(link_width_degraded="unhealthy", link_speed_degraded="warning"),
    )
    assert strict.check("0000:3b:00.0") == Health(
        HEALTH_UNHEALTHY,
        (
            "PCIe link x8, below its maximum x16",
            "PCIe link at 8 GT/s, below its maximum 16 GT/s",
        ),
    )
    with open(os.path.join(root, device, "config"), "wb") as f:
        f.write(b"\xff" * 64)
    found = judge.check("0000:3b:00.0")
    assert found.state == HEALTH_UNHEALTHY
    assert found.reasons[0].endswith("fallen off the bus")
    with pytest.raises(ValueError, match="link_width_degraded"):
        HealthSettings(link_width_degraded="sometimes")


def test_hwmon_limits_name_the_sensor_and_the_limit_not_the_reading(tmp_path):
    root = str(tmp_path)
    hwmon = "sys/devices/platform/bmc/hwmon/hwmon3"
    _write(root, f"{hwmon}/temp1_input", "70000\n")
    _write(root, f"{hwmon}/temp1_max", "90000\n")
    _write(root, f"{hwmon}/temp1_crit", "100000\n")
    _write(root, f"{hwmon}/temp1_label", "Board Temperature\n")
    sysfs = Sysfs(root)
    assert hwmon_health(sysfs, "devices", "platform", "bmc") == Health()
    _write(root, f"{hwmon}/temp1_input", "93500\n")
    assert hwmon_health(sysfs, "devices", "platform", "bmc", what="BMC sensor") == Health(
        HEALTH_WARNING, ("BMC sensor 'Board Temperature' at or above its max limit (90 °C)",)
    )
    _write(root, f"{hwmon}/temp1_input", "101000\n")
    found = hwmon_health(sysfs, "devices", "platform", "bmc")
    assert found == Health(
        HEALTH_UNHEALTHY, ("sensor 'Board Temperature' at or above its crit limit (100 °C)",)
    )


def test_the_health_group_gives_the_drivers_their_thresholds(tmp_path):
    config = tmp_path / "agent.conf"
    config.write_text(
        "[health]\nwindow = 120\nxid_unhealthy = 79, 48\nlink_width_degraded = ignore\n"
    )
    values = health_options(make_conf([str(config)]))
    settings = HealthSettings.from_mapping(values)
    assert settings.window == 120.0
    assert settings.xid_unhealthy == frozenset({48, 79})
    assert settings.link_width_degraded == "ignore"
    context = DriverContext(hostname="h", sysfs_root=NVME_HOST, health=values)
    assert context.health_settings() == settings
    with pytest.raises(ValueError, match="whole number"):
        HealthSettings.from_mapping({"xid_unhealthy": "79,x"})


def test_nvml_findings_follow_the_thresholds():
    settings = HealthSettings()
    assert nvml_findings(settings, NvmlHealth(), [], 0) == Health()
    assert nvml_findings(settings, NvmlHealth(lost=True), [79], 0) == Health(
        HEALTH_UNHEALTHY, ("NVML: the GPU is lost (fallen off the bus)",)
    )
    found = nvml_findings(settings, NvmlHealth(ecc_uncorrected=2, retired_pages=60), [79], 5)
    assert found.state == HEALTH_UNHEALTHY
    assert found.reasons == (
        "NVIDIA XID 79 within 3600 s",
        "NVML: uncorrected ECC errors since the driver loaded",
        "NVML: 60 or more memory pages retired",
    )
    quiet = HealthSettings(ecc_uncorrected_unhealthy=0, retired_pages_unhealthy=0)
    assert nvml_findings(quiet, NvmlHealth(ecc_uncorrected=2, retired_pages=60), [], 5) == (
        Health()
    )


def test_the_gpus_of_the_recorded_host_are_judged_by_nvml_and_their_links():
    with open(os.path.join(GPU_HOST, "nvml.json")) as f:
        recording = json.load(f)
    gpu = NvidiaGpuDriver(
        DriverContext(hostname="gpu-1", sysfs_root=GPU_HOST, runner=RecordedRunner({})),
        nvml=RecordedNvml(recording),
    )
    assert isinstance(gpu, HealthReader)
    found = {d.pci_address: gpu.health(d) for d in gpu.discover()}
    assert found["0000:3b:00.0"] == Health()
    assert found["0000:41:00.0"] == Health(
        HEALTH_WARNING, ("NVML: memory rows are pending remapping (a GPU reset remaps them)",)
    )
    assert found["0000:af:00.0"] == Health(HEALTH_WARNING, ("PCIe link x8, below its maximum x16",))
    # An XID the operator counts as fatal, recorded for the T4: unhealthy, and it stays so
    # for the window even when NVML reports no new one.
    for raw in recording["devices"]:
        if raw["pci_bus_id"].lower().endswith("3b:00.0"):
            raw["health"]["xid_errors"] = [79]
    (t4,) = [d for d in gpu.discover() if d.pci_address == "0000:3b:00.0"]
    assert gpu.health(t4) == Health(HEALTH_UNHEALTHY, ("NVIDIA XID 79 within 3600 s",))
    for raw in recording["devices"]:
        raw.get("health", {})["xid_errors"] = []
    assert gpu.health(t4).state == HEALTH_UNHEALTHY


def _nvme(runner: RecordedRunner, root: str = NVME_HOST, **settings):
    context = DriverContext(hostname="h", sysfs_root=root, runner=runner, settings=settings)
    driver = load_driver("nvme", context)
    return driver, {d.pci_address: d for d in driver.discover()}


def test_an_nvme_drive_reports_its_smart_critical_warning_through_nvme_cli():
    smart = {"critical_warning": 4, "percent_used": 100}
    runner = RecordedRunner(
        {"nvme smart-log /dev/nvme1 --output-format=json": {"stdout": json.dumps(smart)}}
    )
    driver, devices = _nvme(runner)
    assert driver.health(devices["0000:04:00.0"]) == Health(
        HEALTH_UNHEALTHY,
        (
            "nvme1: its reliability is degraded (media or internal errors) (SMART)",
            "nvme1: its rated endurance is used up (SMART)",
        ),
    )
    # Without nvme-cli (or without root) what sysfs shows is all there is.
    driver, devices = _nvme(RecordedRunner({}))
    assert driver.health(devices["0000:04:00.0"]) == Health()
    runner = RecordedRunner({})
    driver, devices = _nvme(runner, smart_log="")
    assert driver.health(devices["0000:04:00.0"]) == Health()
    assert not [c for c in runner.calls if "smart-log" in c]


def test_an_nvme_controller_that_is_dead_or_too_hot_is_unhealthy(tmp_path):
    root = str(tmp_path / "host")
    shutil.copytree(NVME_HOST, root, symlinks=True)
    driver, devices = _nvme(RecordedRunner({}), root)
    controller = os.path.join(root, "sys/class/nvme/nvme1")
    with open(os.path.join(controller, "state"), "w") as f:
        f.write("dead\n")
    assert driver.health(devices["0000:04:00.0"]) == Health(
        HEALTH_UNHEALTHY, ("controller nvme1 is dead",)
    )
    with open(os.path.join(controller, "state"), "w") as f:
        f.write("resetting\n")
    found = driver.health(devices["0000:04:00.0"])
    assert found == Health(HEALTH_WARNING, ("controller nvme1 is resetting, not live",))


def test_the_simulated_driver_takes_its_faults_from_its_state_file(tmp_path):
    state = tmp_path / "simulated"
    context = DriverContext(hostname="sim-1", state_dir=str(state))
    driver = load_driver("simulated", context)
    devices = driver.discover()
    assert [driver.health(d) for d in devices] == [Health()] * len(devices)
    first, second = devices[0], devices[1]
    state.mkdir()
    faults = {
        first.pci_address: {"state": "unhealthy", "reason": "injected: XID 79"},
        second.pci_address: {"state": "warning"},
    }
    (state / "health.json").write_text(json.dumps(faults))
    assert driver.health(first) == Health(HEALTH_UNHEALTHY, ("injected: XID 79",))
    assert driver.health(second) == Health(HEALTH_WARNING, ("simulated fault",))
    (state / "health.json").write_text(json.dumps({first.pci_address: {"state": "ok"}}))
    assert driver.health(first) == Health()
    (state / "health.json").write_text(json.dumps({first.pci_address: {"state": "sick"}}))
    with pytest.raises(ValueError, match="one of ok, warning, unhealthy"):
        driver.health(first)
    (state / "health.json").write_text("[1]")
    with pytest.raises(ValueError, match="health.json"):
        driver.health(first)
