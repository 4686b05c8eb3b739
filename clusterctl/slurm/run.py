"""`clusterctl run` on a Slurm allocation: the checks, salloc, the nodes as hosts, scancel after.

`on_allocation` is the whole hook: inside it the run is the one over SSH (the same probe,
planner, JobRunner, live log, fail-fast, stop and run record), with the allocation's nodes as
the inventory's hosts and each node reached through `srun --overlap` (slurm/transport.py).

Why salloc + one srun step per command, and not one `sbatch` script: the controller stays the
one that plans and watches. The planner needs the nodes' facts (GPUs, the interface that routes
to the master) before the layout exists, the live log needs each rank's own files followed as
they grow, and fail-fast needs to tell the rank that crashed from the peers that lost it; a
batch script would have to carry all of that to the nodes and report back through files.
`clusterctl export sbatch` is the other way, for those who submit themselves.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator

from clusterctl.executor import Connections
from clusterctl.models import CheckStatus, Host, Inventory
from clusterctl.slurm import allocation
from clusterctl.slurm.transport import SrunTransport


@contextmanager
def on_allocation(inventory: Inventory, app, run_id: str) -> Iterator[tuple[Inventory, Connections, dict]]:
    """Check, allocate, yield (inventory with the allocation's nodes, connections to them, the
    record's `slurm` entry), and cancel the allocation however the block ends (Ctrl-C included)."""
    checks = allocation.presubmit_checks(inventory)
    for check in checks:
        if check.status is CheckStatus.WARN:
            app.renderer.message(f"slurm: {check.detail}", "yellow")
    allocation.refuse_unless_ready(inventory, checks)
    granted = allocation.allocate(inventory, run_id, lambda line: app.renderer.message(line, "dim"))
    connections = Connections(lambda host: SrunTransport(host, granted.job_id).open())
    record = {"job_id": granted.job_id, "nodes": [name for name, _ in granted.nodes],
              "partition": inventory.scheduler.partition, "cancelled": None}
    try:
        app.renderer.message(f"slurm: job {granted.job_id} on {', '.join(record['nodes'])}", "dim")
        yield replace(inventory, hosts=granted.hosts(inventory)), connections, record
    finally:
        connections.close()
        record["cancelled"] = allocation.cancel(granted.job_id)
        app.renderer.message(f"slurm: job {granted.job_id} cancelled" if record["cancelled"] else
                             f"slurm: job {granted.job_id} still listed after scancel (see `squeue -j "
                             f"{granted.job_id}`)", "dim" if record["cancelled"] else "yellow")


def on_nodes_of_run(inventory: Inventory, nodes: list, app, run_id: str):
    """An allocation of exactly the nodes a run had (`collect-logs` of a Slurm run: the run's own
    allocation is gone), for the partition's default time; cancelled when the block ends."""
    spec = replace(inventory.scheduler, nodes=len(nodes), time=None, gpus_per_node=None)
    hosts = tuple(Host(name=name, address=name, ssh=inventory.ssh) for name in nodes)
    return on_allocation(replace(inventory, scheduler=spec, hosts=hosts), app, f"{run_id}-collect")
