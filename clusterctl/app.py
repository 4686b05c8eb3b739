"""The face's helpers: the cluster options every command shares, and `App`, the session a command
works with (clusterctl/api/session.py)."""
from __future__ import annotations

import argparse

from clusterctl.api.session import ON_ALLOCATIONS, Session

App = Session  # the name the commands know it by


def add_cluster_options(parser: argparse.ArgumentParser, limit: bool = True) -> None:
    parser.add_argument("-i", "--inventory", help="inventory file (default: the active cluster of `up`)")
    if limit:
        parser.add_argument("--limit", help="comma-separated host names or groups to act on")


__all__ = ["App", "ON_ALLOCATIONS", "add_cluster_options"]
