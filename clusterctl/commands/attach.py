"""`clusterctl attach [RUN]`: back to the live log of a run that goes on without its `clusterctl run`
(started with `run --detach`, or whose terminal hung up).

Shows the last `--tail` lines of every rank, then follows them as `logs -f` does, until the run ends
on every node; then the run's end as its supervisor saw it (run/supervision.py), the first failure
named and diagnosed, and the run's exit code (0 succeeded, 1 failed or stopped). Ctrl-C detaches
again: the run goes on (`clusterctl stop RUN` ends it). A run that already ended prints its end.
"""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("run", nargs="?", help="the run id (default: the last run; `clusterctl status` lists them)")
    parser.add_argument("--tail", type=int, default=10, metavar="K",
                        help="lines of each rank's output shown from before attaching (default 10)")


def execute(args, app) -> Outcome:
    from clusterctl.backends.attaching import attach

    return attach(app, args.run, args.inventory, args.tail)
