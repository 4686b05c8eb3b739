"""`clusterctl completion bash|zsh`: a shell completion script (`source <(clusterctl completion bash)`;
zsh: `clusterctl completion zsh > "${fpath[1]}/_clusterctl"`), written by shtab from the same
argparse parser the CLI runs: every command and option, with each option's choices."""
from __future__ import annotations

import argparse

from clusterctl.outcome import Outcome

SHELLS = ("bash", "zsh")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell: bash (source it) or zsh (a #compdef file)")


def execute(args, app) -> Outcome:
    import shtab

    script = shtab.complete(app.parser, shell=args.shell)
    if not args.json:
        print(script, end="" if script.endswith("\n") else "\n")
    return Outcome({"ok": True, "shell": args.shell, "script": script})
