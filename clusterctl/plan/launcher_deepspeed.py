"""`job.launcher: deepspeed`: each node runs DeepSpeed's own per-node launcher. Pure.

`deepspeed --hostfile` reaches the nodes through pdsh or ssh and runs, on each of them,
`python -m deepspeed.launcher.launch --world_info=<base64 {host: [local device ids]}> --node_rank=N
--master_addr=A --master_port=P script args` (deepspeed/launcher/runner.py, 0.19.8). clusterctl
reaches the nodes itself, so it runs that per-node launcher, from the plan torchrun gets: the hosts
in node-rank order with their planned GPUs (a CPU node: as many ids as ranks), the master's address
and the rendezvous port. launch.py (0.19.8) reads the world size, the node's ranks and the global
rank layout from world_info (a host's ranks follow the hosts before it: the planner's first_rank),
sets MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK/LOCAL_RANK and CUDA_VISIBLE_DEVICES (the ids) for each
rank, polls them every second, and when one exits non-zero terminates the others and exits with its
code: clusterctl's fail-fast then stops the other nodes.

Ranks' output. Without `--enable_each_rank_log` the ranks write into launch.py's own stdout, with no
rank named; with it, one file per rank holds stdout and stderr together. clusterctl's live log,
`logs`, collect-logs and the first-failure naming read torchrun's layout, so each rank starts under
a small `sh` (`_RANK`, via launch.py's `--no_python`): it writes the rank's stdout and stderr to
`<run dir>/<run id>_deepspeed/attempt_0/<LOCAL_RANK>/{stdout,stderr}.log` and notes a failure; when
launch.py failed, the node's command (`_NODE`) copies the end of the stderr of the rank that failed
first into the node's log with the `[host rankN]: ` prefix, as torchrun's `--tee` would. launch.py's own `--local_rank=N` argument (after the script, before its arguments) is
kept: `--no_local_rank` stops launch.py from adding it where the `sh` would receive it, and `_RANK`
puts it back where launch.py would have. A Python that cannot import deepspeed on a node fails that
node at once with a line naming the host and the fix (`_NODE`).
"""
from __future__ import annotations

from clusterctl.node import heal_policy
from clusterctl.plan.topology import NodePlan, Topology
from clusterctl.plan.torchrun import STDERR_TAIL_LINES
from clusterctl.node.layout import node_run_dir, ranks_dir
from clusterctl.models import Inventory

MODULE = "deepspeed.launcher.launch"

# $1 the host, $2 the Python, $3 the ranks' directory (attempt_0), $4 the rank script (`_RANK`, written
# beside it: launch.py's log names each rank's command in a line, not with the script's text), then
# launch.py's arguments. find_spec, not an import: importing deepspeed imports torch, a second or
# more for a check. Not exec'd: once launch.py failed, the end of the stderr of the node's rank that
# failed first goes into the node's log with the rank's prefix, as torchrun's "first observed failure"
# and its `--tee` copy do. First: the oldest last write to stderr among the failed ranks. A rank that
# fails because another went (a peer's connection closed) writes its error after that one ended,
# while the one that ended may take a while longer to exit (its process group's teardown), so which
# rank exited first is no answer. The others get a line saying where their stderr is. The node exits
# with the first failed rank's code (launch.py's own, unless `_RANK` stopped it: then 1).
_NODE = r'''
host=$1 py=$2 ranks=$3 rank=$4; shift 4
"$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("deepspeed") is None)' 2>/dev/null
if [ $? = 1 ]; then
  echo "clusterctl: job.launcher deepspeed: ModuleNotFoundError: No module named 'deepspeed' for $py on $host; fix: pip install deepspeed in the image (or point job.python at a Python that has it)" >&2
  exit 1
fi
mkdir -p "$ranks" && printf '%%s' "$rank" >"${ranks%%/*}/rank.sh" || exit 1
"$py" -m deepspeed.launcher.launch "$@"
rc=$?
[ "$rc" = 0 ] && exit 0
cd "$ranks" || exit "$rc"
named=
for f in $(ls -tr -- */stderr.log 2>/dev/null); do
  [ -e "${f%%/*}/failed" ] || continue
  read -r r code <"${f%%/*}/failed"
  if [ -z "$named" ]; then
    named=1
    tail -n %d "$f" | while IFS= read -r line; do printf '[%%s rank%%s]: %%s\n' "$host" "$r" "$line"; done
    echo "[$host rank$r]: clusterctl: the rank exited with code $code"; rc=$code
  else
    echo "clusterctl: rank $r exited with code $code too (its stderr: $PWD/$f)"
  fi
done >&2
exit "$rc"
''' % STDERR_TAIL_LINES

