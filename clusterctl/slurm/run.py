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
from clusterctl.slurm import allocation, submit
from clusterctl.slurm.transport import SrunTransport


@contextmanager
def on_allocation(inventory: Inventory, app, run_id: str,
                  exclude: tuple[str, ...] = ()) -> Iterator[tuple[Inventory, Connections, dict]]:
    """Check, allocate (never on the nodes of `exclude`), yield (inventory with the allocation's nodes,
    connections to them, the record's `slurm` entry), and cancel the allocation however the block ends
    (Ctrl-C included)."""
    checks = allocation.presubmit_checks(inventory)
    for check in checks:
        if check.status is CheckStatus.WARN:
            app.renderer.message(f"slurm: {check.detail}", "yellow")
    allocation.refuse_unless_ready(inventory, checks)
    granted = allocation.allocate(inventory, run_id, lambda line: app.renderer.message(line, "dim"), exclude)
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


def nodes_of_recorded_run(inventory: Inventory, record: dict, app, run_id: str) -> Inventory:
    """For a command on a run that was made on a Slurm allocation (`logs`, `stop`, `collect-logs`)
    with an inventory that lists no hosts: the run's nodes as its hosts, reached for the rest of
    the command through the run's own allocation while it lasts, else through a new allocation of
    exactly those nodes. Any other inventory is returned as it is."""
    slurm = record.get("slurm") or {}
    if inventory.hosts or inventory.scheduler is None or not slurm.get("nodes"):
        return inventory
    state = submit.parse_job_state(allocation.slurm(submit.squeue_job_argv(str(slurm.get("job_id")))).stdout)
    hosts = tuple(Host(name=n, address=n, ssh=inventory.ssh) for n in slurm["nodes"])
    if state is not None and state[0] == "running":
        job_id = str(slurm["job_id"])
        app.route(hosts, lambda host: SrunTransport(host, job_id).open())
        return replace(inventory, hosts=hosts)
    inventory, _, allocated = app.enter(on_nodes_of_run(inventory, slurm["nodes"], app, run_id))
    new_job = str(allocated["job_id"])
    app.route(inventory.hosts, lambda host: SrunTransport(host, new_job).open())
    return inventory
