"""``exosuit-agent discover``: services of each device and the installed drivers, in the
table and in JSON."""

from __future__ import annotations

import dataclasses
import json

from exosuit.agent.plugins import config_digest
from exosuit.agent.snapshot import discover, make_snapshot
from exosuit.cmd.agent import _print_table, main
from exosuit.drivers import available_drivers
from exosuit.drivers.base import Service
from tests.helpers.inventory import fpga


def _config(tmp_path) -> str:
    path = tmp_path / "agent.conf"
    path.write_text(f"[agent]\nstate_dir = {tmp_path}/state\n[simulated]\ndevices = fake_fpga:1\n")
    return str(path)


def test_the_table_lists_the_installed_drivers_with_versions_and_digests(tmp_path, capsys):
    argv = ["discover", "--config-file", _config(tmp_path), "--hostname", "h", "--driver"]
    assert main([*argv, "simulated"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("DRIVER "))
    assert lines[start].split() == [
        "DRIVER",
        "VERSION",
        "ENABLED",
        "FOUND",
        "CONFIG",
        "DIGEST",
        "ERROR",
    ]
    rows = {line.split()[0]: line.split() for line in lines[start + 1 : lines.index("", start)]}
    assert list(rows) == available_drivers()
    digest = config_digest({"devices": {"fake_fpga": "1"}, "fail_install": []})
    assert rows["simulated"][2:] == ["yes", "1", digest[:19], "-"]
    assert rows["nvme"][2:] == ["no", "-", "-", "-"]
    assert lines[-1].startswith("host h: 1 device(s), 1 deployable(s) found by simulated")

    assert main([*argv, "simulated", "--format", "json"]) == 0
    snapshot = json.loads(capsys.readouterr().out)
    (simulated,) = [d for d in snapshot["drivers"] if d["name"] == "simulated"]
    assert simulated["config_digest"] == digest
    assert "usage" not in snapshot


def test_each_devices_services_are_listed(capsys):
    offering = dataclasses.replace(
        fpga("0000:0c:00.0"),
        services=(
            Service("fpga_function", "f00d", True, {"region": "0", "interface_id": "abc"}),
            Service("vgpu", "nvidia-222", False),
        ),
    )

    class _One:
        name = "one"

        def discover(self):
            return [offering, fpga("0000:0d:00.0")]

    snapshot = make_snapshot("h", discover([_One()]))
    _print_table(snapshot, ["one"], "/")
    lines = capsys.readouterr().out.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.split()[:3] == ["PCI", "ADDRESS", "SERVICE"]
    )
    assert [line.split(maxsplit=4) for line in lines[start + 1 : start + 3]] == [
        ["0000:0c:00.0", "fpga_function", "f00d", "enabled", "interface_id=abc, region=0"],
        ["0000:0c:00.0", "vgpu", "nvidia-222", "available", "-"],
    ]
    assert lines[start + 3] == ""
