"""`clusterctl up INVENTORY`: clean stale ranks, pull, start containers, preflight; remember the cluster."""
from __future__ import annotations

import argparse

from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inventory", nargs="?", help="inventory file (default: the active cluster)")
    parser.add_argument("-i", dest="inventory_opt", help=argparse.SUPPRESS)
    parser.add_argument("--limit", help="comma-separated host names or groups to act on")
    parser.add_argument("--force", action="store_true",
                        help="also kill foreign processes holding GPUs/the port and replace foreign containers")
    parser.add_argument("--include-quarantined", action="store_true",
                        help="plan the hosts the health record quarantined too (`clusterctl health`)")
    parser.add_argument("--playbook", default="up", help="the flow to run (default: playbooks/up.yaml)")


def execute(args, app) -> Outcome:
    from clusterctl.api.playbooks import run_flow

    given = getattr(args, "inventory", None) or getattr(args, "inventory_opt", None)
    return run_flow(app, given, args.playbook, title="up", remember=True, variables={"force": args.force})
