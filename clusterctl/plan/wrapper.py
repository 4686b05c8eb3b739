"""Commands that start, watch and follow torchrun on one node. Pure: argv tuples only.

How a node runs its part of a job (all files in the node's run dir,
`<outputs>/logs/<run_id>/<host>/`):
- `env` (0600): the job's environment, one `NAME=value` a line, exported by the wrapper;
  values never appear in a command line or `ps`.
- The wrapper (`sh -c WRAPPER`) starts torchrun in its own session, detached from the SSH
  session (`docker exec -d`, or `setsid -f` on the host), so a closed SSH session never
  kills the job (the `sighup_session_closed` class). It writes `agent.pid`, sends
  torchrun's output to `agent.log`, and `agent.exit` when torchrun ends.
- Only torchrun and its ranks get the job's environment (with the marker, see
  modules/process.py), not the wrapper: stopping a run kills what carries the marker, and
  the wrapper then still writes `agent.exit` and ends, leaving nothing marked behind (its
  own `sleep 1` once outlived a stop and made the next run see "a run in progress").
- agent.exit is written as soon as torchrun ends (the lease is watched by a subshell beside it,
  not by a loop that would add up to its period to every run's end).
- What the node pays while the job runs (issue 40: at most 1% of a core): the lease watcher forks
  one `sleep 1` a second and nothing else (the shell's own `-nt` tells a renewed lease: the lease
  newer than `lease.seen`, which it rewrites with a builtin `echo`; before, `date` and `stat`
  each second); the output stream is one Python process that reads the files four times a second
  (node/follow_files.py: no fork; it was `tail -F`, which followed the job's links); the controller
  renews the lease with each poll, every 4 s (16 ms of CPU each: the no-follow layer, issue 47).
- An attached run's checkpoint replicas (node/node_replica.py, issue 50: where the controller wrote
  `replica.json`) start before the ranks: the restore a relaunch ordered first (`replica.ready` says
  "ok" or why not, and then no rank starts: exit 1), then the copies for the attempt's life.
- The metrics sampler (node/node_metrics.py, issue 41) runs beside torchrun for the whole run: the
  wrapper starts it (when shipped, `job.metrics_every` > 0) and ends it as torchrun ends.
- The lease: the controller renews `lease` with each poll (watch/pace.py). If it goes silent for
  `lease_s` seconds (controller killed, node cut off), the wrapper stops the node's
  ranks by itself: no node waits forever for peers that are gone. A run handed over to
  the cluster (run/supervision.py) has its node's keeper touch the lease instead, and a
  `stop` file written by the keeper (the supervisor's word) stops the ranks at once.
"""
from __future__ import annotations

from typing import Optional

from clusterctl.models import Command, EnvVar, Inventory
from clusterctl.plan import node_files
from clusterctl.plan.container import in_container
from clusterctl.node.layout import FILES

LEASE_S = 15

