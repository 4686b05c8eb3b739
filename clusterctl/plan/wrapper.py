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
  each second); the output stream waits for agent.exit through `tail -F` (inotify), not a
  `sleep 0.1` loop (10 forks a second); the controller renews the lease every few seconds.
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
from clusterctl.plan.container import host_path, in_container, on_host_or_in_container
from clusterctl.node.layout import FILES, RANKS_GLOB_SH

LEASE_S = 15

_WRAPPER = r'''
dir=$1 lease=$2 workdir=$3 py=$4 every=$5 ifaces=$6; shift 6
mkdir -p "$dir" || exit 1
exec </dev/null >>"$dir/agent.log" 2>&1
if [ -n "$workdir" ] && ! cd "$workdir"; then echo 127 > "$dir/agent.exit"; exit 1; fi
touch "$dir/lease"
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
kill "$watch" $m 2>/dev/null
echo "$code" > "$dir/agent.exit.tmp" && mv -f "$dir/agent.exit.tmp" "$dir/agent.exit"
'''.replace("FILES_DIR", FILES)

WRAPPER = _WRAPPER  # what a keeper starts for a detached run's next attempt (node/node_healing.py)

# Prints "exit N" once torchrun ended ("exit N stopped" when `clusterctl stop` ended it), else
# "running"; renews the lease (a builtin `echo >` sets its mtime: one fork less than `touch`).
_POLL = ('{ echo > "$1/lease"; } 2>/dev/null; if [ -e "$1/agent.exit" ]; then s=; [ -e "$1/stopped" ] && s=" stopped"; '
         'echo "exit $(cat "$1/agent.exit")$s"; else echo running; fi')

# Streams the node's output until agent.exit appears, then the rest, then ends by itself (its end
# tells the runner to poll the node at once; tail -F reads through inotify, so 0.15 s gets the rest:
# the ranks' files were complete a second before, when the ranks exited, and torchrun's own last
# lines are milliseconds old). agent.exit is waited for by a second `tail -F`, which sees it appear
# through inotify (no fork while the job runs; it was a `sleep 0.1` loop, 10 forks a second) and
# ends once `head` has its first byte (GNU tail notices its reader gone; --pid ends it with the
# first tail otherwise); a tail that cannot (no --pid: busybox) leaves the old loop to wait. Each
# local rank's own stdout/stderr files (byte for byte, `\r` and partial lines included) and
# torchrun's agent.log, through one `tail -v -F` that marks each switch of file with a header.
# First it waits for torchrun's per-rank directory (made as the workers start) and names it in a
# line of its own; watch/follow.py reads the stream back and says why torchrun's copy in agent.log
# is not enough. A torchrun that ends before its workers start leaves agent.log alone to follow.
_FOLLOW = r'''
i=0; until cd "$1" 2>/dev/null; do [ $i -lt 120 ] || exit 1; sleep 0.25; i=$((i+1)); done
n=$2 att=
while :; do
  for a in RANKS_GLOB; do [ -d "$a" ] && att=$a; done
  if [ -n "$att" ] || [ -e agent.exit ]; then break; fi
  sleep 0.25
done
echo "clusterctl-follow $att"
set --
i=0
while [ -n "$att" ] && [ "$i" -lt "$n" ]; do set -- "$@" "$att/$i/stdout.log" "$att/$i/stderr.log"; i=$((i+1)); done
tail -v -n +1 -F "$@" agent.log 2>/dev/null & t=$!
tail -n +1 -F -s 0.1 --pid="$t" agent.exit 2>/dev/null | head -c 1 >/dev/null
while [ ! -e agent.exit ]; do sleep 0.1; done
sleep 0.15; kill "$t" 2>/dev/null
'''.replace("RANKS_GLOB", RANKS_GLOB_SH)

