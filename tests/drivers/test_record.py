"""``exosuit-agent record``: a recorded tree discovers like the host it was recorded from."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from exosuit.agent.record import record
from exosuit.agent.snapshot import build_snapshot
from exosuit.cmd.agent import main
from exosuit.drivers import DriverContext, available_drivers, load_driver
from exosuit.drivers.runner import RecordedRunner
from tests.conftest import require
from tests.drivers.build_fixture_hosts import HOSTS, build

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
SHIPPED = ["pci", "nvme", "sriov_nic", "nvidia_gpu", "intel_qat", "intel_fpga", "xilinx_fpga"]
EVERYTHING = '{"vendor_id": "*"}'


def tree(root: str) -> dict[str, tuple[str, str | bytes]]:
    """Every file (content) and link (target) under root, by relative path."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    found[rel] = ("file", f.read())
    return found


def sysfs_part(root: str) -> dict:
    return {k: v for k, v in tree(root).items() if k.split(os.sep)[0] in ("sys", "proc")}


def discover_json(capsys, root: str, config: str, drivers=("pci", "nvme", "sriov_nic")) -> dict:
    argv = [
        "discover",
        "--config-file",
        config,
        "--hostname",
        "compute-9",
        "--format",
        "json",
        "--sysfs-root",
        root,
    ]
    for name in drivers:
        argv += ["--driver", name]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _vendors() -> dict[str, str]:
    base = "/sys/bus/pci/devices"
    require(os.path.isdir(base), "no /sys/bus/pci on this machine")
    found = {}
    for address in os.listdir(base):
        with open(os.path.join(base, address, "vendor")) as f:
            found[address] = f.read().strip().lower().removeprefix("0x")
    return found


@pytest.mark.parametrize("vendor", ["1af4", "*"], ids=["virtio", "every-function"])
def test_discovering_a_recording_of_this_machine_gives_the_same_snapshot(tmp_path, capsys, vendor):
    expected = sorted(a for a, v in _vendors().items() if vendor in ("*", v))
    if not expected:
        pytest.skip(f"no PCI function of vendor {vendor} on this machine")
    config = tmp_path / "exosuit.conf"
    config.write_text(f'[pci]\ndevice_spec = {{"vendor_id": "{vendor}"}}\n')
    output = str(tmp_path / "recorded")
    assert main(["record", "--output", output]) == 0
    assert "recorded" in capsys.readouterr().out
    real = discover_json(capsys, "/", str(config))
    recorded = discover_json(capsys, output, str(config))
    assert recorded == real
    assert [d["pci_address"] for d in real["devices"] if d["driver_name"] == "pci"] == expected
    assert real["driver_errors"] == []


def test_a_recording_holds_what_drivers_read_and_no_binary_or_bulky_attribute(tmp_path):
    _vendors()
    output = str(tmp_path / "recorded")
    record("/", output)
    recorded = tree(output)
    for address in os.listdir("/sys/bus/pci/devices"):
        link = os.path.join("sys", "bus", "pci", "devices", address)
        assert recorded[link][0] == "link"
        device = os.path.join(output, link)
        assert os.path.isdir(device)  # resolves inside the recording
        for name in ("vendor", "device", "class", "numa_node"):
            assert os.path.isfile(os.path.join(device, name)), (address, name)
        for name in ("config", "resource", "resource0", "rom", "vpd", "remove", "power"):
            assert not os.path.lexists(os.path.join(device, name)), (address, name)
    for rel, (kind, target) in recorded.items():
        if kind == "link":
            assert not os.path.isabs(target), rel
            inside = os.path.normpath(os.path.join(os.path.dirname(rel), target))
            assert not inside.startswith(".."), rel
    assert os.path.isfile(os.path.join(output, "proc", "self", "mountinfo"))


def test_re_recording_a_recording_gives_an_identical_tree(tmp_path):
    _vendors()
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    record("/", first)
    record(first, second)
    assert tree(second) == tree(first)


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_re_recording_a_fixture_host_gives_an_identical_tree(tmp_path, host):
    output = str(tmp_path / host)
    summary = record(os.path.join(FIXTURES, host), output)
    assert summary.skipped == []
    assert sysfs_part(output) == sysfs_part(os.path.join(FIXTURES, host))


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_checked_in_fixture_hosts_are_what_the_builder_writes(tmp_path, host):
    build(host, str(tmp_path))
    assert sysfs_part(str(tmp_path)) == sysfs_part(os.path.join(FIXTURES, host))


