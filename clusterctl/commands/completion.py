"""`clusterctl completion bash`: a shell completion script (`source <(clusterctl completion bash)`)."""
from __future__ import annotations

import argparse

from clusterctl.cli import Outcome

_BASH = """# bash completion for clusterctl: source <(clusterctl completion bash)
_clusterctl() {
  local cur=${COMP_WORDS[COMP_CWORD]} command=${COMP_WORDS[1]}
  if [ "$COMP_CWORD" -eq 1 ]; then COMPREPLY=($(compgen -W "%(commands)s" -- "$cur")); return; fi
  case "$command" in
%(cases)s
  esac
  case "$cur" in -*) COMPREPLY=($(compgen -W "$opts" -- "$cur"));; *) COMPREPLY=($(compgen -f -- "$cur"));; esac
}
complete -o filenames -F _clusterctl clusterctl
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=("bash",), help="the shell (bash; zsh reads it with bashcompinit)")


def execute(args, app) -> Outcome:
    from clusterctl.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    cases = []
    for name, sub in commands.items():
        options = sorted(o for action in sub._actions for o in action.option_strings)
        cases.append(f'    {name}) opts="{" ".join(options)}";;')
    script = _BASH % {"commands": " ".join(commands), "cases": "\n".join(cases)}
    if not args.json:
        print(script, end="")
    return Outcome({"ok": True, "shell": args.shell, "script": script})
