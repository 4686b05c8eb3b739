"""`clusterctl export sbatch`: the job as a batch script for those who submit it themselves. Pure.

The layout is planned here, by the same planner as `clusterctl run`, on the allocation the
script asks for (scheduler.nodes nodes, scheduler.gpus_per_node GPUs each, or CPU ranks):
nnodes, nproc per node, world size, the torchrun command line and the job's argv with the
prompt byte for byte. What only the allocation knows is read when the script runs, in shell:
which nodes (SLURM_JOB_NODELIST; the first is the master, at its Slurm NodeAddr), each node's
rank (SLURM_NODEID), its interface and address on the route to the master (`ip route get`),
and the run id (`sbatch-<job id>`, so resubmitting the same script never mixes two runs' logs).

The checks inside, each failing the whole job at once with a line that says what and where
(`srun --kill-on-bad-exit=1` ends every task when one exits non-zero):
- the batch: as many nodes as planned (a user's `sbatch -N` that changes it breaks the layout);
- each node: the job's python imports torch, enough GPUs are visible for the planned ranks, a
  route to the master exists, the run directory can be made.
Logs land where `clusterctl run` puts them (`<outputs>/logs/<run id>/<node>/`, per-rank files
from torchrun's --log-dir), so `clusterctl logs`-style reading and `diagnose DIR` work on them.

Secrets: a `secret: true` variable (or one whose name looks secret) is never written into the
script (0755, readable by anyone who can read the directory) nor onto srun's command line (`ps` on
every node): the script checks that the environment it was submitted from holds it (sbatch
passes that environment, `--export=ALL`, and srun passes it on to each node's task).

Quoting: the script is where argv meets a shell, so every argument is `shlex.quote`d once, and
the values known only at run time are spliced in as "$VAR" between quoted pieces (`_word`).
"""
from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass, replace
from typing import Optional

from clusterctl.errors import UsageError
from clusterctl.plan.topology import NodeFacts, Topology, plan
from clusterctl.plan.launch_plan import node_start
from clusterctl.plan.torchrun import torchrun_env
from clusterctl.models import Host, Inventory, looks_secret
from clusterctl.slurm import submit

RUN_ID_PREFIX = "sbatch-"


@dataclass(frozen=True)
class BatchScript:
    text: str
    topology: Topology
    notes: tuple[str, ...]


def build(inventory: Inventory, prompt: str, name: Optional[str] = None, strict: bool = False,
          token: Optional[str] = None) -> BatchScript:
    """The batch script for `inventory` (which has a `scheduler:`) and `prompt`. `token`: the
    marker of run-time values (random unless given, for tests); it cannot occur in the inventory
    or the prompt by chance."""
    spec = inventory.scheduler
    if spec is None:
        raise UsageError("the inventory has no scheduler: section", "scheduler",
                         "add scheduler: {type: slurm, partition: NAME, nodes: N, time: \"HH:MM:SS\"}")
    if inventory.uses_container:
        raise UsageError("export sbatch runs the ranks on the nodes themselves; this inventory runs them in a "
                         "Docker container", "container", "remove the container: section for the batch script "
                         "(clusterctl run uses the container on Slurm nodes), or run with `clusterctl run`")
    mark = f"@@{token or secrets.token_hex(8)}@@"
    refs = {name: f"{mark}{name}{mark}" for name in ("RUN_ID", "NODE", "NODE_RANK", "MASTER_ADDR", "LOCAL_ADDR")}
    topo = _plan(inventory, strict)
    node = replace(topo.nodes[0], host=Host(name=refs["NODE"], address=refs["MASTER_ADDR"]),
                   node_rank=-1, local_addr=refs["LOCAL_ADDR"])
    topo_at_runtime = replace(topo, master_addr=refs["MASTER_ADDR"])
    launch = node_start(inventory, topo_at_runtime, node, refs["RUN_ID"], prompt)
    argv = [f"--node-rank={refs['NODE_RANK']}" if a.startswith("--node-rank=") else a for a in launch.torchrun]
    run_dir = launch.run_dir
    env = torchrun_env(node, inventory, run_dir)  # torchrun's alone: the script never set clusterctl's marker
    notes = tuple(n for n in topo.notes[1:] if "no network interface known" not in n)  # found when it runs
    secret = sorted({name for name, _ in env if _is_secret(inventory, name)})
    if secret:
        notes += (f"secret {', '.join(secret)}: not written in the script; export {'them' if len(secret) > 1 else 'it'} "
                  "in the shell you run sbatch from",)
    text = _script(inventory, topo, name or inventory.name, argv, env, run_dir, mark, notes)
    return BatchScript(text, topo, notes)


def _is_secret(inventory: Inventory, name: str) -> bool:
    return looks_secret(name) or any(var.name == name and var.is_secret for var in inventory.job.env)


def _plan(inventory: Inventory, strict: bool) -> Topology:
    """The planner on the allocation the script asks for: placeholder nodes with the GPUs Slurm gives."""
    count = submit.node_count(inventory)
    gpus = inventory.scheduler.gpus_per_node
    hosts = tuple(Host(name=f"node{i}", address=f"node{i}") for i in range(count))
    facts = {h.name: NodeFacts(gpu_ids=tuple(range(gpus)) if gpus else None) for h in hosts}
    return plan(replace(inventory, hosts=hosts), facts, strict=strict)


