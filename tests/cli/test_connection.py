"""Where ``exosuit`` connects, which microversion it asks for, where options go, what
its errors look like, and what it does on a terminal — against a real ``exosuit serve``."""

from __future__ import annotations

import re
import socket
import uuid

import pytest

from exosuit.cli.client import CLIENT_MAX_VERSION
from tests.cli.conftest import cli_env, run_on_terminal

pytestmark = pytest.mark.slow


def _version(value: str) -> tuple[int, int]:
    major, minor = value.split(".")
    return int(major), int(minor)


def _sent_versions(stderr: str) -> list[str]:
    return re.findall(r'OpenStack-API-Version: accelerator (\d+\.\d+)"', stderr)


def test_the_highest_common_microversion_is_negotiated_from_get_v2(cli, api):
    server_max = api.max_version()
    common = min(_version(server_max), _version(CLIENT_MAX_VERSION))
    expected = f"{common[0]}.{common[1]}"

    result = cli.run("--debug", "device", "list", "-f", "json")

    requests_sent = [line for line in result.stderr.splitlines() if line.startswith("REQ: ")]
    assert f"-X GET {api.url}/v2 " in requests_sent[0]  # the version document first
    assert "OpenStack-API-Version" not in requests_sent[0]
    assert f"-X GET {api.url}/v2/devices " in requests_sent[1]
    assert _sent_versions(result.stderr) == [expected]
    assert f"OpenStack-API-Maximum-Version: {server_max}" in result.stderr  # the response


def test_a_microversion_can_be_asked_for(cli, api):
    result = cli.run("--debug", "--os-accelerator-api-version", "2.0", "device", "list")
    assert set(_sent_versions(result.stderr)) == {"2.0"}
    old = cli.json("--os-accelerator-api-version", "2.0", "device", "list", "--long")
    assert old and all(d["status"] is None for d in old)  # status came with 2.3

    too_new = cli.run("--os-accelerator-api-version", "9.9", "device", "list", check=False)
    assert too_new.returncode == 1
    assert f"the API at {api.url} supports 2.0 to {api.max_version()}, not 9.9" in too_new.stderr


def test_options_that_need_a_newer_microversion_say_so(cli, api):
    result = cli.run(
        "--os-accelerator-api-version", "2.2", "device", "list", "--status", "enabled", check=False
    )
    assert result.returncode == 1
    assert "--status needs API 2.3; --os-accelerator-api-version asks for 2.2" in result.stderr
    sort = cli.run("--os-accelerator-api-version", "2.3", "arq", "list", "--sort", "state",
                   check=False)  # fmt: skip
    assert "--sort needs API 2.4" in sort.stderr


def test_commands_of_a_newer_microversion_say_what_the_server_supports(cli, api):
    server_max = api.max_version()
    if _version(server_max) < (2, 5):
        result = cli.run("host", "list", check=False)
        assert result.returncode == 1
        assert result.stderr == (
            f"error: the API at {api.url} supports up to {server_max}; "
            "`exosuit host list` needs 2.5\n"
        )
    pinned = cli.run("--os-accelerator-api-version", "2.4", "job", "list", check=False)
    assert pinned.returncode == 1
    assert "`exosuit job list` needs" in pinned.stderr
    assert pinned.stderr.count("\n") == 1


