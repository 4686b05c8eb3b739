"""What starts on one node, written once (issue 46): its launcher's argv (job/launchers.py: torchrun,
mpirun or its gate, DeepSpeed's per-node launcher, or the job itself) and its environment. The
controller's runner (job/runner.py) builds each attempt's from the attempt's plan; a detached run that
heals itself hands each node the same, built with TOKENS where a relaunch changes it
(`@<nonce>.nnodes@`, `.node_rank@`, `.first_rank@`, `.master@`, `.master_host@`, `.world_size@`,
`.hostfile@`, `.world_info@`, `.attempt@`, `.checkpoint@`), which the keepers fill in with
heal_policy.launch_values and heal_policy.substitute (job/node_healing.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

from clusterctl.job import agent, launch_deepspeed, launch_mpirun, launchers
from clusterctl.job.heal_policy import attempt_env
from clusterctl.job.topology import NodePlan, Topology
from clusterctl.job.torchrun import job_argv, log_dir, placeholder_values, torchrun_env
from clusterctl.models import Inventory
from clusterctl.modules import process


@dataclass(frozen=True)
class NodeLaunch:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


def node_launch(inventory: Inventory, topology, node: NodePlan, run_id: str, values: dict,
                attempt: str, checkpoint: str) -> NodeLaunch:
    """`node`'s launcher argv and environment in `topology` (a plan, or its tokens), the job's
    placeholders from `values`."""
    outputs = inventory.job.outputs
    run_dir = log_dir(outputs, run_id, node.host.name)
    argv = launchers.node_command(inventory, topology, node, run_id, job_argv(inventory.job, values), outputs)
    env = (*process.marker_env(inventory.name, node.host.name, run_id), *torchrun_env(node, inventory, run_dir),
           *launchers.node_env(inventory, topology, node, run_id), *agent.job_env(inventory, node.host.env),
           *attempt_env(attempt, checkpoint))
    return NodeLaunch(tuple(argv), tuple(env))


def template(inventory: Inventory, fleet: Topology, node: NodePlan, run_id: str, prompt: str, token: str,
             as_master: bool) -> dict:
    """`node`'s launch with the tokens in place, as the master of an attempt (`as_master`) or not
    (mpirun starts differently there); `fleet`: the plan of every host of the run, spares included."""
    def t(name):
        return f"@{token}.{name}@"

    values = {**placeholder_values(fleet, run_id, prompt, inventory.job.outputs), "world_size": t("world_size"),
              "nnodes": t("nnodes"), "attempt": t("attempt"), "checkpoint": t("checkpoint")}
    shape = SimpleNamespace(nodes=fleet.nodes, nnodes=t("nnodes"), master_addr=t("master"), port=fleet.port,
                            join_timeout=fleet.join_timeout, world_size=t("world_size"),
                            nproc_per_node=fleet.nproc_per_node, master=SimpleNamespace(host=SimpleNamespace(
                                name=t("master_host"))))
    tokened = replace(node, node_rank=t("node_rank"), first_rank=t("first_rank"), is_master=as_master)
    launch = node_launch(inventory, shape, tokened, run_id, values, t("attempt"), t("checkpoint"))
    # what the launcher writes of every host: the fleet's, a token in its place
    hostfile, world_info = launch_mpirun.hostfile(fleet), launch_deepspeed.world_info(fleet)
    argv = [t("hostfile") if a == hostfile else a.replace(world_info, t("world_info")) for a in launch.argv]
    agent.env_file(launch.env)  # a value with a newline is refused here, not on the node
    return {"argv": argv, "env": [list(kv) for kv in launch.env]}
