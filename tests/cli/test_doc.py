"""doc/cli.md: its reference is what the parsers say, and every command has help."""

from __future__ import annotations

import io

import pytest

from exosuit.cli import reference
from exosuit.cli.app import COMMANDS, ExosuitApp


def test_doc_cli_md_reference_is_generated_from_the_parsers():
    current = reference.DOC.read_text()
    wanted = reference.replace_reference(current, reference.render())
    assert current == wanted, "doc/cli.md is out of date: python -m exosuit.cli.reference --write"


def test_every_command_is_in_the_reference():
    text = reference.DOC.read_text()
    for name in [*COMMANDS, "help", "complete"]:
        assert f"### exosuit {name}\n" in text, name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_text(name):
    out, err = io.StringIO(), io.StringIO()
    app = ExosuitApp(stdout=out, stderr=err)

    code = app.run([*name.split(), "--help"])

    assert code == 0, err.getvalue()
    text = out.getvalue()
    assert text.startswith(f"usage: exosuit {name}")
    command = COMMANDS[name](app, None, cmd_name=name)
    summary = command.get_description().splitlines()[0]
    assert summary.endswith(".") and len(summary) < 80, summary
    assert summary in " ".join(text.split())


@pytest.mark.parametrize("name", sorted(n for n in COMMANDS if n != "serve"))
def test_every_api_command_has_json_output(name):
    parser = COMMANDS[name](ExosuitApp(), None, cmd_name=name).get_parser(f"exosuit {name}")
    formats = next(a for a in parser._actions if a.dest == "formatter")
    assert "json" in formats.choices
