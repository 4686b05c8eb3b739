"""An attached run's launch (run/runner.py's first step): on every node, one command after another over
its connection, the run dir owned with the job's env and the shipped files in one start of the node's
file program (plan/shipping.stage_commands), an attached run's replica key where it copies checkpoints,
then the wrapper started detached (plan/wrapper.start_command). What a node starts per launch, measured
(docs/benchmarks.md §4a'): one SSH session and one `python3 -I -S` per command, the wrapper's a
`docker exec -d` in a container."""
from __future__ import annotations

from typing import Mapping, Optional

from clusterctl.executor import Event, for_each_host, run_commands
from clusterctl.models import Command, Host, HostResult, Inventory
from clusterctl.node.layout import files_dir
from clusterctl.plan import wrapper as agent
from clusterctl.plan.shipping import stage_commands
from clusterctl.run import supervision


def node_commands(inventory: Inventory, run_id: str, run_dir: str, env: tuple[tuple[str, str], ...],
                  torchrun: tuple[str, ...], files: Mapping[str, bytes], replica: Optional[bytes]) -> list[Command]:
    """What starts one node's part of an attached run, in order."""
    return [*stage_commands(inventory, run_dir, env, files_dir(inventory.job.outputs, run_id), files),
            *([supervision.put_private(inventory, run_dir, "replica.json", replica)] if replica is not None else []),
            agent.start_command(inventory, run_dir, torchrun)]


def launch(runner) -> dict[str, HostResult]:
    """Every node of `runner` (run/runner.JobRunner) launched at once: {host: its result}."""
    def action(transport, host: Host) -> HostResult:
        node = runner.nodes[host.name]
        return run_commands(transport, host, node_commands(runner.inventory, runner.run_id, node.run_dir, node.env,
                                                           node.torchrun, runner.files, runner.replicas.get(host.name)))

    runner.on_event(Event("note", text=f"launching {runner.topology.world_size} ranks on {len(runner.nodes)} nodes"))
    return for_each_host([n.host for n in runner.nodes.values()], action, runner.connections)
