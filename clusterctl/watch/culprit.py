"""The first failure of a run the controller watches, read off its nodes (issue 39): each failed node's
log tail (torchrun's report), then, where they can settle it, the flight-recorder dumps (a collective
timeout: the rank that did not join) and the kernel log (a rank killed by SIGKILL: was it the OOM
killer?). watch/failures.py judges; this gathers what it judges from, one round trip per node each."""
from __future__ import annotations

from clusterctl.executor import for_each_host, run_commands
from clusterctl.plan import wrapper as agent
from clusterctl.watch import dumps, kernel_log
from clusterctl.watch.failures import Ended, first_failure, first_ranks_of
from clusterctl.models import HostStatus

TAIL_LINES = 200


def first_failure_of(runner, failed: list) -> dict:
    """`runner`: the JobRunner (its inventory, nodes, topology, connections, mask, when it started);
    `failed`: its NodeRuns that failed or were lost."""
    tails = _tails(runner, [n for n in failed if not n.lost])
    ended = [Ended(n.host.name, n.ended_at or 0, n.lost, n.exit_code, tails.get(n.host.name, "")) for n in failed]
    first = first_failure(runner.inventory, ended, runner.poll_s, runner.lost_after_s,
                          {name: n.exit_code for name, n in runner.nodes.items()}, first_ranks_of(runner.topology.nodes))
    answering = {name: (n.host, n.run_dir) for name, n in runner.nodes.items() if not n.lost}
    first = dumps.with_dumps(first, runner.inventory, answering, runner.connections)
    if first.get("signal") == "SIGKILL" and first.get("host") in answering:
        lines = kernel_log.read_oom_lines(answering[first["host"]][0], runner.started_at, runner.connections)
        first = kernel_log.with_kernel_log(first, lines)
    return first


def _tails(runner, nodes: list) -> dict[str, str]:
    def action(transport, host):
        return run_commands(transport, host, [agent.tail_command(runner.inventory, runner.nodes[host.name].run_dir,
                                                                 TAIL_LINES)])

    results = for_each_host([n.host for n in nodes], action, runner.connections)
    return {name: runner._mask(result.stdout) for name, result in results.items()}


def launch_failure(failures: dict) -> dict:
    """The first failure of a run some node could not even start."""
    name, result = next(iter(failures.items()))
    cause = "node_unreachable" if result.status is HostStatus.UNREACHABLE else "unknown"
    return {"host": name, "rank": None, "diagnosis": [{
        "cause": cause, "host": name, "rank": None, "evidence": result.detail,
        "fix": "the node could not start torchrun (see the evidence): check that job.outputs is writable there, "
               "run `clusterctl up` if the container is gone, and `clusterctl check`"}]}
