"""``exosuit complete``: cliff's completion script for bash, plus one for zsh, both
also completing the ids and names of the API's objects.

cliff's bash script needs bash-completion's helpers and bash's ``${!name}``, which
zsh's bashcompinit lacks; the zsh script below walks the same data natively.

Ids and names: an argument or option whose metavar names an object (``DEVICE``,
``HOSTNAME``, ``PROFILE`` …) is completed from that object's list, asked of the API
when the completion runs (``exosuit <noun> list -f value -c <field>``, with the line's
--os-endpoint/--os-cloud, else $EXOSUIT_URL or OS_*); nothing is offered when the API
does not answer.
"""

from __future__ import annotations

import argparse
from typing import Any

from cliff import complete

__all__ = ["Complete", "id_data"]

# A metavar → the kind of object it names, and how a kind's values are listed.
_KINDS_BY_METAVAR = {
    "DEVICE": "device",
    "ARQ": "arq",
    "CLAIM": "claim",
    "DEPLOYABLE": "deployable",
    "PROFILE": "profile",
    "IMAGE": "image",
    "HOSTNAME": "host",
}
_KINDS_BY_OPTION = {"--profile": "profile", "--host": "host"}
LISTS = {
    "device": "device list -f value -c uuid",
    "arq": "arq list -f value -c uuid",
    "claim": "claim list -f value -c uuid",
    "deployable": "deployable list -f value -c uuid",
    "profile": "profile list -f value -c name",
    "image": "image list -f value -c name",
    "host": "host list -f value -c hostname",
}


def _shell_name(text: str) -> str:
    return text.replace("-", "_").replace(" ", "_")


def id_data(command: Any, words: list[str]) -> list[str]:
    """Shell assignments: ``arg_<command>=<kind>`` for its positional argument that
    names an object, ``opt_<command>_<option>=<kind>`` for each such option."""
    the_cmd = command.app.command_manager.find_command(words)
    factory, name, _ = the_cmd
    parser = factory(command.app, None).get_parser(f"{command.app.NAME} {name}")
    lines = []
    key = _shell_name(" ".join(words))
    for action in parser._actions:
        kind = _KINDS_BY_METAVAR.get(str(action.metavar))
        if not action.option_strings:
            if kind:
                lines.append(f"arg_{key}='{kind}'")
            continue
        for option in action.option_strings:
            found = _KINDS_BY_OPTION.get(option) or (kind if option.startswith("--") else None)
            if found and action.nargs != 0:
                lines.append(f"opt_{key}_{_shell_name(option)}='{found}'")
    return lines


def _lists() -> list[str]:
    return [f"ids_{kind}='{command}'" for kind, command in LISTS.items()]


class CompleteZsh(complete.CompleteShellBase):
    """completion for zsh"""

    def get_header(self) -> str:
        return f"#compdef {self.name}\n_{self.escaped_name}()\n{{\n  # Command data:\n"

    def __init__(self, name: str, output: Any, ids: list[str]) -> None:
        super().__init__(name, output)
        self.ids = ids

    def get_trailer(self) -> str:
        return (
            "".join(f"  {line}\n" for line in self.ids)
            + """
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
  local key="${proposed//-/_}" kind="" lookup prev="${words[CURRENT-1]}"
  if [[ ${prev} == --* && ${words[CURRENT]} != -* ]]; then
    lookup="opt_${key}_${prev//-/_}"
    kind="${(P)lookup}"
  elif [[ ${words[CURRENT]} != -* && -n ${key} ]]; then
    lookup="arg_${key}"
    kind="${(P)lookup}"
  fi
  if [[ -n ${kind} ]]; then
    lookup="ids_${kind}"
    local -a args found
    local i
    for (( i = 2; i < CURRENT; i++ )); do
      case ${words[i]} in
        --os-endpoint|--os-cloud|--os-accelerator-api-version)
          args+=(${words[i]} ${words[i+1]});;
      esac
    done
    found=(${(f)"$(command """
            + self.name
            + """ ${args} ${=${(P)lookup}} 2>/dev/null)"})
    compadd -- ${found}
    return
  fi
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


class CompleteBashIds(complete.CompleteBash):
    """cliff's bash script, completing ids and names too (``id_data``)."""

    def __init__(self, name: str, output: Any, ids: list[str]) -> None:
        super().__init__(name, output)
        self.ids = ids

    def get_trailer(self) -> str:
        trailer = super().get_trailer()
        before = '  if [ -z "${completed}" ] ; then'
        lookup = """  local key="${proposed}" kind="" lookup found
  key=${key//$dash/$underscore}
  if [[ ${prev} == --* && ${cur} != -* ]] ; then
    lookup="opt_${key}_${prev//$dash/$underscore}"
    kind="${!lookup}"
  elif [[ ${cur} != -* && -n ${key} ]] ; then
    lookup="arg_${key}"
    kind="${!lookup}"
  fi
  if [ -n "${kind}" ] ; then
    lookup="ids_${kind}"
    found=$(_@FN@_ids ${!lookup})
    COMPREPLY=( $(compgen -W "${found}" -- "${cur}") )
    return 0
  fi
""".replace("@FN@", self.escaped_name)
        helper = """_@FN@_ids()
{
  local args=() i
  for (( i=1; i < ${#words[@]} - 1; i++ )) ; do
    case "${words[i]}" in
      --os-endpoint|--os-cloud|--os-accelerator-api-version)
        args+=("${words[i]}" "${words[i+1]}") ;;
    esac
  done
  command @NAME@ "${args[@]}" "$@" 2>/dev/null
}
"""
        helper = helper.replace("@FN@", self.escaped_name).replace("@NAME@", self.name)
        data = "".join(f"  {line}\n" for line in self.ids)
        trailer = trailer.replace(before, lookup + before, 1)
        trailer = trailer.replace("\ncomplete -F", "\n" + helper + "complete -F", 1)
        return data + trailer


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
        name = parsed_args.name or self.app.NAME
        shell: complete.CompleteShellBase
        data = complete.CompleteDictionary()
        ids = _lists()
        for command, _ in self.app.command_manager:
            words = command.split()
            data.add_command(words, self.get_actions(words))
            if command not in ("help", "complete"):
                ids += id_data(self, words)
        if parsed_args.shell == "zsh":
            shell = CompleteZsh(name, self.app.stdout, ids)
        elif parsed_args.shell == "bash":
            shell = CompleteBashIds(name, self.app.stdout, ids)
        else:
            code: int = super().take_action(parsed_args)
            return code
        shell.write(data.get_commands(), data.get_data())
        return 0
