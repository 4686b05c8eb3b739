"""One module per CLI command: `add_arguments(parser)` and `execute(args, app) -> Outcome`, where `app`
is the command's session (api/session.py). A command parses, calls the session, a backend (backends/)
or a flow, and renders; it never imports another command, the executor or transport/, and stays
under 70 lines. `launch.py` is the `launch --from-env` command (the flow is run/from_env.py). To add
a command: `NAME.py` and its line in `COMMANDS` in cli.py; how something is printed: render.py
(human), the command's `Outcome.document` (`--json`)."""
from __future__ import annotations

import argparse


def add_cluster_options(parser: argparse.ArgumentParser, limit: bool = True) -> None:
    """-i/--inventory (and --limit), which every command that acts on a cluster takes."""
    parser.add_argument("-i", "--inventory", help="inventory file (default: the active cluster of `up`)")
    if limit:
        parser.add_argument("--limit", help="comma-separated host names or groups to act on")
