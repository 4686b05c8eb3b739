"""`clusterctl down`: stop the job's ranks and remove the containers clusterctl started."""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--force", action="store_true",
                        help="also end live runs of anyone (logged on the node, named in their `status`) and "
                             "foreign processes holding GPUs or the port")


def execute(args, app) -> Outcome:
    from clusterctl.api.playbooks import run_flow

    return run_flow(app, getattr(args, "inventory", None), "down", title="down",
                    variables={"force": getattr(args, "force", False)})