# $1 the node's ranks' directory (the local rank is appended), $2 after how many words of the job's
# argv launch.py puts `--local_rank=N`, then the job's argv. Not exec'd: a failure is written down
# (global rank, exit code) for `_NODE`, unless launch.py stopped the rank (SIGTERM, after another failed).
# Then launch.py gets the SIGTERM on which it stops the node's ranks and exits, as it would at its next
# poll, up to a second later: the culprit's node must end before clusterctl, told by the peers' nodes
# (their ranks lose it at once), stops it as a mere survivor. Only once launch.py handles SIGTERM
# (SigCgt, bit 15): before, it is still starting ranks, and SIGTERM would leave them orphans. The script
# outlives its rank on SIGTERM (launch.py's, clusterctl's stop; `trap :`, not ignored: the rank's own is
# the default): a rank orphaned by its script's end is a zombie that a container's PID 1 may never reap,
# and launch.py, waiting for it, would give up only after 30 s.
_RANK = r'''
d=$1/$LOCAL_RANK at=$2; shift 2
n=$# i=0
for a do
  set -- "$@" "$a"; i=$((i+1))
  if [ "$i" = "$at" ]; then set -- "$@" "--local_rank=$LOCAL_RANK"; fi
done
shift "$n"
mkdir -p "$d" || exit 1
trap : TERM
"$@" >"$d/stdout.log" 2>"$d/stderr.log"
rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 143 ]; then
  echo "$RANK $rc" >"$d/failed"
  m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$PPID/status" 2>/dev/null)
  if [ -n "$m" ] && [ $(( 0x$m >> 14 & 1 )) = 1 ]; then kill -TERM "$PPID" 2>/dev/null; fi
fi
exit "$rc"
'''


def world_info(topo: Topology) -> str:
    """launch.py's --world_info (heal_policy.world_info, which a relaunch on the nodes fills in too).
    A node's ids are its planned GPUs, or 0..nproc-1 on CPU."""
    return heal_policy.world_info([(n.host.name, n.gpu_ids, n.nproc) for n in sorted(topo.nodes, key=lambda n: n.node_rank)])


def rank_dir(outputs: str, run_id: str, host_name: str) -> str:
    """Where a node's ranks write, the local rank appended: torchrun's layout, which everything
    that reads ranks' files reads."""
    return ranks_dir(node_run_dir(outputs, run_id, host_name), run_id, "deepspeed")


def launch_args(topo: Topology, node: NodePlan) -> tuple[str, ...]:
    """launch.py's options for `node`; the job follows them."""
    return (f"--world_info={world_info(topo)}", f"--node_rank={node.node_rank}", f"--master_addr={topo.master_addr}",
            f"--master_port={topo.port}", "--no_python", "--no_local_rank")


def rank_entry(argv: tuple[str, ...], python: str) -> tuple[tuple[str, ...], int]:
    """The job's argv as launch.py starts it (`python -u script`, `python -u -m module`, or an
    executable as written), and how many of its words come before launch.py's --local_rank."""
    if argv and argv[0] in ("-m", "--module"):
        return (python, "-u", "-m") + argv[1:], 4
    if argv and argv[0].endswith(".py"):
        return (python, "-u") + argv, 3
    return argv, 1


def node_command(inv: Inventory, topo: Topology, node: NodePlan, run_id: str, job_argv: tuple[str, ...],
                 outputs: str) -> tuple[str, ...]:
    """What starts on `node`: DeepSpeed's per-node launcher, each rank under `_RANK`."""
    entry, at = rank_entry(tuple(job_argv), inv.job.python)
    ranks = rank_dir(outputs, run_id, node.host.name)
    script = f"{ranks.rsplit('/', 1)[0]}/rank.sh"  # where _NODE writes _RANK
    return ("sh", "-c", _NODE, "clusterctl-deepspeed", node.host.name, inv.job.python, ranks, _RANK,
            *launch_args(topo, node), "sh", script, ranks, str(at), *entry)
