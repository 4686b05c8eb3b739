"""Where a run happens, behind one interface (base.py): SSH(+Docker) nodes (nodes.py) or a Slurm
allocation (slurm.py). `backend_for` and `backend_of_record` are the only places that choose.

`plan()` returns a frozen, printable `Plan`; `launch`, `describe`, `logs`, `stop`, `relaunch` act on
it. `run_flow.py` is the one run flow, the same for every backend (lock the cluster, reach the nodes,
plan, run, record); `healing.py` the one loop of attempts around it (`job.restarts`: classify, leave
out, relaunch). `relaunch(plan)` stops what runs of the plan's run id and launches the plan as its
next attempt. A run record keeps `"backend"`, `"hosts"` (as reached), `"attempt"` and
`"inventory_source"`; follow-up commands (`logs`, `attach`, `stop`, `stacks`, `top`) read the hosts
from it. The exports render the Slurm Plan's batch script (`export sbatch`) or the k8s manifests.
The flows that drive the run flow live here too: `nccl_test.py` (`clusterctl nccl-test`) and
`health_check.py` (`clusterctl health check HOST`).

Above every stage, below the session and the commands: a stage never imports backends/. To add
a backend, its plan or relaunch: `base.py` (the interface), `run_flow.py` (the run flow)."""
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
