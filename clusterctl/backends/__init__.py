"""Where a run happens, behind one interface (base.py): SSH(+Docker) nodes (nodes.py) or a Slurm
allocation (slurm.py). `backend_for` and `backend_of_record` are the only places that choose."""
from __future__ import annotations

from typing import Mapping

from clusterctl.backends.base import Backend, Plan, PlannedNode, RunDescription, RunRequest
from clusterctl.backends.nodes import NodesBackend
from clusterctl.backends.slurm import SlurmBackend
from clusterctl.models import Inventory


def backend_for(session, inventory: Inventory) -> NodesBackend:
    """A `scheduler:` section means a Slurm allocation; else the inventory's nodes over SSH."""
    return SlurmBackend(session) if inventory.scheduler is not None else NodesBackend(session)


def backend_of_record(session, record: Mapping) -> NodesBackend:
    """The backend a recorded run ran on (a record of an older clusterctl: Slurm where it has a
    `slurm` entry, else the nodes)."""
    name = record.get("backend") or ("slurm" if record.get("slurm") else "nodes")
    return SlurmBackend(session) if name == "slurm" else NodesBackend(session)


__all__ = ["Backend", "Plan", "PlannedNode", "RunDescription", "RunRequest", "NodesBackend", "SlurmBackend",
           "backend_for", "backend_of_record"]
