"""`clusterctl down`: stop the job's ranks and remove the containers clusterctl started."""
from __future__ import annotations

import argparse

from clusterctl.app import add_cluster_options
from clusterctl.outcome import Outcome
from clusterctl.commands.up import run_flow


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)


def execute(args, app) -> Outcome:
    return run_flow(args, app, "down", title="down")