_WRAPPER = r'''
dir=$1 lease=$2 workdir=$3 py=$4 every=$5 ifaces=$6; shift 6
mkdir -p "$dir" || exit 1
exec </dev/null >>"$dir/agent.log" 2>&1
if [ -n "$workdir" ] && ! cd "$workdir"; then echo 127 > "$dir/agent.exit"; exit 1; fi
touch "$dir/lease"
r=; copier=$(dirname "$dir")/FILES_DIR/node_replica.py  # issue 50: an attached run's checkpoint replicas
if [ -e "$dir/replica.json" ] && [ -e "$copier" ]; then
  rm -f "$dir/replica.ready"; "$py" "$copier" "$dir" $$ >>"$dir/replica.log" 2>&1 & r=$!
  while [ ! -e "$dir/replica.ready" ] && kill -0 "$r" 2>/dev/null; do sleep 0.1; done
  if [ "$(head -c 3 "$dir/replica.ready" 2>/dev/null)" != ok ]; then
    echo "clusterctl: no rank started: $(head -c 2000 "$dir/replica.ready" 2>/dev/null || echo 'the checkpoint copier ended')"
    kill "$r" 2>/dev/null; echo 1 > "$dir/agent.exit.tmp" && mv -f "$dir/agent.exit.tmp" "$dir/agent.exit"; exit 1
  fi
fi
( while IFS= read -r kv; do export "$kv"; done < "$dir/env"; exec setsid "$@" ) &
pid=$!
echo "$pid" > "$dir/agent.pid"
m=; sampler=$(dirname "$dir")/FILES_DIR/node_metrics.py  # issue 41: node/node_metrics.py, ended with torchrun
if [ -n "$every" ] && [ -e "$sampler" ]; then "$py" "$sampler" "$dir" "$every" "$pid" "$ifaces" >/dev/null 2>>"$dir/metrics.log" & m=$!; fi
alive() { s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1); [ -n "$s" ] && [ "$s" != Z ]; }
(
  echo > "$dir/lease.seen"; age=0
  while sleep 1; do
    why=
    if [ -e "$dir/stop" ]; then why="the run's supervisor stopped this node's ranks: $(head -c 300 "$dir/stop")"
    elif [ "$dir/lease" -nt "$dir/lease.seen" ]; then echo > "$dir/lease.seen"; age=0
    elif [ "$age" -ge "$lease" ]; then
      why="no word from the controller or the run's supervisor for ${age}s (lease ${lease}s): stopping this node's ranks"
    else age=$((age+1))
    fi
    if [ -n "$why" ]; then
      echo "clusterctl: $why"
      kill -TERM -"$pid" 2>/dev/null
      i=0; while alive "$pid" && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
      kill -KILL -"$pid" 2>/dev/null
      exit 0
    fi
  done
) & watch=$!
wait "$pid"; code=$?
kill "$watch" $m $r 2>/dev/null
echo "$code" > "$dir/agent.exit.tmp" && mv -f "$dir/agent.exit.tmp" "$dir/agent.exit"
'''.replace("FILES_DIR", FILES)

WRAPPER = _WRAPPER  # what a keeper starts for a detached run's next attempt (node/node_healing.py)

# The poll (node/run_files.py `poll`): renews the lease and prints "exit N" once torchrun ended ("exit N
# stopped" when `clusterctl stop` ended it), else "running"; through the no-follow layer (issue 47: a
# shell `echo > lease` wrote through a link the job made, as root). Its cost, CPU per poll on a node:
# 2.2 ms for the shell it was, 16 ms for `python3 -I -S -c` with the layer (docs/benchmarks.md), one
# poll per node every 4 s (watch/pace.py): 0.4% of a core. No shell form is safe: `[ -L ]` then a
# write races the job's swap, `touch -h` still follows a linked directory above the lease and reading
# agent.exit needs an open that refuses links, FIFOs and device nodes together (O_NOFOLLOW|O_NONBLOCK
# and an fstat of what was opened), which only the layer does.

# The run's live stream and `clusterctl logs` are node/follow_files.py's (read back by watch/follow.py's
# FollowStream): tail's stream, byte for byte, with no link followed.

def env_file(env: tuple[tuple[str, str], ...]) -> bytes:
    lines = []
    for name, value in env:
        if "\n" in value or "\0" in value:
            raise ValueError(f"environment variable {name} contains a newline or NUL")
        lines.append(f"{name}={value}\n")
    return "".join(lines).encode()


def write_env_command(inventory: Inventory, run_dir: str, env: tuple[tuple[str, str], ...]) -> Command:
    """The node's run dir owned and its env written (node/run_files.py `write-env`): as root (sudo, or in
    the container), so that the run's shared directories (logs, logs/<run id>) are root's, which every
    node accepts; without a container the node's run dir is then given to the SSH user, who runs the job."""
    return node_files.command(inventory, run_dir, "write-env", give_run_dir(inventory), stdin=env_file(env))


