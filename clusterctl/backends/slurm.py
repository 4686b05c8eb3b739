"""A Slurm allocation: the run's nodes are granted by salloc and each is reached through an srun step
(slurm/run.py); without an allocation the plan is the batch script `export sbatch` writes."""
from __future__ import annotations

from typing import Mapping, Optional

from clusterctl.backends.base import Plan, RunRequest
from clusterctl.backends.nodes import NodesBackend
from clusterctl.errors import UsageError
from clusterctl.models import Inventory
from clusterctl.outcome import Outcome


class SlurmBackend(NodesBackend):
    """The run flow of the nodes, on an allocation: the probe, planner, runner and record are the same."""

    name = "slurm"
    plans_on_nodes = False  # `run --plan` asks for no allocation
    leases_on_nodes = False  # the scheduler allots the GPUs

    def plan(self, inventory: Inventory, request: RunRequest, run_id: Optional[str],
             facts: Optional[Mapping] = None, name: Optional[str] = None, **decided) -> Plan:
        """With the allocated nodes' `facts`: their layout; without: the layout on the nodes the
        allocation would have (scheduler.nodes x scheduler.gpus_per_node) and its batch script
        (`name`: the job's, default the inventory's)."""
        from clusterctl.plan.launcher import require_torchrun

        require_torchrun(inventory, "a Slurm batch script")
        if facts is not None:
            return super().plan(inventory, request, run_id, facts, **decided)
        from clusterctl.slurm import sbatch

        script = sbatch.build(inventory, request.prompt, name=name, strict=request.strict)
        topology = script.topology
        return Plan(self.name, inventory.name, run_id, topology.world_size, topology.nproc_per_node, topology.nnodes,
                    notes=tuple(script.notes), script=script.text)

    def refuse(self, request: RunRequest) -> None:
        if request.detach:
            raise UsageError("--detach hands the run over to the cluster, but a run on a Slurm allocation is watched "
                             "through the allocation this clusterctl holds (and gives back when it ends)",
                             where="--detach", fix="leave --detach out (run it under nohup or tmux to outlive the "
                             "terminal), or submit with `clusterctl export sbatch` and sbatch")

    def reach_soon(self, inventory: Inventory) -> None:
        """Nothing: the nodes are reached through the allocation (`reach`), not before it."""

    def reach(self, inventory: Inventory, run_id: str):
        from clusterctl.slurm.run import on_allocation

        return on_allocation(inventory, self.session, run_id, excluded_nodes(self.session, inventory))

    def facts(self, inventory: Inventory, connections):
        """On Slurm each node is an srun step of the allocation: probed one after the other."""
        from clusterctl.preflight.node_facts import gather_node_facts

        facts, problems = gather_node_facts(inventory, connections)
        return facts, problems, None, {name: "probed" for name in facts}

    def busy(self, inventory: Inventory, connections, seen: Optional[str]) -> Optional[str]:
        from clusterctl.run.in_progress import ensure_no_run_in_progress

        return ensure_no_run_in_progress(inventory, connections)

    def hang_up(self):
        from clusterctl.backends.hangup import not_hung_up

        return not_hung_up()

    def relaunch(self, plan: Plan, request: RunRequest, inventory: Optional[Inventory] = None):
        """Stop what runs, then plan again on a new allocation (its nodes may differ) as the next attempt."""
        from dataclasses import replace

        from clusterctl.heal.hooks import StopRequested, stop_requested, withdraw_stop

        if stop_requested(self.session, plan.run_id):  # a user's `clusterctl stop` came first: it stands
            raise StopRequested(plan.run_id)
        self.stop(plan.run_id)
        withdraw_stop(self.session.state, plan.run_id)
        return self.launch(replace(plan.next_attempt(), topology=None), request, inventory)

    def lists_hosts(self, inventory: Inventory) -> bool:
        return bool(inventory.hosts)

    def place_checks(self, inventory: Inventory) -> list:
        """The partition, before any node (sinfo/squeue: slurm/partition.py)."""
        from clusterctl.slurm.allocation import presubmit_checks

        return presubmit_checks(inventory)

    def queue_status(self, inventory: Inventory, runs: list) -> Outcome:
        """An inventory whose nodes are a Slurm allocation's: the partition (sinfo) and clusterctl's jobs
        in the queue (squeue), then the runs of this directory."""
        from clusterctl.slurm.allocation import presubmit_checks, queued_jobs

        renderer = self.session.renderer
        checks = presubmit_checks(inventory)
        renderer.checks_table(checks)
        jobs = queued_jobs()
        for job in jobs:
            renderer.message(f"slurm job {job.job_id} {job.name}: {job.state} on {job.nodelist or '-'} "
                             f"({job.elapsed} of {job.time_limit}; {job.reason})")
        if not jobs:
            renderer.message("slurm: no clusterctl job in the queue", "dim")
        renderer.runs_table(runs)
        return Outcome({"ok": True, "cluster": inventory.name, "checks": [c.to_json() for c in checks],
                        "slurm_jobs": [vars(j) for j in jobs], "runs": [r.to_json() for r in runs]})


def excluded_nodes(session, inventory: Inventory) -> tuple[str, ...]:
    """The allocation's `--exclude=`: the nodes the health record quarantined (issue 36; every node
    it knows of this cluster, so that an inventory listing no hosts is covered too), said in one
    line; none with --include-quarantined. The one list of nodes Slurm must not grant."""
    from clusterctl.health.fleet import quarantined_nodes

    if getattr(session.args, "include_quarantined", False):
        return ()
    found = quarantined_nodes(session.state.health_db, inventory)
    if found:
        session.renderer.message("health: asking Slurm to leave out quarantined " + ", ".join(
            f"{host} ({reason})" for host, reason in found.items()) + "; --include-quarantined to allow them", "yellow")
    return tuple(found)
