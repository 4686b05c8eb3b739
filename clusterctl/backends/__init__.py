"""Where a run happens, behind one interface (base.py): SSH(+Docker) nodes (nodes.py) or a Slurm
allocation (slurm.py). `backend_for` (a new run) and `backend_of_record` (a recorded one) are the only places that choose.

`plan()` returns a frozen, printable `Plan`; `launch`, `describe`, `logs`, `stop`, `relaunch` act on
it. `run_flow.py` is the one run flow, the same for every backend (lock the cluster, reach the nodes,
plan, run, record); `healing.py` the one loop of attempts around it (`job.restarts`: classify, leave
out, relaunch). `relaunch(plan)` stops what runs of the plan's run id and launches the plan as its
next attempt. `backend_of_run(RUN)` gives a recorded run's backend and its handle
(`backend://cluster/run-id`, parsed once by ground/records.py `parse_run_id`). `plan()` decides every
node's start once (plan/launch_plan.py: the prompt expanded and the command lines checked there) and
`launch(plan)` carries it out as it is. A run record keeps `"backend"`, `"hosts"` (as reached), `"attempt"` and
`"inventory_source"`; follow-up commands (`logs`, `attach`, `stop`, `stacks`, `top`) read the hosts
from it. The exports render the Slurm Plan's batch script (`export sbatch`) or the k8s manifests.
The flows that drive the run flow live here too: `nccl_test.py` (`clusterctl nccl-test`) and
`health_check.py` (`clusterctl health check HOST`).

Above every stage, below the session and the commands: a stage never imports backends/. To add
a backend, its plan or relaunch: `base.py` (the interface), `run_flow.py` (the run flow)."""
from __future__ import annotations

from typing import Optional

from clusterctl.backends.base import Backend, Plan, PlannedNode, RunDescription, RunRequest
from clusterctl.backends.nodes import NodesBackend
from clusterctl.backends.slurm import SlurmBackend
from clusterctl.ground.run_record import RunHandle
from clusterctl.models import Inventory


def backend_for(session, inventory: Inventory) -> NodesBackend:
    """A `scheduler:` section means a Slurm allocation; else the inventory's nodes over SSH."""
    return SlurmBackend(session) if inventory.scheduler is not None else NodesBackend(session)


def backend_of_record(session, record) -> NodesBackend:
    """The backend a recorded run ran on (records.handle_of: a record of an older clusterctl is Slurm's
    where it has a `slurm` entry, else the nodes')."""
    from clusterctl.ground import records

    return SlurmBackend(session) if records.handle_of(record, "").backend == "slurm" else NodesBackend(session)


def backend_of_run(session, given_run: Optional[str]) -> tuple[NodesBackend, RunHandle]:
    """The backend a recorded run ran on, and its handle (`given_run`: a run id or a handle, parsed
    once; default the last run): what `describe`, `logs` and `stop` of the run are asked of."""
    from clusterctl.ground import records

    run_id, record = records.resolve(session.state, given_run)
    return backend_of_record(session, record), records.handle_of(record, run_id)


__all__ = ["Backend", "Plan", "PlannedNode", "RunDescription", "RunRequest", "NodesBackend", "SlurmBackend",
           "backend_for", "backend_of_record", "backend_of_run"]