# `clusterctl logs`: some files of a node's run dir, read back by watch/follow.py like _FOLLOW's stream.
# $1 the run dir, $2 lines per file (K, or +1 for all), $3 follow (1/0), $4 agent.log too (1/0), then
# the local ranks whose stdout/stderr to read. Without torchrun's per-rank directory (it never got
# to its workers) agent.log is read. Following waits for that directory as _FOLLOW does and ends a
# second after agent.exit appears; a run that already ended is read once, every line (a second of
# `tail -F` may not get through a long log). Following, stdin stays open: its end (this clusterctl
# gone, Ctrl-C) ends the tail at once instead of at the run's end.
_LOGS = r"""
cd "$1" 2>/dev/null || { echo "clusterctl-logs: no run directory" >&2; exit 3; }
n=$2 follow=$3 agent=$4; shift 4
[ -e agent.exit ] && follow=0
att=
while :; do
  for a in RANKS_GLOB; do [ -d "$a" ] && att=$a; done
  if [ -n "$att" ] || [ -e agent.exit ] || [ "$follow" = 0 ]; then break; fi
  sleep 0.25
done
echo "clusterctl-follow $att"
ranks=$*; set --
if [ -n "$att" ]; then for r in $ranks; do set -- "$@" "$att/$r/stdout.log" "$att/$r/stderr.log"; done; fi
if [ "$agent" = 1 ] || [ -z "$att" ]; then set -- "$@" agent.log; fi
if [ "$follow" = 0 ]; then tail -v -n "$n" "$@" 2>/dev/null; exit 0; fi
tail -v -n "$n" -F "$@" 2>/dev/null & t=$!
me=$$
exec 3<&0  # an asynchronous list's own stdin is /dev/null
{ cat <&3; kill "$t" "$me"; } >/dev/null 2>&1 & w=$!
while [ ! -e agent.exit ]; do sleep 0.5; done
sleep 1; kill "$t" "$w" 2>/dev/null
exit 0
""".replace("RANKS_GLOB", RANKS_GLOB_SH)

# `clusterctl stop`, before it ends the ranks: marks the run dir, so the attached `clusterctl run`
# (its poll, _POLL) tells "stopped" from a crash. Prints "no run dir" where the run never started.
_MARK_STOPPED = 'if [ -d "$1" ]; then echo "$2" > "$1/stopped" && echo marked; else echo "no run dir"; fi'

# `clusterctl stop`, after the ranks were ended: the node agent writes agent.exit and ends within a
# second of its torchrun; wait for that (up to 10 s). Prints "exit N", "running" or "no agent".
_AWAIT_EXIT = r"""
i=0
while [ -e "$1/agent.pid" ] && [ ! -e "$1/agent.exit" ] && [ $i -lt 40 ]; do sleep 0.25; i=$((i+1)); done
if [ -e "$1/agent.exit" ]; then echo "exit $(cat "$1/agent.exit")"; elif [ -e "$1/agent.pid" ]; then echo running
else echo "no agent"; fi
"""

# The run's shared directories (<outputs>/logs, logs/<run id>, its .files) are made as open as
# job.outputs itself: on a shared filesystem that nodes reach as different users (root on one, a
# sudo user on another; job.outputs then 1777, as /tmp), each must be able to make its own run
# directory and find the job's files there. `mk DIR`: DIR with its parent's mode, whoever wins a race.
RUN_DIRS_SH = r'''mk() { [ -d "$1" ] || mkdir -m "$(stat -c %a "$(dirname "$1")" 2>/dev/null || echo 755)" "$1" 2>/dev/null \
  || [ -d "$1" ]; }
run_dirs() { r=$1; o=$(dirname "$(dirname "$r")"); mkdir -p "$o" && mk "$o/logs" && mk "$r"; }
'''

# A node's own run directory holds the job's secrets (env) and what runs as root (the supervisor's
# script): on an outputs directory every local user can write to (1777), another user could make it
# first and own what we write there. So it is made here (mkdir fails on any existing path, a
# symlink included) or proven ours: a directory, not a symlink, of our user, mode 0700.
# `ours DIR` checks; `own_dir DIR` makes or checks. Either says why it refuses.
OWN_DIR_SH = r'''ours() {
  if [ -d "$1" ] && [ ! -L "$1" ] && [ -O "$1" ] && [ "$(stat -c %a "$1")" = 700 ]; then return 0; fi
  echo "clusterctl: refusing the run directory $1: it is not ours ($(stat -c 'owner %U, mode %a, %F' "$1" 2>&1)): another user may have made it first; remove it, or use another job.outputs" >&2
  return 1
}
own_dir() { mkdir -m 700 "$1" 2>/dev/null || ours "$1"; }
'''

# $1: the node's own run directory (private: it holds the env file)
_WRITE_ENV = (RUN_DIRS_SH + OWN_DIR_SH + 'run_dirs "$(dirname "$1")" && umask 077 && own_dir "$1" && '
              'rm -f "$1/agent.exit" "$1/stop" "$1/env" && cat > "$1/env"')


