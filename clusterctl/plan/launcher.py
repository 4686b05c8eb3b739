"""`job.launcher`: what starts the job on each node. `torchrun` (the default) starts nproc ranks per
node (plan/torchrun.py); `none` runs job.command once per node, itself, with the variables a
distributed program reads (JAX, vLLM/SGLang multi-node serving, a launcher of its own):
WORLD_SIZE (nodes), RANK = NODE_RANK (the node's index, the master 0), LOCAL_RANK 0,
LOCAL_WORLD_SIZE 1, MASTER_ADDR, MASTER_PORT (the rendezvous); `deepspeed` runs DeepSpeed's own
per-node launcher (plan/launcher_deepspeed.py). Pure.

Same planning (the node keeps every GPU the planner gave it), live log, fail-fast, collect and
diagnosis: the process writes where torchrun writes a local rank's output
(`<run dir>/<run id>_none/attempt_0/0/{stdout,stderr}.log`), so everything that reads ranks' files
reads it; and as torchrun's `--tee` copies a rank's output into the node's own log, the end of a
failed process's stderr goes there with the rank's prefix, where the first failure is named from.
"""
from __future__ import annotations

from dataclasses import replace

from clusterctl.errors import UsageError
from clusterctl.plan import launcher_deepspeed as launch_deepspeed, launcher_mpirun as launch_mpirun
from clusterctl.plan.topology import NodePlan, Topology
from clusterctl.plan.torchrun import STDERR_TAIL_LINES, torchrun_argv
from clusterctl.node.layout import node_run_dir, ranks_dir
from clusterctl.models import Inventory

LAUNCHERS = ("torchrun", "none", "mpirun", "deepspeed")

# $1 the rank directory, $2 the rank's prefix, then the job's argv. Not exec'd: the exit code is
# kept while the end of stderr is copied.
_ONCE = r'''
d=$1 p=$2; shift 2
mkdir -p "$d" || exit 1
"$@" >"$d/stdout.log" 2>"$d/stderr.log"
rc=$?
if [ "$rc" != 0 ]; then
  tail -n %d "$d/stderr.log" | while IFS= read -r line; do printf '%%s%%s\n' "$p" "$line"; done >&2
  echo "${p}clusterctl: the job exited with code $rc" >&2
fi
exit "$rc"
''' % STDERR_TAIL_LINES


def shaped(inv: Inventory, topo: Topology) -> Topology:
    """The planner's layout as the launcher runs it: `none` starts one process per node."""
    if inv.job.launcher == "mpirun":
        return launch_mpirun.shaped(topo)
    if inv.job.launcher != "none":
        return topo
    nodes = tuple(replace(n, nproc=1, first_rank=n.node_rank) for n in topo.nodes)
    note = (f"job.launcher none: job.command runs once per node ({len(nodes)} processes, WORLD_SIZE={len(nodes)}, "
            "RANK = NODE_RANK), with every GPU the node was given")
    return replace(topo, nodes=nodes, world_size=len(nodes), nproc_per_node=1, notes=topo.notes + (note,))


def node_command(inv: Inventory, topo: Topology, node: NodePlan, run_id: str, job_argv: tuple[str, ...],
                 outputs: str) -> tuple[str, ...]:
    """What starts on `node`: torchrun, the job itself once (`none`), mpirun / its gate
    (plan/launcher_mpirun.py), or DeepSpeed's per-node launcher (plan/launcher_deepspeed.py)."""
    if inv.job.launcher == "mpirun":
        return launch_mpirun.node_command(inv, topo, node, run_id, _entry(tuple(job_argv), inv.job.python))
    if inv.job.launcher == "deepspeed":
        return launch_deepspeed.node_command(inv, topo, node, run_id, job_argv, outputs)
    if inv.job.launcher != "none":
        return torchrun_argv(topo, node, run_id, job_argv, python=inv.job.python, outputs=outputs)
    rank_dir = ranks_dir(node_run_dir(outputs, run_id, node.host.name), run_id, "none") + "/0"
    prefix = f"[{node.host.name} rank{node.first_rank}]: "
    return ("sh", "-c", _ONCE, "clusterctl-launch", rank_dir, prefix) + _entry(tuple(job_argv), inv.job.python)


def node_env(inv: Inventory, topo: Topology, node: NodePlan, run_id: str = "") -> tuple[tuple[str, str], ...]:
    """The variables `none` sets (torchrun sets its ranks' own; mpirun's: plan/launcher_mpirun.py)."""
    if inv.job.launcher == "mpirun":
        return launch_mpirun.node_env(topo, node, run_id)
    if inv.job.launcher != "none":
        return ()
    return (("WORLD_SIZE", str(topo.nnodes)), ("RANK", str(node.node_rank)), ("NODE_RANK", str(node.node_rank)),
            ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1"), ("MASTER_ADDR", topo.master_addr),
            ("MASTER_PORT", str(topo.port)))


def shipped(inv: Inventory) -> dict[str, bytes]:
    """The node programs a launcher needs in the run's .files (mpirun's gate)."""
    return launch_mpirun.shipped(inv)


def _entry(argv: tuple[str, ...], python: str) -> tuple[str, ...]:
    """A script or `-m module` runs under job.python, as torchrun runs it; anything else as written."""
    if argv and argv[0] in ("-m", "--module"):
        return (python, "-m") + argv[1:]
    if argv and argv[0].endswith(".py"):
        return (python,) + argv
    return argv


def require_torchrun(inv: Inventory, what: str) -> None:
    """Where only torchrun is written out (exports, Slurm's batch script)."""
    if inv.job.launcher != "torchrun":
        raise UsageError(f"{what} starts the job with torchrun; job.launcher is {inv.job.launcher}",
                         "job.launcher", f"set job.launcher: torchrun for {what}, or run it with `clusterctl run`")
