"""Assembling the agent from configuration: where the API is, how it authenticates,
which runner the drivers get."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

import pytest

from exosuit.agent.activations import ActivationReconciler
from exosuit.agent.clock import FakeClock
from exosuit.agent.main import api_endpoint, build_agent, load_drivers, make_session
from exosuit.agent.programs import ProgramReconciler
from exosuit.conf import make_conf
from exosuit.drivers.runner import RecordedRunner, SubprocessRunner
from tests.helpers.agent_processes import BIN

GPU_HOST = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-gpu-host"


def _conf(tmp_path, text: str):
    path = tmp_path / "agent.conf"
    path.write_text(text)
    return make_conf([str(path)])


def test_keystone_options_in_the_agent_group_and_an_empty_api_url(tmp_path):
    conf = _conf(
        tmp_path,
        "[DEFAULT]\nhost = compute-1\n[agent]\napi_url =\n"
        "auth_type = password\nauth_url = https://keystone.example.com/v3\n"
        "username = exosuit-agent\npassword = secret\nuser_domain_name = Default\n"
        "project_name = service\nproject_domain_name = Default\n"
        "cafile = /etc/ssl/certs/ca-certificates.crt\ntimeout = 20\n",
    )
    assert conf.agent.api_url == ""  # the catalog's accelerator endpoint
    session = make_session(conf)
    assert type(session.auth).__name__ == "Password"
    assert session.auth.auth_url == "https://keystone.example.com/v3"
    assert session.verify == "/etc/ssl/certs/ca-certificates.crt"
    assert session.timeout == 20


def test_an_explicit_api_url_needs_no_keystone(tmp_path):
    conf = _conf(
        tmp_path,
        f"[agent]\napi_url = http://api.example.com:6666\n"
        f"enabled_drivers = simulated\nstate_dir = {tmp_path}/state\n",
    )
    clock = FakeClock()
    agent = build_agent(conf, clock=clock)
    assert agent.clock is clock
    assert agent.reporter.session.auth is None
    assert agent.reporter.url.startswith("http://api.example.com:6666/agent/v1/hosts/")
    assert agent.reporter.timeout == 30.0  # the default bound of one report


def test_the_session_timeout_bounds_each_report(tmp_path):
    conf = _conf(
        tmp_path,
        f"[agent]\napi_url = http://api.example.com:6666\n"
        f"enabled_drivers = simulated\nstate_dir = {tmp_path}/state\ntimeout = 7\n",
    )
    assert build_agent(conf).reporter.timeout == 7


def test_without_api_url_nor_keystone_the_agent_says_why_it_cannot_start(tmp_path):
    config = tmp_path / "agent.conf"
    config.write_text(
        f"[agent]\napi_url =\nenabled_drivers = simulated\nstate_dir = {tmp_path}/state\n"
    )
    result = subprocess.run(
        [os.path.join(BIN, "exosuit-agent"), "run", "--config-file", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "api_url is empty and no [agent] auth_type" in result.stderr
    assert "Traceback" not in result.stderr


def test_drivers_on_a_recorded_tree_get_its_recorded_tools(tmp_path):
    conf = make_conf([])
    (recorded,) = load_drivers(conf, "h", str(GPU_HOST), ["nvidia_gpu"])
    assert isinstance(recorded.runner, RecordedRunner)
    assert recorded.runner.recordings  # tests/fixtures/nvidia-gpu-host/commands.json
    (live,) = load_drivers(conf, "h", "/", ["nvidia_gpu"])
    assert isinstance(live.runner, SubprocessRunner)


@pytest.mark.slow  # starts an agent process
def test_a_second_agent_on_the_same_state_directory_refuses_to_start(tmp_path):
    """Two agents writing one cache would interleave their writes: the second says why
    it does not start; the first keeps running; once it is gone the directory is free."""
    config = tmp_path / "agent.conf"
    # Port 9 (discard) on loopback: nothing listens, the agent backs off and keeps running.
    config.write_text(
        f"[DEFAULT]\nhost = locked-host\n[agent]\napi_url = http://127.0.0.1:9\n"
        f"enabled_drivers = simulated\nstate_dir = {tmp_path}/state\n"
        "report_jitter = 0\n"
    )
    command = [os.path.join(BIN, "exosuit-agent"), "run", "--config-file", str(config)]
    log = tmp_path / "first.log"
    with open(log, "w") as out:
        first = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "retrying with exponential backoff" not in log.read_text():
            assert first.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        second = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert second.returncode == 1
        assert "already uses the state directory" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None
    finally:
        first.kill()
        first.wait()
    again = build_agent(make_conf([str(config)]), lock=True)  # free after kill -9
    again.cache.unlock()


def test_an_unreachable_keystone_at_start_is_waited_out_with_one_log_line(tmp_path, caplog):
    conf = _conf(
        tmp_path,
        "[agent]\napi_url =\nauth_type = password\n"
        "auth_url = http://127.0.0.1:9/v3\nusername = exosuit-agent\npassword = x\n"
        "project_name = service\nuser_domain_name = Default\n"
        "project_domain_name = Default\nmax_backoff = 4\n",
    )
    session = make_session(conf)
    clock = FakeClock()

    def give_up() -> None:
        raise KeyboardInterrupt  # the operator gives up; the agent never did

    clock.call_later(30, give_up)
    with (
        caplog.at_level(logging.WARNING, logger="exosuit.agent.main"),
        pytest.raises(KeyboardInterrupt),
    ):
        api_endpoint(conf, session, clock=clock)
    said = [r.getMessage() for r in caplog.records if r.name == "exosuit.agent.main"]
    assert len(said) == 1 and said[0].startswith(
        "Keystone unreachable while looking up the API in the catalog"
    ), said
    # Exponential with jitter from 1 s, capped by [agent] max_backoff, until given up.
    waits = clock.waits
    assert len(waits) >= 8
    assert 0.5 <= waits[0] <= 1 and 1 <= waits[1] <= 2 and 2 <= waits[2] <= 4
    assert all(2 <= w <= 4 for w in waits[3:])
    assert sum(waits[:-1]) < 30 <= sum(waits)


def test_the_agent_built_from_configuration_reports_every_installed_driver(tmp_path):
    from exosuit import schemas
    from exosuit.agent.plugins import config_digest
    from exosuit.drivers import available_drivers

    conf = _conf(
        tmp_path,
        f"[agent]\napi_url = http://api.example.com:6666\nenabled_drivers = simulated\n"
        f"state_dir = {tmp_path}/state\n[simulated]\ndevices = fake_fpga:2\n",
    )
    agent = build_agent(conf, clock=FakeClock())
    snapshot = agent.snapshot()
    drivers = {d["name"]: d for d in snapshot["drivers"]}
    assert list(drivers) == available_drivers()
    assert drivers["simulated"]["enabled"] is True
    assert drivers["simulated"]["found"] == 2
    assert drivers["simulated"]["config_digest"] == config_digest(
        {"devices": {"fake_fpga": "2"}, "fail_install": []}
    )
    assert not any(d["enabled"] for name, d in drivers.items() if name != "simulated")
    assert snapshot["hash"] == schemas.snapshot_hash(
        snapshot["devices"], snapshot["driver_errors"], snapshot["drivers"]
    )
    # The programs and the activations see the same drivers.
    programs, activations = agent.reconcilers[:2]
    assert isinstance(programs, ProgramReconciler) and programs.drivers == agent.drivers
    assert isinstance(activations, ActivationReconciler) and activations.plugins is agent.plugins
