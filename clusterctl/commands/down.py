"""`clusterctl down`: stop the job's ranks and remove the containers clusterctl started."""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)


def execute(args, app) -> Outcome:
    from clusterctl.api.playbooks import run_flow

    return run_flow(app, getattr(args, "inventory", None), "down", title="down")