def test_global_options_before_or_after_the_command_and_from_the_environment(cli, api):
    before = cli.run("--os-endpoint", api.url, "device", "list", "-f", "json", endpoint=False)
    after = cli.run("device", "list", "-f", "json", "--os-endpoint", api.url, endpoint=False)
    between = cli.run("device", "--os-endpoint", api.url, "list", "-f", "json", endpoint=False)
    env = cli.run("device", "list", "-f", "json", endpoint=False, env=cli_env(EXOSUIT_URL=api.url))
    with_v2 = cli.run("device", "list", "-f", "json", endpoint=False,
                      env=cli_env(EXOSUIT_URL=api.url + "/v2/"))  # fmt: skip
    assert before.stdout == after.stdout == between.stdout == env.stdout == with_v2.stdout
    debug_after = cli.run("device", "list", "--debug", endpoint=True)
    assert "REQ: curl" in debug_after.stderr
    # --os-endpoint wins over EXOSUIT_URL.
    overridden = cli.run("device", "list", env=cli_env(EXOSUIT_URL="http://127.0.0.1:9"))
    assert overridden.returncode == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_endpoint_is_one_clear_line(cli):
    url = f"http://127.0.0.1:{_free_port()}"

    result = cli.run("--os-endpoint", url, "device", "list", endpoint=False, check=False)

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"error: cannot connect to the Exosuit API at {url}: connection refused (is "
        "`exosuit serve` running? Point at it with --os-endpoint or EXOSUIT_URL.)\n"
    )


def test_an_endpoint_that_is_not_the_api(cli, api):
    result = cli.run("--os-endpoint", api.url + "/dashboard", "device", "list",
                     endpoint=False, check=False)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "(HTTP 404" in result.stderr


def test_api_errors_are_one_line_with_message_status_and_code(cli):
    missing = str(uuid.uuid4())

    result = cli.run("device", "show", missing, check=False)

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"error: Device {missing} could not be found. (HTTP 404, exosuit.device.not_found)\n"
    )
    debug = cli.run("--debug", "device", "show", missing, check=False)
    assert debug.returncode == 1
    assert "RESP: [404]" in debug.stderr
    assert "Traceback" in debug.stderr  # --debug also shows where


def test_usage_errors_exit_2(cli):
    nothing = cli.run(endpoint=False, check=False)
    assert nothing.returncode == 2
    assert "a command is required" in nothing.stderr
    unknown_option = cli.run("device", "list", "--colour", check=False)
    assert unknown_option.returncode == 2
    assert "unrecognized arguments: --colour" in unknown_option.stderr
    unknown_command = cli.run("gadget", "list", check=False)
    assert unknown_command.returncode == 2
    assert unknown_command.stdout == ""
    assert "'gadget list' is not an exosuit command" in unknown_command.stderr
    close = cli.run("devise", "list", check=False)
    assert close.returncode == 2 and "device list" in close.stderr  # did you mean
    missing_argument = cli.run("device", "show", check=False)
    assert missing_argument.returncode == 2


def test_version_and_help(cli):
    assert cli.run("--version").stdout.startswith("exosuit ")
    top = cli.run("--help", endpoint=False).stdout
    for command in ("device list", "host show", "profile create", "job retry", "serve"):
        assert command in top
    device = cli.run("device", "list", "--help", endpoint=False).stdout
    assert device.startswith("usage: exosuit device list")
    assert "--host HOSTNAME" in device and "-f {csv,json,table,value,yaml}" in device


# -- on a terminal ----------------------------------------------------------------------


def test_on_a_terminal_tables_fit_its_width_and_errors_are_red(cli):
    code, out = run_on_terminal(
        [cli.script, "--os-endpoint", cli.url, "device", "list"], 90, cli_env()
    )
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.startswith(("+", "|"))]
    assert lines and max(len(line) for line in lines) <= 90

    code, out = run_on_terminal(
        [cli.script, "--os-endpoint", cli.url, "device", "show", "nope"], 100, cli_env()
    )
    assert code == 1
    assert "\x1b[31merror:\x1b[0m Device nope could not be found." in out

    code, out = run_on_terminal(
        [cli.script, "--os-endpoint", cli.url, "device", "show", "nope"],
        100,
        cli_env(NO_COLOR="1"),
    )
    assert code == 1 and "\x1b[" not in out


def test_off_a_terminal_there_are_no_colours(cli):
    result = cli.run("device", "show", "nope", check=False)
    assert "\x1b[" not in result.stderr + result.stdout
