"""The agent's driver plug-ins (agent/plugins.py): what is installed, read without
importing it; the operator's overrides enabling, disabling and reconfiguring drivers
without a restart; the drivers' report."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys

from exosuit import schemas
from exosuit.agent.plugins import DriverSet, config_digest, installed_plugins
from exosuit.conf import make_conf
from exosuit.drivers import available_drivers
from tests.agent.small_drivers import DEFAULTS, Bench, driver_set


def test_installed_plugins_are_read_from_metadata_without_importing_a_driver():
    code = (
        "import json, sys\n"
        "from exosuit.agent.plugins import installed_plugins\n"
        "found = installed_plugins()\n"
        "imported = sorted(m for m in sys.modules if m.startswith('exosuit.drivers.'))\n"
        "print(json.dumps([found, imported]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    found, imported = json.loads(result.stdout)
    assert list(found) == available_drivers()  # stevedore's names, which import them all
    version = importlib.metadata.version("exosuit")
    assert found["nvidia_gpu"] == found["simulated"] == version
    # The SDK modules only: not one driver.
    assert set(imported) <= {
        "exosuit.drivers.base",
        "exosuit.drivers.runner",
        "exosuit.drivers.sysfs",
    }
    assert installed_plugins() == found


def test_config_digest_is_the_sha256_of_the_canonical_json_of_the_options():
    settings = {"count": 3, "bind_driver": "vfio-pci", "spec": ("a", "b"), "map": {"k": "v"}}
    expected = schemas.canonical_json(
        {"bind_driver": "vfio-pci", "count": 3, "map": {"k": "v"}, "spec": ["a", "b"]}
    )
    assert config_digest(settings) == "sha256:" + hashlib.sha256(expected.encode()).hexdigest()
    assert config_digest({"count": 3}) != config_digest({"count": "3"})


def _names(plugins: DriverSet) -> list[str]:
    return [d.name for d in plugins.drivers]


def test_overrides_enable_disable_and_reconfigure_drivers_without_a_restart():
    bench = Bench()
    plugins = driver_set(
        bench, {"alpha": ("counted", "0a"), "beta": ("counted", "0b")}, enabled=["alpha"]
    )
    alpha = plugins.drivers[0]
    assert _names(plugins) == ["alpha"]
    assert plugins.stopped == {"beta"}

    # Enabled by the operator, with an option given as a string and read as an integer.
    assert plugins.apply({"beta": {"enabled": True, "config": {"count": "3"}}}) is True
    assert _names(plugins) == ["alpha", "beta"]
    assert plugins.drivers[0] is alpha  # untouched: nothing of it changed
    assert plugins.settings("beta") == {**DEFAULTS, "count": 3}
    assert len(plugins.drivers[1].discover()) == 3
    assert plugins.stopped == set()
    beta = plugins.drivers[1]

    # The same desired state again rebuilds nothing.
    assert plugins.apply({"beta": {"enabled": True, "config": {"count": "3"}}}) is False
    assert plugins.drivers == [alpha, beta]

    # Disabled on purpose; the other reconfigured (a new object with the new options).
    changed = plugins.apply(
        {
            "alpha": {"enabled": False, "config": {}},
            "beta": {"enabled": None, "config": {"count": "2", "bind_driver": "uio"}},
        }
    )
    assert changed is True
    # beta is not in the file and enabled: null means "as the file says": not running.
    assert _names(plugins) == []
    assert plugins.stopped == {"alpha", "beta"}
    assert plugins.apply({"beta": {"enabled": True, "config": {"count": "2"}}}) is True
    assert _names(plugins) == ["alpha", "beta"]
    assert plugins.drivers[1] is not beta
    assert plugins.settings("beta") == {**DEFAULTS, "count": 2}
    assert bench.built[-2:] == [("alpha", DEFAULTS), ("beta", {**DEFAULTS, "count": 2})]
    # No overrides: the file's drivers with the file's options (alpha runs with them).
    again = plugins.drivers[0]
    assert plugins.apply({}) is True
    assert plugins.drivers == [again]


def test_the_report_lists_every_installed_driver():
    bench = Bench()
    plugins = driver_set(
        bench, {"alpha": ("counted", "0a"), "beta": ("counted", "0b")}, enabled=["alpha"]
    )
    assert plugins.report({"alpha": 1}, {}) == [
        {
            "name": "alpha",
            "version": "5.0",
            "enabled": True,
            "config_digest": config_digest(DEFAULTS),
            "found": 1,
            "error": None,
        },
        {
            "name": "beta",
            "version": "4.0",
            "enabled": False,
            "config_digest": None,
            "found": 0,
            "error": None,
        },
    ]
    report = plugins.report({}, {"alpha": "OSError: gone"})
    assert report[0]["error"] == "OSError: gone"
    assert report[0]["found"] == 0


def test_a_refused_override_is_the_drivers_error_and_leaves_it_as_it_was():
    bench = Bench()
    plugins = driver_set(
        bench, {"alpha": ("counted", "0a"), "beta": ("counted", "0b")}, enabled=["alpha"]
    )
    alpha = plugins.drivers[0]
    assert plugins.apply({"alpha": {"config": {"count": "many"}}}) is False
    assert plugins.drivers == [alpha]
    (entry, _) = plugins.report({"alpha": 1}, {})
    assert entry["enabled"] is True
    assert entry["config_digest"] == config_digest(DEFAULTS)  # what it still runs with
    assert entry["error"].startswith("[alpha] count = 'many': ")

    assert plugins.apply({"alpha": {"config": {"colour": "red"}}}) is False
    assert plugins.report({}, {})[0]["error"] == (
        "no option 'colour' in [alpha] (its options: bind_driver, count)"
    )
    # Out of the option's bounds (max 16); a driver the operator enables with it does not run.
    assert plugins.apply({"beta": {"enabled": True, "config": {"count": "99"}}}) is False
    assert _names(plugins) == ["alpha"]
    beta = plugins.report({}, {})[1]
    assert (beta["enabled"], beta["config_digest"], beta["found"]) == (True, None, 0)
    assert "count = '99'" in beta["error"]
    # Corrected: the errors go, the driver runs.
    assert plugins.apply({"beta": {"enabled": True, "config": {"count": "2"}}}) is True
    assert [e["error"] for e in plugins.report({}, {})] == [None, None]


def test_malformed_overrides_are_left_out(caplog):
    bench = Bench()
    plugins = driver_set(bench, {"alpha": ("counted", "0a")}, enabled=["alpha"])
    alpha = plugins.drivers[0]
    assert plugins.apply({"alpha": "off", "ghost": {"enabled": True}}) is False
    assert plugins.apply({"alpha": {"enabled": "no"}}) is False
    assert plugins.drivers == [alpha]
    messages = " | ".join(r.getMessage() for r in caplog.records)
    assert "override of driver alpha is not an object" in messages
    assert "names driver ghost, which is not installed" in messages
    assert "override of driver alpha is malformed" in messages


def test_from_conf_rebuilds_a_real_driver_with_the_operators_options(tmp_path):
    config = tmp_path / "agent.conf"
    config.write_text(
        f"[DEFAULT]\nhost = h1\n[agent]\nenabled_drivers = simulated\n"
        f"state_dir = {tmp_path}/state\n"
    )
    conf = make_conf([str(config)])
    plugins = DriverSet.from_conf(conf, "h1", "/")
    assert sorted(d.type for d in plugins.drivers[0].discover()) == ["FPGA", "GPU"]
    before = plugins.report({}, {})
    assert [e["name"] for e in before] == available_drivers()
    assert {e["name"] for e in before if e["enabled"]} == {"simulated"}

    # A DictOpt given as its string form, parsed by oslo.config's type.
    assert plugins.apply({"simulated": {"config": {"devices": "fake_fpga:3"}}}) is True
    assert sorted(d.type for d in plugins.drivers[0].discover()) == ["FPGA"] * 3
    assert plugins.settings("simulated") == {"devices": {"fake_fpga": "3"}, "fail_install": []}
    simulated = next(e for e in plugins.report({}, {}) if e["name"] == "simulated")
    assert simulated["config_digest"] == config_digest(
        {"devices": {"fake_fpga": "3"}, "fail_install": []}
    )
    assert simulated["version"] == importlib.metadata.version("exosuit")
    # Its state folder is the agent's, as at start.
    assert plugins.drivers[0].state_dir == os.path.join(
        str(tmp_path), "state", "drivers", "simulated"
    )

    assert plugins.apply({"simulated": {"enabled": False}, "nvme": {"enabled": True}}) is True
    assert _names(plugins) == ["nvme"]