def env_file(env: tuple[tuple[str, str], ...]) -> bytes:
    lines = []
    for name, value in env:
        if "\n" in value or "\0" in value:
            raise ValueError(f"environment variable {name} contains a newline or NUL")
        lines.append(f"{name}={value}\n")
    return "".join(lines).encode()


def write_env_command(inventory: Inventory, run_dir: str, env: tuple[tuple[str, str], ...]) -> Command:
    argv = in_container(inventory, ("sh", "-c", _WRITE_ENV, "clusterctl-env", run_dir), interactive=True)
    return Command(argv, stdin=env_file(env), timeout=60)


def start_command(inventory: Inventory, run_dir: str, torchrun: tuple[str, ...], lease_s: int = LEASE_S) -> Command:
    """Start the wrapper detached from the SSH session; returns at once."""
    from clusterctl.plan.metrics_sampler import sampler_args

    workdir = inventory.job.workdir or ""
    wrapper = ("sh", "-c", _WRAPPER, "clusterctl-wrapper", run_dir, str(lease_s), workdir, *sampler_args(inventory),
               *torchrun)
    argv = in_container(inventory, wrapper, detach=True) if inventory.uses_container else ("setsid", "-f", *wrapper)
    return Command(argv, timeout=60)


def poll_command(inventory: Inventory, run_dir: str) -> Command:
    argv = on_host_or_in_container(inventory, run_dir, lambda d: ("sh", "-c", _POLL, "clusterctl-poll", d))
    return Command(argv, timeout=4, privileged=_on_host(inventory, run_dir))


def follow_command(inventory: Inventory, run_dir: str, nproc: int) -> Command:
    """Stream the node's output (see _FOLLOW; read back by watch/follow.py's FollowStream(nproc))."""
    argv = on_host_or_in_container(inventory, run_dir,
                                   lambda d: ("sh", "-c", _FOLLOW, "clusterctl-follow", d, str(nproc)))
    return Command(argv, timeout=None, privileged=_on_host(inventory, run_dir))


def logs_command(inventory: Inventory, run_dir: str, local_ranks: tuple[int, ...], agent_log: bool,
                 lines: Optional[int] = None, follow: bool = False) -> Command:
    """Read (or follow) some of a node's files of a run (see _LOGS; read back by FollowStream)."""
    count = "+1" if lines is None else str(max(0, lines))
    argv_for = lambda d: ("sh", "-c", _LOGS, "clusterctl-logs", d, count, "1" if follow else "0",  # noqa: E731
                          "1" if agent_log else "0", *map(str, local_ranks))
    on_host = host_path(inventory, run_dir)
    # in the container: `docker exec -i`, so that the end of stdin reaches the follower (see _LOGS)
    argv = argv_for(on_host) if on_host is not None else in_container(inventory, argv_for(run_dir), interactive=True)
    return Command(argv, timeout=None if follow else 120, privileged=on_host is not None, stdin_open=follow)


def mark_stopped_command(inventory: Inventory, run_dir: str, note: str) -> Command:
    argv = on_host_or_in_container(inventory, run_dir, lambda d: ("sh", "-c", _MARK_STOPPED, "clusterctl-stop", d, note))
    return Command(argv, timeout=30, privileged=_on_host(inventory, run_dir))


def await_exit_command(inventory: Inventory, run_dir: str) -> Command:
    argv = on_host_or_in_container(inventory, run_dir, lambda d: ("sh", "-c", _AWAIT_EXIT, "clusterctl-stop", d))
    return Command(argv, timeout=30, privileged=_on_host(inventory, run_dir))


def tail_command(inventory: Inventory, run_dir: str, lines: int = 30) -> Command:
    argv = on_host_or_in_container(inventory, run_dir, lambda d: ("tail", "-n", str(lines), f"{d}/agent.log"))
    return Command(argv, timeout=20, privileged=_on_host(inventory, run_dir))


def _on_host(inventory: Inventory, run_dir: str) -> bool:
    """Read through the bind mount on the host: root in the container wrote those files (and
    torchrun makes its log dirs 0700), so a non-root SSH user reads them through sudo."""
    return host_path(inventory, run_dir) is not None


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
