"""The Python API: `Cluster` (an inventory's nodes) and `Run` (a run of the job on them), over the
cluster session (session.py) that the CLI's commands use too."""
from __future__ import annotations

from clusterctl.api.cluster import Cluster
from clusterctl.api.results import ClusterResult, HostOutcome
from clusterctl.api.run import Run
from clusterctl.api.source import InventorySource

__all__ = ["Cluster", "ClusterResult", "HostOutcome", "InventorySource", "Run"]
