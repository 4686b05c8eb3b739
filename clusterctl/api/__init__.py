"""The Python API: `Cluster` (an inventory's nodes) and `Run` (a run of the job on them), over the
cluster session (session.py) that the CLI's commands use too.

The session is what a command calls `app`: args, env, `State`, `Renderer`, the inventory source and
inventory, `Connections`. It owns an `InventorySource` (`source.py`: file | directory | ansible, parsed
once where the user wrote it, remembered by `up` as itself) and routes the hosts that are not reached
over SSH (the nodes of a Slurm allocation: an srun step each) instead of swapping the connections.
`playbooks.py` the flows that are playbooks (`up`, `down`, `play`, `status`), the cluster locked on
its master while they run; `adhoc.py` `exec`; `reach.py` `inventory show`; results are values, partial
failure as data (as Fabric's GroupResult). To change the Python API: `cluster.py`, `run.py` (Fabric:
transport/fabric_group.py)."""
from __future__ import annotations

from clusterctl.api.cluster import Cluster
from clusterctl.api.results import ClusterResult, HostOutcome
from clusterctl.api.run import Run
from clusterctl.api.source import InventorySource

__all__ = ["Cluster", "ClusterResult", "HostOutcome", "InventorySource", "Run"]
