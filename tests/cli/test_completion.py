"""``exosuit complete``: the bash and zsh scripts complete commands, verbs and options."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import cli_env
from tests.conftest import require
from tests.helpers.serve_fixture import _script

BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")
# What bash-completion provides, for a machine without it (the script needs only this).
WORDS_STUB = """
_get_comp_words_by_ref() {
  cur="${COMP_WORDS[COMP_CWORD]}"; prev="${COMP_WORDS[COMP_CWORD-1]}"
  words=("${COMP_WORDS[@]}")
}
"""


@functools.cache  # one script per shell for the module: the cases only read it
def _script_for(shell: str) -> str:
    result = subprocess.run(
        [_script("exosuit"), "complete", "--shell", shell],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=True,
    )
    return result.stdout


def bash_complete(script: str, line: str) -> list[str]:
    """What bash offers for ``line`` (the cursor at its end)."""
    words = line.split(" ")
    helpers = f"source {BASH_COMPLETION}" if BASH_COMPLETION.exists() else WORDS_STUB
    program = f"""
{helpers}
{script}
COMP_WORDS=({" ".join(repr(w) for w in words)})
COMP_CWORD={len(words) - 1}
COMP_LINE={line!r}
COMP_POINT=${{#COMP_LINE}}
_exosuit
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    result = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    return sorted(w for w in result.stdout.split("\n") if w)


def zsh_complete(script: str, line: str) -> list[str]:
    """What zsh offers for ``line``: ``compadd`` and ``_files`` replaced by functions
    that print what they were given (zsh runs a function before a builtin)."""
    words = line.split(" ")
    program = f"""
compdef() {{ : }}
compadd() {{ [[ $1 == -- ]] && shift; print -l -- "$@" }}
_files() {{ print -- FILES }}
{script}
words=({" ".join(repr(w) for w in words)})
CURRENT={len(words)}
_exosuit
"""
    result = subprocess.run(
        ["zsh", "-f", "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    return sorted(w for w in result.stdout.split("\n") if w)


CASES = [
    (
        "exosuit ",
        [
            "arq",
            "audit",
            "claim",
            "complete",
            "deployable",
            "device",
            "discover-services",
            "driver",
            "help",
            "host",
            "image",
            "job",
            "partition",
            "permission",
            "profile",
            "serve",
            "server",
            "service",
        ],
    ),  # fmt: skip
    ("exosuit dev", ["device"]),
    (
        "exosuit device ",
        [
            "delete",
            "disable",
            "drain",
            "enable",
            "health",
            "inactive",
            "list",
            "ready",
            "set",
            "show",
            "undrain",
            "unset",
        ],
    ),
    ("exosuit claim ", ["create", "list", "release", "renew", "show"]),
    ("exosuit arq ", ["bind", "create", "delete", "list", "show", "unbind"]),
    ("exosuit partition ", ["set", "show"]),
    ("exosuit server ", ["attach", "detach"]),
    ("exosuit audit ", ["list", "show"]),
    ("exosuit profile ", ["create", "delete", "list", "show"]),
    ("exosuit image ", ["delete", "list", "show", "upload"]),
    ("exosuit job retry --w", ["--wait"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("line, expected", CASES, ids=[c[0] for c in CASES])
def test_bash_completion(line, expected):
    offered = bash_complete(_script_for("bash"), line)
    assert offered == expected


@pytest.mark.slow
def test_bash_completion_of_options():
    offered = bash_complete(_script_for("bash"), "exosuit device list --")
    assert {"--host", "--type", "--long", "--sort", "--limit", "--format"} <= set(offered)


@pytest.mark.slow
@pytest.mark.parametrize("line, expected", CASES, ids=[c[0] for c in CASES])
def test_zsh_completion(line, expected):
    require(shutil.which("zsh") is not None, "zsh is not installed (apt-get install zsh)")
    offered = zsh_complete(_script_for("zsh"), line)
    # compadd gets the candidates of the level; zsh itself filters them by the prefix.
    prefix = line.rsplit(" ", 1)[1]
    assert [w for w in offered if w.startswith(prefix)] == expected