def _all_drivers(root: str) -> dict:
    runner = RecordedRunner.from_file(os.path.join(root, "commands.json"))
    drivers = []
    for name in SHIPPED:
        settings = {"device_spec": [EVERYTHING]} if name == "pci" else {}
        drivers.append(
            load_driver(
                name,
                DriverContext(
                    hostname="compute-9", sysfs_root=root, runner=runner, settings=settings
                ),
            )
        )
    return build_snapshot("compute-9", drivers)


FIXTURE_HOSTS = sorted(
    h for h in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, h, "sys"))
)


@pytest.mark.parametrize("host", FIXTURE_HOSTS)
def test_every_shipped_driver_discovers_a_re_recorded_fixture_host_alike(tmp_path, host):
    missing = sorted(set(SHIPPED) - set(available_drivers()))
    require(not missing, f"drivers not installed: {', '.join(missing)}")
    source = os.path.join(FIXTURES, host)
    output = str(tmp_path / host)
    record(source, output)
    # Tool recordings (commands.json, nvml.json) are not sysfs: copied, not recorded.
    for name in os.listdir(source):
        if os.path.isfile(os.path.join(source, name)) and name.endswith(".json"):
            shutil.copy(os.path.join(source, name), output)
    expected = _all_drivers(source)
    assert expected["devices"], "the fixture host has devices"
    assert _all_drivers(output) == expected


def test_record_refuses_a_non_empty_output_and_a_root_without_sys(tmp_path, capsys):
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep").write_text("x")
    assert (
        main(
            ["record", "--output", str(output), "--sysfs-root", os.path.join(FIXTURES, "nvme-host")]
        )
        == 2
    )
    assert "exists and is not an empty directory" in capsys.readouterr().err
    assert (output / "keep").read_text() == "x"
    with pytest.raises(FileNotFoundError):
        record(str(tmp_path / "nowhere"), str(tmp_path / "out2"))


def test_discover_on_a_fixture_runs_the_named_drivers_only(capsys, tmp_path):
    config = tmp_path / "exosuit.conf"
    config.write_text("[sriov_nic]\nphysical_device_mappings = physnet1:ens1f0\n")
    snapshot = discover_json(
        capsys, os.path.join(FIXTURES, "sriov-nic-host"), str(config), drivers=("sriov_nic",)
    )
    assert [d["pci_address"] for d in snapshot["devices"]] == [
        "0000:3b:00.0",
        "0000:5e:00.0",
        "0000:af:00.0",
    ]
    assert {d["driver_name"] for d in snapshot["devices"]} == {"sriov_nic"}
    assert (
        main(
            [
                "discover",
                "--config-file",
                str(config),
                "--hostname",
                "compute-9",
                "--sysfs-root",
                os.path.join(FIXTURES, "sriov-nic-host"),
                "--driver",
                "sriov_nic",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == [
        "PCI",
        "ADDRESS",
        "TYPE",
        "VENDOR",
        "MODEL",
        "DRIVER",
        "RC",
        "ACCEL",
        "HANDLES",
        "DEPLOYABLE",
    ]
    rows = table[1 : table.index("")]
    assert len(rows) == 5  # one line per deployable
    assert rows[0].split()[:2] == ["0000:3b:00.0", "NIC"]
    assert {row.split()[4] for row in rows} == {"sriov_nic"}
    assert table[-1] == (
        f"host compute-9: 3 device(s), 5 deployable(s) found by sriov_nic "
        f"under {os.path.join(FIXTURES, 'sriov-nic-host')}"
    )


def test_discover_says_when_nothing_is_found_and_fails_when_a_driver_fails(capsys, tmp_path):
    empty = tmp_path / "empty"
    (empty / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    (empty / "commands.json").write_text("{}")
    assert (
        main(["discover", "--hostname", "h", "--sysfs-root", str(empty), "--driver", "nvme"]) == 0
    )
    out = capsys.readouterr().out
    assert "host h: 0 device(s), 0 deployable(s) found by nvme" in out
    assert "no accelerator found" in out

    config = tmp_path / "bad.conf"
    config.write_text("[nvidia_gpu]\nvgpu_types = 0000:af:00.0=nvidia-999\n")
    assert (
        main(
            [
                "discover",
                "--hostname",
                "h",
                "--config-file",
                str(config),
                "--sysfs-root",
                os.path.join(FIXTURES, "nvidia-gpu-host"),
                "--driver",
                "nvidia_gpu",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert (
        "driver nvidia_gpu failed: InvalidVgpuConfig: [nvidia_gpu] vgpu_types: GPU "
        "0000:af:00.0 does not support vGPU type 'nvidia-999'" in out
    )
    assert "no accelerator found" not in out