def _word(text: str, mark: str) -> str:
    """One shell word: `text` quoted, with each run-time value as "$VAR"."""
    pieces = text.split(mark)
    out = []
    for index, piece in enumerate(pieces):
        if index % 2:
            out.append(f'"${piece}"')
        elif piece:
            out.append(shlex.quote(piece))
    return "".join(out) or "''"


# The node side, run by srun as one task per node. $1: the GPUs each node must show (0: CPU ranks),
# $2: the job's python. It finds the node's route to the master, runs the checks, then the command
# that follows (torchrun), with its environment.
_NODE_PRELUDE = r'''set -u
NODE=${SLURMD_NODENAME:-$(hostname -s)} NODE_RANK=$SLURM_NODEID
fail() { echo "clusterctl check failed on $NODE (node rank $NODE_RANK): $*" >&2; exit 1; }
route=$(ip -o route get "$MASTER_ADDR" 2>/dev/null) || fail "no route to the master $MASTER_ADDR"
NIC=$(printf '%s\n' "$route" | sed -n 's/.* dev \([^ ]*\).*/\1/p')
LOCAL_ADDR=$(printf '%s\n' "$route" | sed -n 's/.* src \([^ ]*\).*/\1/p')
case $route in local*|*" dev lo "*)  # the master itself: the interface that holds its address
  NIC=$(ip -o -4 addr show | awk -v a="$MASTER_ADDR" '{split($4, p, "/")} p[1] == a {print $2; exit}')
  LOCAL_ADDR=$MASTER_ADDR;;
esac
[ -n "$NIC" ] && [ -n "$LOCAL_ADDR" ] || fail "cannot tell the interface that reaches the master $MASTER_ADDR"
"$2" -c 'import torch' 2>/dev/null || fail "$2 cannot import torch"
if [ "$1" -gt 0 ]; then
  seen=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || seen=0
  [ "$seen" -ge "$1" ] || fail "$seen GPU(s) visible, $1 planned (nvidia-smi -L)"
fi
shift 2
'''


def _script(inventory: Inventory, topo: Topology, name: str, argv: list[str], env: tuple, run_dir: str,
            mark: str, notes: tuple[str, ...]) -> str:
    spec = inventory.scheduler
    options = submit.resource_options(spec, topo.nnodes, tuple(h.name for h in inventory.hosts))
    gpus_needed = topo.nproc_per_node if topo.nodes[0].gpu_ids is not None else 0
    user_nic = {e.name for e in inventory.job.env} & {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}
    node_lines = [_NODE_PRELUDE.rstrip("\n")]
    node_lines.append(f"mkdir -p {_word(run_dir, mark)} || fail 'cannot make the run directory'")
    secret = [name for name, _ in env if _is_secret(inventory, name)]
    for env_name, value in env:
        if env_name not in secret:  # a secret arrives in the environment srun passes on
            node_lines.append(f"export {env_name}={_word(value, mark)}")
    for env_name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if env_name not in user_nic:
            node_lines.append(f'export {env_name}="$NIC"')
    if inventory.job.workdir:
        node_lines.append(f"cd {shlex.quote(inventory.job.workdir)} || fail 'no directory {inventory.job.workdir}'")
    node_lines.append("exec " + " ".join(_word(a, mark) for a in argv))
    node_script = "\n".join(node_lines) + "\n"
    header = [
        "#!/bin/bash",
        f"#SBATCH --job-name={submit.JOB_NAME_PREFIX}{name}",
        *(f"#SBATCH {option}" for option in options),
        f"#SBATCH --output={inventory.job.outputs.rstrip('/')}/logs/slurm-%j.out",
        "#SBATCH --export=ALL",  # the secrets come from the submitting shell's environment
        f"# Written by `clusterctl export sbatch` from {inventory.source or 'the inventory'}.",
        f"# The plan: {topo.nnodes} node(s) x {topo.nproc_per_node} rank(s) = world size {topo.world_size}; "
        f"the first allocated node is the master (node rank 0, ranks 0..{topo.nproc_per_node - 1}).",
        *(f"# plan: {note}" for note in notes),
        "set -euo pipefail",
    ]
    body = [
        *(f': "${{{name}?clusterctl check failed: {name} is secret and not in this script: export it in the shell '
          'you run sbatch from}"' for name in secret),
        f'if [ "${{SLURM_JOB_NUM_NODES:-0}}" != {topo.nnodes} ]; then',
        f'  echo "clusterctl check failed: the job has ${{SLURM_JOB_NUM_NODES:-no}} node(s), the plan {topo.nnodes}'
        ' (sbatch -N must not change it: export the script again for another count)" >&2; exit 1',
        "fi",
        'MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'MASTER_ADDR=$(scontrol show node "$MASTER" | sed -n \'s/.*NodeAddr=\\([^ ]*\\).*/\\1/p\')',
        'export MASTER_ADDR=${MASTER_ADDR:-$MASTER}',
        f'export RUN_ID={RUN_ID_PREFIX}"$SLURM_JOB_ID"',
        f"mkdir -p {shlex.quote(inventory.job.outputs.rstrip('/') + '/logs')}",
        f"NODE_SCRIPT={shlex.quote(node_script)}",
        'echo "clusterctl: run $RUN_ID, master $MASTER ($MASTER_ADDR), nodes $SLURM_JOB_NODELIST"',
        f"srun --export=ALL --ntasks-per-node=1 --nodes={topo.nnodes} --kill-on-bad-exit=1 --label "
        f"sh -c \"$NODE_SCRIPT\" clusterctl-node {gpus_needed} {shlex.quote(inventory.job.python)}",
    ]
    return "\n".join(header + body) + "\n"
