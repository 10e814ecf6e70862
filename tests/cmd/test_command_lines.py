"""Console scripts take their options before or after the subcommand, as oslo tools do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exosuit.cmd import agent, conductor, manage


def _config(tmp_path: Path) -> str:
    path = tmp_path / "exosuit.conf"
    path.write_text(
        f"[DEFAULT]\nhost = cli-host\n[database]\nconnection = sqlite:///{tmp_path}/exo.db\n"
        "[agent]\nenabled_drivers = simulated\n"
    )
    return str(path)


@pytest.mark.parametrize(
    "order",
    [
        pytest.param(lambda c: ["--config-file", c, "db", "upgrade"], id="before"),
        pytest.param(lambda c: ["db", "--config-file", c, "upgrade"], id="between"),
        pytest.param(lambda c: ["db", "upgrade", "--config-file", c], id="after"),
    ],
)
def test_manage_reads_the_config_file_wherever_it_is_given(tmp_path, capsys, order):
    config = _config(tmp_path)
    assert manage.main(order(config)) == 0
    assert f"sqlite:///{tmp_path}/exo.db" in capsys.readouterr().out
    assert manage.main(["--config-file", config, "db", "version"]) == 0  # at head now
    assert (tmp_path / "exo.db").exists()


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_agent_discover_reads_the_config_file_wherever_it_is_given(tmp_path, capsys, before):
    config = _config(tmp_path)
    args = ["discover", "--format", "json"]
    args = ["--config-file", config, *args] if before else [*args, "--config-file", config]
    assert agent.main(args) == 0
    snapshot = json.loads(capsys.readouterr().out)
    assert snapshot["hostname"] == "cli-host"  # [DEFAULT] host came from the file
    assert snapshot["devices"]


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_conductor_status_reads_the_config_file_wherever_it_is_given(tmp_path, capsys, before):
    config = _config(tmp_path)
    assert manage.main(["--config-file", config, "db", "upgrade"]) == 0
    capsys.readouterr()
    args = ["status", "--format", "json"]
    args = ["--config-file", config, *args] if before else [*args, "--config-file", config]
    assert conductor.main(args) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["failed"] == 0


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(SystemExit, match="does not exist"):
        manage.main(["--config-file", str(tmp_path / "nope.conf"), "db", "version"])