def give_run_dir(inventory: Inventory) -> str:
    """write-env's GIVE: "1" where the SSH user runs the job (no container), whose run dir and env become theirs."""
    return "0" if inventory.uses_container else "1"


def start_command(inventory: Inventory, run_dir: str, torchrun: tuple[str, ...], lease_s: int = LEASE_S) -> Command:
    """Start the wrapper detached from the SSH session; returns at once."""
    from clusterctl.plan.metrics_sampler import sampler_args

    workdir = inventory.job.workdir or ""
    wrapper = ("sh", "-c", _WRAPPER, "clusterctl-wrapper", run_dir, str(lease_s), workdir, *sampler_args(inventory),
               *torchrun)
    argv = in_container(inventory, wrapper, detach=True) if inventory.uses_container else ("setsid", "-f", *wrapper)
    return Command(argv, timeout=60)


def poll_command(inventory: Inventory, run_dir: str) -> Command:
    return node_files.command(inventory, run_dir, "poll", timeout=4)


RENEW = b"renew\n"  # a renewal asked on a lease-carrying stream's stdin (node/follow_files.py answers RENEWED)


def follow_command(inventory: Inventory, run_dir: str, nproc: int, lease: bool = False) -> Command:
    """Stream the node's output (node/follow_files.py; read back by watch/follow.py's FollowStream(nproc)).
    With `lease`, the stream renews the run's lease when asked (RENEW on its stdin), as a poll does, and
    answers on stderr; its stdin stays open, and its end (the controller gone) ends the stream."""
    return node_files.command(inventory, run_dir, "follow", str(nproc), *(("1",) if lease else ()), timeout=None,
                              stdin_open=lease)


def logs_command(inventory: Inventory, run_dir: str, local_ranks: tuple[int, ...], agent_log: bool,
                 lines: Optional[int] = None, follow: bool = False) -> Command:
    """Read (or follow) some of a node's files of a run (node/follow_files.py; read back by FollowStream).
    Following, stdin stays open: its end (this clusterctl gone, Ctrl-C) ends the node's follower."""
    count = "+1" if lines is None else str(max(0, lines))
    return node_files.command(inventory, run_dir, "logs", count, "1" if follow else "0", "1" if agent_log else "0",
                              *map(str, local_ranks), timeout=None if follow else 120, stdin_open=follow)


def mark_stopped_command(inventory: Inventory, run_dir: str, note: str) -> Command:
    """`clusterctl stop`, before it ends the ranks: the run dir's `stopped` mark, so that the attached
    `clusterctl run` (its poll) tells "stopped" from a crash. Prints "no run dir" where the run never started."""
    return node_files.command(inventory, run_dir, "mark-stopped", note, timeout=30)


def await_exit_command(inventory: Inventory, run_dir: str) -> Command:
    """`clusterctl stop`, after the ranks were ended: agent.exit awaited (10 s): "exit N", "running" or "no agent"."""
    return node_files.command(inventory, run_dir, "await-exit", timeout=30)


def tail_command(inventory: Inventory, run_dir: str, lines: int = 30) -> Command:
    return node_files.command(inventory, run_dir, "tail", "agent.log", str(lines), timeout=20)


def parse_poll(stdout: str) -> Optional[int]:
    """None while running; the exit code once torchrun ended."""
    text = stdout.strip()
    if text.startswith("exit "):
        try:
            return int(text.split()[1])
        except (IndexError, ValueError):
            return 1
    return None


def poll_says_stopped(stdout: str) -> bool:
    """The node's torchrun ended because `clusterctl stop` ended the run (see _POLL)."""
    words = stdout.split()
    return len(words) == 3 and words[0] == "exit" and words[2] == "stopped"


def job_env(inventory: Inventory, host_env: tuple[EnvVar, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((e.name, e.value) for e in (*inventory.job.env, *host_env))
