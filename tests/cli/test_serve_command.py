"""``exosuit serve`` under the new command line: every option of before, its banner
(what a newcomer does next), and ``--config-file`` before or after the command."""

from __future__ import annotations

import os

import pytest

from exosuit import serve as serve_module
from exosuit.cli import client
from exosuit.cli.app import ExosuitApp
from exosuit.cli.serve import Serve
from tests.cli.conftest import CLI, HOST, write_conf
from tests.helpers.serve_fixture import ExosuitServer


class ConfigBeforeServe(ExosuitServer):
    """``exosuit --config-file X serve …``, as the oslo tools accept it."""

    def argv(self) -> list[str]:
        argv = super().argv()
        files = [a for path in self.config_files for a in ("--config-file", str(path))]
        rest = argv[1:]
        for path in self.config_files:
            i = rest.index(str(path))
            del rest[i - 1 : i + 1]
        return [argv[0], *files, *rest]


@pytest.mark.slow
def test_config_file_before_the_command_and_the_banner(tmp_path):
    server = ConfigBeforeServe(tmp_path / "data", [write_conf(tmp_path / "exosuit.conf")])
    assert server.argv()[1:3] == ["--config-file", str(tmp_path / "exosuit.conf")]
    try:
        server.start()
        assert server.host == HOST  # the file was read

        lines = server.output.splitlines()
        hint = next(line for line in lines if "in another terminal:" in line)
        assert hint.endswith(f"exosuit --os-endpoint {server.url} device list")
        assert f"  dashboard: {server.url}/dashboard" in lines
        # The command it prints works as printed.
        command = hint.split("in another terminal: ", 1)[1].split()
        assert command[0].endswith("exosuit")
        devices = CLI(server.url).json(*command[1:], endpoint=False)
        assert {d["hostname"] for d in devices} == {HOST}
        assert server.stop() == 0
        assert server.output.rstrip().endswith("Exosuit stopped.")
    finally:
        server.kill()


def test_serve_keeps_its_options():
    parser = Serve(ExosuitApp(), None, cmd_name="serve").get_parser("exosuit serve")
    args = parser.parse_args([])
    assert (args.host, args.port, args.data_dir, args.placement_url, args.config_file) == (
        "127.0.0.1",
        6666,
        ".exosuit",
        None,
        [],
    )
    args = parser.parse_args(
        "--host 0.0.0.0 --port 0 --data-dir /tmp/x --placement-url http://p "
        "--config-file a --config-file b".split()
    )
    assert (args.host, args.port, args.data_dir, args.placement_url, args.config_file) == (
        "0.0.0.0",
        0,
        "/tmp/x",
        "http://p",
        ["a", "b"],
    )


def test_the_banner_and_the_client_agree_on_the_default_address():
    assert serve_module.CLIENT_DEFAULT_URL == client.DEFAULT_URL
    parser = Serve(ExosuitApp(), None, cmd_name="serve").get_parser("exosuit serve")
    defaults = parser.parse_args([])
    assert client.DEFAULT_URL == f"http://{defaults.host}:{defaults.port}"


def test_without_endpoint_or_cloud_the_client_talks_to_the_default(monkeypatch):
    for name in list(os.environ):
        if name.startswith("OS_") or name == "EXOSUIT_URL":
            monkeypatch.delenv(name)
    app = ExosuitApp()
    app.options, _ = app.parser.parse_known_args(["device", "list"])
    assert client.connect(app.options).url == "http://127.0.0.1:6666"
    monkeypatch.setenv("EXOSUIT_URL", "http://exosuit.example:7000/v2/")
    assert client.connect(app.options).url == "http://exosuit.example:7000"
