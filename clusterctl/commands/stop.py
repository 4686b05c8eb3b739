"""`clusterctl stop [RUN]`: end a run on every node, from any terminal (backends/stopping.py says how).

Exit 0 when it stopped everywhere (or the run had already ended: said, nothing touched), 3 when a
node was unreachable, 1 when something of the run would not end.
"""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("run", nargs="?", help="the run id (default: the last run; `clusterctl status` lists them)")


def execute(args, app) -> Outcome:
    from clusterctl.backends import backend_of_run

    backend, handle = backend_of_run(app, args.run)
    return backend.stop(handle.run_id, args.inventory)
