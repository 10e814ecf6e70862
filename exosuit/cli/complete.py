"""``exosuit complete``: cliff's completion script for bash, plus one for zsh.

cliff's bash script needs bash-completion's helpers and bash's ``${!name}``, which
zsh's bashcompinit lacks; the zsh script below walks the same data natively.
"""

from __future__ import annotations

import argparse

from cliff import complete

__all__ = ["Complete"]


class CompleteZsh(complete.CompleteShellBase):
    """completion for zsh"""

    def get_header(self) -> str:
        return f"#compdef {self.name}\n_{self.escaped_name}()\n{{\n  # Command data:\n"

    def get_trailer(self) -> str:
        return (
            """
  local cmd="" completed="${cmds}" var proposed name comp
  for var in "${(@)words[2,CURRENT-1]}"; do
    [[ ${var} == -* ]] && break
    proposed="${cmd:+${cmd}_}${var}"
    name="cmds_${proposed//-/_}"
    comp="${(P)name}"
    [[ -z ${comp} ]] && break
    if [[ ${comp} == -* && ${words[CURRENT]} != -* ]]; then
      completed=""
      break
    fi
    cmd="${proposed}"
    completed="${comp}"
  done
  if [[ -z ${completed} ]]; then
    _files
  else
    compadd -- ${=completed}
  fi
}
compdef _"""
            + self.escaped_name
            + " "
            + self.name
            + "\n"
        )


class Complete(complete.CompleteCommand):
    """Print the shell completion script (bash or zsh): see doc/cli.md."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        for action in parser._actions:
            if action.dest == "shell":
                action.choices = sorted({*(action.choices or ()), "zsh"})
                action.help = "bash (default), zsh, or none for the data only."
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        if parsed_args.shell != "zsh":
            code: int = super().take_action(parsed_args)
            return code
        shell = CompleteZsh(parsed_args.name or self.app.NAME, self.app.stdout)
        data = complete.CompleteDictionary()
        for name, _ in self.app.command_manager:
            words = name.split()
            data.add_command(words, self.get_actions(words))
        shell.write(data.get_commands(), data.get_data())
        return 0
