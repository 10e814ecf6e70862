"""The command line, finished (issue 22, item 5), against a real ``exosuit serve``:
``device list`` shows health, drain and activation within 80 columns (in a real
terminal too: tmux), short ids wherever a UUID is, "No devices." for an empty list,
``-c`` order, human units and timestamps, ``device enable|disable``, ``arq
create|bind|unbind|delete``, ``--wait``'s last line in a pipe, and completion of ids."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from exosuit.cli.base import human
from tests.cli.conftest import HOST, cli_env
from tests.cli.test_cli_health import _inject, _rediscover_until
from tests.conftest import require
from tests.helpers.serve_fixture import _script

pytestmark = pytest.mark.slow

V = "2.10"
TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\b")


def _devices(api) -> list[dict]:
    return api.list("/v2/devices", "devices", version=V)


def _rows(table: str) -> list[list[str]]:
    """A cliff table's rows (the header first) as lists of stripped cells."""
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("|")
    ]


def test_device_list_shows_health_drain_and_activation_within_80_columns(server, cli, api):
    devices = _devices(api)
    gpu = next(d for d in devices if d["type"] == "GPU")
    fpga = next(d for d in devices if d["type"] == "FPGA")
    _inject(server, {"nvidia_gpu": {"state": "unhealthy", "reason": "injected: XID 79"}})
    cli.run("profile", "create", "finished-fpga", "--group", "resources:FPGA=1")
    claim = cli.json("claim", "create", "--profile", "finished-fpga", "--consumer", "held")
    try:
        _rediscover_until(cli, api, lambda h: h["state"] == "unhealthy")
        cli.run("device", "drain", fpga["uuid"])

        table = cli.run("device", "list").stdout
        lines = table.splitlines()
        assert max(len(line) for line in lines) <= 80, table
        header, *rows = _rows(table)
        assert header == [
            "uuid", "hostname", "type", "health", "drain", "activation", "use"
        ]  # fmt: skip
        assert len(rows) == len(devices)  # one line each: nothing wrapped
        by_id = {row[0]: row for row in rows}
        assert by_id[gpu["uuid"][:8]][3] == "unhealthy held"
        # Held by the claim, the FPGA is draining (not drained) and in use.
        assert by_id[fpga["uuid"][:8]][4] == "draining"
        assert by_id[fpga["uuid"][:8]][5] == fpga["activation"]
        assert by_id[fpga["uuid"][:8]][6] == "in use"
        assert by_id[gpu["uuid"][:8]][6] == "free"

        # The API's values in JSON: the whole UUID, health as an object.
        shown = {d["uuid"]: d for d in cli.json("device", "list")}
        assert shown[gpu["uuid"]]["health"]["state"] == "unhealthy"
        assert shown[gpu["uuid"]]["health"]["offered"] is False
        assert (shown[fpga["uuid"]]["drain"], shown[fpga["uuid"]]["use"]) == ("draining", "in use")
        held = cli.json("device", "show", fpga["uuid"])
        assert held["maintenance"] == "draining"
        assert [h["claim_uuid"] for h in held["holders"]] == [claim["uuid"]]
        cli.run("claim", "release", claim["uuid"])
        assert cli.json("device", "show", fpga["uuid"])["maintenance"] == "drained"
        # --long: the whole UUID in the table too.
        assert gpu["uuid"] in cli.run("device", "list", "--long").stdout
    finally:
        cli.run("claim", "release", claim["uuid"])
        cli.run("profile", "delete", "finished-fpga", check=False)
        _inject(server, {})
        _rediscover_until(cli, api, lambda h: h["state"] == "ok")
        cli.run("device", "health", gpu["uuid"], "--clear")
        cli.run("device", "undrain", fpga["uuid"])


