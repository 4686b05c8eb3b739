"""A cluster-wide lock on the master node, held as long as this clusterctl's SSH connection lives.

The local lock (state.py) keeps two `up`s of one state directory apart. Two controllers (two
checkouts, two laptops) would still interleave on the nodes: both pull, both create the
container (one fails on the name), both open the rendezvous probe on the master's port. So
`up` and `down` also take `flock` on a file of the master node. The lock is held by a tiny
process that lives while the sshd process of our connection lives: a clusterctl that exits,
is interrupted or killed releases it within a fraction of a second, without anyone's help.
(A controller cut off the network keeps it until sshd notices the dead connection; the
refusal names the holder's pid for that case.)

Pure: argv tuples and parsers; commands/up.py runs them through the executor.
"""
from __future__ import annotations

from typing import Optional

from clusterctl.models import Command

WAIT_S = 3  # a lock released an instant ago (a clusterctl that just exited) is not a refusal
BUSY_EXIT = 75

# $1 lock name, $2 owner text, $3 seconds to wait, $4 ssh|local (whose lifetime the lock follows:
# our connection's sshd process, or the clusterctl process itself). Prints "locked <holder pid>", or
# "held <owner line>" and exits 75. The directory is per remote user and 0700: nobody else can
# plant a symlink where we write.
_ACQUIRE = r'''
name=$1 owner=$2 wait=$3 via=$4
dir=/tmp/clusterctl-locks-$(id -u)
mkdir -p -m 700 "$dir" && [ -O "$dir" ] && [ ! -L "$dir" ] || { echo "unsafe $dir"; exit 3; }
command -v flock >/dev/null || { echo "no flock"; exit 4; }
conn=$PPID p=$PPID
while [ "$via" = ssh ] && [ "${p:-1}" -gt 1 ]; do
  case "$(cat /proc/$p/comm 2>/dev/null)" in sshd*) conn=$p; break;; esac
  p=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f2)
done
exec 9>>"$dir/$name.lock" || exit 3
flock -w "$wait" 9 || { echo "held $(cat "$dir/$name.owner" 2>/dev/null)"; exit 75; }
( exec </dev/null >/dev/null 2>&1; while kill -0 "$conn" 2>/dev/null; do sleep 0.2 9>&-; done ) &
echo "$owner; lock held by pid $! on this node since $(date +%H:%M:%S)" > "$dir/$name.owner"
echo "locked $! $dir/$name.lock"
'''

# $1 lock name, $2 holder pid: ends the holder, only if the lock's owner line still names it.
_RELEASE = r'''
dir=/tmp/clusterctl-locks-$(id -u)
grep -q "; lock held by pid $2 on this node" "$dir/$1.owner" 2>/dev/null && kill "$2" 2>/dev/null
exit 0
'''


def acquire_command(name: str, owner: str, via_ssh: bool = True, wait_s: float = WAIT_S) -> Command:
    return Command(("sh", "-c", _ACQUIRE, "clusterctl-lock", name, owner, str(int(wait_s)), "ssh" if via_ssh else "local"),
                   timeout=wait_s + 20, ok_exit_codes=(0, BUSY_EXIT))


def release_command(name: str, holder: int) -> Command:
    return Command(("sh", "-c", _RELEASE, "clusterctl-unlock", name, str(holder)), timeout=20)


def parse_acquire(stdout: str) -> tuple[Optional[int], str]:
    """(holder pid, lock path) once locked; (None, who holds it) when busy; (None, "") otherwise."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    if line.startswith("locked "):
        parts = line.split()
        return (int(parts[1]), parts[2] if len(parts) > 2 else "") if parts[1].isdigit() else (None, "")
    if line.startswith("held"):
        return None, line[len("held"):].strip() or "another clusterctl"
    return None, ""
