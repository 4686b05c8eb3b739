"""`clusterctl exec -- CMD ...`: an ad-hoc command on every host, like `ansible all -m shell`."""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome, any_unreachable, hosts_document
from clusterctl.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--timeout", type=float, default=None, help="seconds per host (default: ssh.command_timeout)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="the command; one word runs through sh -c")


def execute(args, app) -> Outcome:
    argv = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not argv:
        raise UsageError("no command given", where="clusterctl exec", fix="clusterctl exec -- hostname")
    inventory = app.inventory()
    app.connections.warm(inventory.hosts)  # opening while the rest imports (issue 52)
    from clusterctl.api.adhoc import exec_on_hosts

    results = exec_on_hosts(app, inventory, argv, args.timeout, stream=not args.json)
    document = hosts_document(results)
    for entry in document["hosts"].values():
        entry.setdefault("stdout", "")
        entry.setdefault("exit_code", None)
    app.renderer.hosts_table("exec", results, extra_columns=("exit_code",))
    return Outcome(document, unreachable=any_unreachable(results))
