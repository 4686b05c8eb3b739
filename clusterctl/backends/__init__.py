"""Where a run happens, behind one interface (base.py): SSH(+Docker) nodes (nodes.py) or a Slurm
allocation (slurm.py). `backend_for` (a new run) and `backend_of_record` (a recorded one) are the only
places that choose."""
from __future__ import annotations

from typing import Optional

from clusterctl.backends.base import Backend, Plan, PlannedNode, RunDescription, RunRequest
from clusterctl.backends.nodes import NodesBackend
from clusterctl.backends.slurm import SlurmBackend
from clusterctl.job.run_record import RunHandle
from clusterctl.models import Inventory


def backend_for(session, inventory: Inventory) -> NodesBackend:
    """A `scheduler:` section means a Slurm allocation; else the inventory's nodes over SSH."""
    return SlurmBackend(session) if inventory.scheduler is not None else NodesBackend(session)


def backend_of_record(session, record) -> NodesBackend:
    """The backend a recorded run ran on (records.handle_of: a record of an older clusterctl is Slurm's
    where it has a `slurm` entry, else the nodes')."""
    from clusterctl.job import records

    return SlurmBackend(session) if records.handle_of(record, "").backend == "slurm" else NodesBackend(session)


def backend_of_run(session, given_run: Optional[str]) -> tuple[NodesBackend, RunHandle]:
    """The backend a recorded run ran on, and its handle (`given_run`: a run id or a handle, parsed
    once; default the last run): what `describe`, `logs` and `stop` of the run are asked of."""
    from clusterctl.job import records

    run_id, record = records.resolve(session.state, given_run)
    return backend_of_record(session, record), records.handle_of(record, run_id)


__all__ = ["Backend", "Plan", "PlannedNode", "RunDescription", "RunRequest", "NodesBackend", "SlurmBackend",
           "backend_for", "backend_of_record", "backend_of_run"]
