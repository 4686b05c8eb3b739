"""`clusterctl collect-logs`: a run's logs, outputs and node diagnostics, then the diagnosis (the flow and
the layout it writes under DEST: collect/gather.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--run", help="the run id (default: the last run)")
    parser.add_argument("--dest", type=Path, help="where to put it (default: ./logs/<run-id>)")
    parser.add_argument("--compress", action="store_true", help="gzip the tar streams (slow links)")


def execute(args, app) -> Outcome:
    from clusterctl.collect.gather import collect_run
    from clusterctl.ground import records

    run_id, record = records.resolve(app.state, args.run, where="--run")
    inventory = app.nodes_of_run(args.inventory, run_id, record)
    return collect_run(app, run_id, record, inventory, args.dest, args.compress)
