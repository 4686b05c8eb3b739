"""Not built yet."""
from __future__ import annotations

from clusterctl.app import add_cluster_options
from clusterctl.errors import UsageError


def add_arguments(parser) -> None:
    add_cluster_options(parser)


def execute(args, app):
    raise UsageError("this command is not built yet in this version", where="clusterctl")