def test_tables_fit_a_real_80_column_terminal(server, cli, api, tmp_path):
    """In tmux, 80 columns wide: the default device table is one line per device and
    no line is wider than the terminal, not even a --long one's (cliff fits tables to a
    terminal's width; -J joins what the terminal itself wrapped)."""
    require(shutil.which("tmux") is not None, "tmux is not installed (apt-get install tmux)")
    devices = _devices(api)
    socket = str(tmp_path / "tmux.sock")
    env = {**cli_env(), "EXOSUIT_URL": server.url, "TERM": "xterm"}
    env.pop("TMUX", None)
    done = tmp_path / "done"
    exosuit = _script("exosuit")
    command = (
        f"{exosuit} device list; {exosuit} arq list --profile none; "
        f"{exosuit} profile list --long; touch {done}"
    )
    subprocess.run(
        ["tmux", "-S", socket, "new-session", "-d", "-x", "80", "-y", "50", command + "; sleep 60"],
        env=env,
        check=True,
        timeout=30,
    )
    try:
        deadline = time.monotonic() + 60
        while not done.exists():
            assert time.monotonic() < deadline, "the commands did not finish in tmux"
            time.sleep(0.2)
        screen = subprocess.run(
            ["tmux", "-S", socket, "capture-pane", "-p", "-J"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], timeout=30, check=False)
    lines = [line for line in screen.splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= 80, screen
    table = screen[: screen.index("No accelerator requests.")]
    header, *rows = _rows(table)
    assert header[:3] == ["uuid", "hostname", "type"]
    assert sorted(r[0] for r in rows) == sorted(d["uuid"][:8] for d in devices), screen
    assert "No accelerator requests." in lines


def test_short_ids_are_accepted_wherever_a_uuid_is(cli, api):
    device = _devices(api)[0]
    shown = cli.json("device", "show", device["uuid"][:8])
    assert shown["uuid"] == device["uuid"]
    assert cli.json("device", "health", device["uuid"][:12])[0]["uuid"] == device["uuid"]
    assert cli.json("device", "show", device["uuid"][:8].upper())["uuid"] == device["uuid"]

    short = cli.run("device", "show", device["uuid"][:7], check=False)
    assert short.returncode == 1
    assert "at least 8 hex digits" in short.stderr
    missing = cli.run("device", "show", "0000aaaa", check=False)
    assert missing.returncode == 1
    assert "no device has a UUID starting with 0000aaaa" in missing.stderr

    # Two profiles whose UUIDs share their first 8 characters: ambiguous, both named.
    first, second = "abcdef01-0000-4000-8000-000000000001", "abcdef01-1111-4000-8000-000000000002"
    for n, ident in enumerate((first, second)):
        cli.run("profile", "create", f"short-{n}", "--uuid", ident, "--group", "resources:FPGA=1")
    ambiguous = cli.run("profile", "show", "abcdef01", check=False)
    assert ambiguous.returncode == 1
    assert first in ambiguous.stderr and second in ambiguous.stderr
    assert cli.json("profile", "show", "abcdef01-1")["uuid"] == second
    assert cli.json("profile", "show", "short-0")["uuid"] == first  # names still work
    # Every list's table shows the short id (the whole one with --long or -f json).
    table = cli.run("profile", "list", "--name", "short-0").stdout
    assert f"| {first[:8]} |" in table and first not in table
    assert first in cli.run("profile", "list", "--name", "short-0", "--long").stdout


def test_empty_lists_say_so_in_a_table_and_stay_empty_in_json(cli):
    empty = cli.run("device", "list", "--host", "nowhere")
    assert empty.stdout == "No devices.\n"
    assert cli.json("device", "list", "--host", "nowhere") == []
    assert cli.run("arq", "list", "--profile", "none").stdout == "No accelerator requests.\n"
    assert cli.run("device", "health", "--host", "nowhere").stdout == "No devices.\n"
    assert cli.run("device", "list", "--host", "nowhere", "-f", "value").stdout == ""


def test_columns_come_in_the_order_given(cli, api):
    device = _devices(api)[0]
    listed = cli.json("device", "list", "-c", "activation", "-c", "type", "-c", "uuid")
    assert list(listed[0]) == ["activation", "type", "uuid"]
    header = _rows(cli.run("device", "list", "-c", "type", "-c", "uuid").stdout)[0]
    assert header == ["type", "uuid"]
    shown = cli.json("device", "show", device["uuid"], "-c", "type", "-c", "hostname")
    assert list(shown) == ["type", "hostname"]
    value = cli.run("device", "show", device["uuid"], "-f", "value", "-c", "type", "-c", "uuid")
    assert value.stdout.splitlines() == [device["type"], device["uuid"]]


def test_tables_show_human_units_and_timestamps(cli, api):
    gpu = next(d for d in _devices(api) if d["type"] == "GPU")
    assert gpu["usage"].get("memory_total_bytes"), gpu["usage"]
    table = cli.run("device", "list", "-c", "uuid", "-c", "usage", "-c", "created_at").stdout
    assert "GiB" in table and "%" in table
    assert TIMESTAMP.search(table), table
    # JSON keeps the API's numbers and timestamps.
    listed = {d["uuid"]: d for d in cli.json("device", "list", "-c", "uuid", "-c", "usage")}
    assert listed[gpu["uuid"]]["usage"]["memory_total_bytes"] == gpu["usage"]["memory_total_bytes"]


def test_human_values():
    assert human("size", 3 * 1024**3) == "3.0 GiB"
    assert human("size", 512) == "512 B"
    assert human("memory_used_bytes", 1536) == "1.5 KiB"
    assert human("utilization_percent", 42.5) == "42.5%"
    assert human("usage", {"memory_total_bytes": 2**20, "temperature": 40}) == {
        "memory_total_bytes": "1.0 MiB",
        "temperature": 40,
    }
    assert human("created_at", "2026-11-29T11:00:05+00:00") == "2026-11-29 11:00:05"
    assert human("name", "plain") == "plain"
    assert human("size", None) is None


def test_device_disable_and_enable(cli, api):
    device = _devices(api)[0]
    disabled = cli.json("device", "disable", device["uuid"][:8])
    assert (disabled["uuid"], disabled["status"]) == (device["uuid"], "maintaining")
    rows = _rows(cli.run("device", "list").stdout)
    # In maintenance: the API shows it as a drain (nothing holds it: drained).
    assert {r[0]: r[4] for r in rows[1:]}[device["uuid"][:8]] == "drained"
    enabled = cli.json("device", "enable", device["uuid"])
    assert enabled["status"] == "enabled"
    assert api.get(f"/v2/devices/{device['uuid']}", version=V)["status"] == "enabled"


def test_arq_create_bind_unbind_delete(cli, api):
    name = f"arq-{uuid.uuid4().hex[:8]}"
    cli.run("profile", "create", name, "--group", "resources:FPGA=1")
    (arq,) = cli.json("arq", "create", name)
    assert arq["state"] == "Initial"
    deployable = next(
        d for d in api.list("/v2/deployables", "deployables") if d["name"] == f"{HOST}_FakeDevice"
    )
    instance = str(uuid.uuid4())

    bound = cli.json(
        "arq",
        "bind",
        arq["uuid"][:8],
        "--host",
        HOST,
        "--deployable",
        deployable["uuid"][:8],
        "--instance",
        instance,
        "--wait",
    )
    assert (bound["uuid"], bound["state"]) == (arq["uuid"], "Bound")
    assert (bound["instance_uuid"], bound["device_rp_uuid"]) == (instance, deployable["rp_uuid"])

    (unbound,) = cli.json("arq", "unbind", arq["uuid"])
    assert unbound["state"] in ("Unbound", "Initial") and not unbound["instance_uuid"]

    refused = cli.run(
        "arq", "bind", arq["uuid"], "--host", HOST, "--device-rp", str(uuid.uuid4()),
        "--instance", instance, check=False,
    )  # fmt: skip
    assert refused.returncode == 1 and "(HTTP 4" in refused.stderr

    assert cli.json("arq", "delete", arq["uuid"][:8]) == [{"uuid": arq["uuid"]}]


def test_wait_reports_the_final_state_in_a_pipe(cli, api):
    fpga = next(d for d in _devices(api) if d["type"] == "FPGA")
    cli.run("device", "inactive", fpga["uuid"], "--wait")
    ready = cli.run("device", "ready", fpga["uuid"], "--wait")
    progress = ready.stderr.splitlines()
    assert progress, "no progress line in a pipe"
    assert progress[-1] == "1/1 devices ready or failed", ready.stderr
    assert "ready" in ready.stdout


def _bash_complete(line: str, url: str) -> list[str]:
    script = subprocess.run(
        [_script("exosuit"), "complete"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    words = line.split(" ")
    program = f"""
_get_comp_words_by_ref() {{
  cur="${{COMP_WORDS[COMP_CWORD]}}"; prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  words=("${{COMP_WORDS[@]}}")
}}
{script}
COMP_WORDS=({" ".join(repr(w) for w in words)})
COMP_CWORD={len(words) - 1}
_exosuit
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    env = {
        **cli_env(EXOSUIT_URL=url),
        "PATH": f"{Path(_script('exosuit')).parent}{os.pathsep}{os.environ['PATH']}",
    }
    result = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, env=env, check=True, timeout=120
    )
    return sorted(w for w in result.stdout.split("\n") if w)


def test_completion_offers_ids_hosts_and_profile_names(server, cli, api):
    devices = _devices(api)
    assert _bash_complete("exosuit device show ", server.url) == sorted(d["uuid"] for d in devices)
    assert _bash_complete("exosuit device list --host ", server.url) == [HOST]
    assert _bash_complete("exosuit host show c", server.url) == [HOST]
    name = f"complete-{uuid.uuid4().hex[:8]}"
    cli.run("profile", "create", name, "--group", "resources:FPGA=1")
    assert _bash_complete(f"exosuit claim create --profile {name[:12]}", server.url) == [name]
    # Options still complete as before.
    assert "--long" in _bash_complete("exosuit device list --l", server.url)


def test_zsh_completion_offers_ids(server, api):
    require(shutil.which("zsh") is not None, "zsh is not installed (apt-get install zsh)")
    script = subprocess.run(
        [_script("exosuit"), "complete", "--shell", "zsh"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    program = f"""
compdef() {{ : }}
compadd() {{ [[ $1 == -- ]] && shift; print -l -- "$@" }}
_files() {{ print -- FILES }}
{script}
words=(exosuit device show '')
CURRENT=4
_exosuit
"""
    env = {
        **cli_env(EXOSUIT_URL=server.url),
        "PATH": f"{Path(_script('exosuit')).parent}{os.pathsep}{os.environ['PATH']}",
    }
    result = subprocess.run(
        ["zsh", "-f", "-c", program], capture_output=True, text=True, env=env, timeout=120
    )
    offered = sorted(w for w in result.stdout.split("\n") if w)
    assert offered == sorted(d["uuid"] for d in _devices(api)), result.stderr
