"""Every rank's Python stack, taken on its node with py-spy: one round trip per node.

How (one `sh` script per node, run on the host, as root through `sudo -n` where the SSH user may):
- py-spy comes from clusterctl's own dependency: the static binary of the `py-spy` wheel, gzipped on
  stdin, unpacked into a `mktemp -d` directory that the script removes when it ends (an exit, a
  signal or a dropped connection alike). Where that binary cannot run (a controller of another OS or
  architecture, a noexec /tmp everywhere), a `py-spy` on the node's PATH is used, and else the node
  says "no py-spy". A run's watches ship it once per node: the node keeps it and later rounds send
  its sha256 only, checked before it runs (watch/pyspy_kept.py says where, and when it goes).
- The ranks are found as cleanup finds them (modules/process.py): the marker lines of
  /proc/PID/environ for this cluster, host and run, plus `RANK=`. A marked process whose parent has
  the same RANK is that rank's child (a DataLoader worker): only the rank itself is sampled.
  A shell with `RANK` is a launcher's shell around the rank (`job.launcher: none`, `deepspeed`): it is
  passed over, and the process under it is the rank.
- From the host, the ranks in a container are ordinary host PIDs: py-spy reads them through
  /proc/PID/root and process_vm_readv, so the container needs no SYS_PTRACE. Only where the host
  cannot look (a non-root user without sudo) does clusterctl run the same script in the container.
- Each sample reads every rank's main-thread state, wchan and CPU time with the shell's own `read`
  (no process started; a hot loop can sit on one line in every sample: its CPU time tells it from a
  wait), then runs py-spy on the ranks at once. The roll call of a hang also reads each rank's TCP
  sockets (/proc/PID/fd socket inodes joined with /proc/PID/net/tcp{,6}: its network namespace's table).
- The straggler watch's rounds (`--nonblocking`) cost a node as little as they can (issue 52): no socket
  table (the straggler verdict reads none); a rank whose main thread has not run since its last good
  dump (/proc's schedstat unchanged) cannot have moved, so the node says `same` and starts no py-spy
  (the controller reads that dump: this round's, or an earlier round's it holds, KeptPySpy.dumps);
  and the run's kept directory on the node keeps what the next round needs: the ranks found (all of
  LOCAL_WORLD_SIZE, checked by their start times, else looked for again), the schedstat of each
  dump, and what the kept py-spy looked like once its digest was checked (inode, size, times: any
  change to the file is hashed again).
"""
from __future__ import annotations

import gzip
import hashlib
import os
import platform
import re
import threading
from dataclasses import dataclass, field
from typing import Iterable, Optional

from clusterctl.executor import Connections, for_each_host
from clusterctl.plan.container import in_container
from clusterctl.watch.pyspy_kept import KeptPySpy, ship_now
from clusterctl.watch.sockets import parse_tcp_table
from clusterctl.watch.stacks import RankStack, parse_pyspy
from clusterctl.models import Command, Host, HostResult, HostStatus, Inventory

MARK = "@@@clusterctl-stacks "
SPY_TIMEOUT_S = 10  # one py-spy dump: one that hangs (a rank stuck in the kernel mid-read) is killed, its rank unread

# $1 cluster, $2 host, $3 run id, $4 samples, $5 seconds between samples, $6 the `uname -m` the shipped
# binary runs on ("" when none is shipped), $7 `--nonblocking` (read the ranks without pausing them: the
# straggler watch samples a healthy job all along) or "", $8 the kept directory's name (watch/pyspy_kept.py;
# "": nothing kept), $9 the binary's sha256, $10 `kept` (no stdin: run the kept binary once its digest
# matches, else say so and ask for it: `ship`) or `ship`. stdin: the gzipped py-spy binary, or nothing.
_SCRIPT = r'''
cluster=$1 host=$2 run=$3 samples=$4 interval=$5 arch=$6 nb=$7 keep=$8 sha=$9 mode=${10} known=" ${11} " M='@@@clusterctl-stacks'
SPY_TIMEOUT=@SPY_TIMEOUT@
dir=$(mktemp -d "${TMPDIR:-/tmp}/clusterctl-stacks.XXXXXX" 2>/dev/null) || dir=$(mktemp -d /var/tmp/clusterctl-stacks.XXXXXX) \
  || { cat >/dev/null; echo "$M problem cannot create a temporary directory"; exit 0; }
extra=""
trap 'rm -rf "$dir" $extra' EXIT
trap 'exit 130' INT TERM HUP PIPE  # PIPE: clusterctl went away mid-sample (its end of the channel closed)
echo "$M uid $(id -u)"
echo "$M clk_tck $(getconf CLK_TCK 2>/dev/null || echo 100)"
spy=""
# the kept binary: only in a directory of ours (not a link) and only with the expected digest
sum_of() { sha256sum < "$1" 2>/dev/null | cut -d' ' -f1; }
ours() { [ -d "$1" ] && [ ! -L "$1" ] && [ -O "$1" ]; }
# the kept file as the kernel describes it (device, inode, size, mtime, ctime: any write or chmod changes the
# ctime): recorded once its digest was checked, it spares later rounds hashing 8 MB (~40 ms of CPU each)
looks() { stat -c '%d %i %s %Y %Z' "$1" 2>/dev/null; }
checked() { [ -n "$2" ] && [ -f "$1.seen" ] && [ ! -L "$1.seen" ] && [ "$(cat "$1.seen" 2>/dev/null)" = "$2" ]; }
if [ "$mode" = kept ] && [ -n "$keep" ]; then
  for base in "${TMPDIR:-/tmp}" /var/tmp /dev/shm "$HOME"; do
    f="$base/$keep/py-spy.$sha"
    ours "$base/$keep" && { [ -e "$f" ] || [ -L "$f" ]; } || continue
    if [ -f "$f" ] && [ ! -L "$f" ] && [ -O "$f" ]; then
      now=$(looks "$f")
      checked "$f" "$now" && { spy=$f; break; }
      [ "$(sum_of "$f")" = "$sha" ] && { [ -n "$now" ] && echo "$now" > "$f.seen"; spy=$f; break; }
    fi
    rm -f "$f" "$f.seen" 2>/dev/null
    echo "$M problem the kept py-spy $f changed on the node (its sha256 is not $sha): not run; clusterctl ships it again"
    echo "$M ship"; exit 0
  done
  [ -n "$spy" ] || { echo "$M problem the kept py-spy is gone from the node: clusterctl ships it again"; echo "$M ship"; exit 0; }
  echo "$M tool kept $("$spy" --version 2>&1 | head -n 1)"
elif [ -n "$arch" ] && [ "$(uname -m)" = "$arch" ] && gzip -dc > "$dir/py-spy" 2>/dev/null && chmod 700 "$dir/py-spy"; then
  if [ -n "$keep" ] && [ "$(sum_of "$dir/py-spy")" = "$sha" ]; then
    # keep it for the run's later rounds, in the first place where it runs (a noexec /tmp: the next). Hosts that
    # share a machine ($HOME on NFS, several `connection: local` hosts, rehearsal nodes) share the directory and
    # ship at once: a copy kept by another is used as it is, each copy goes through a name of its own and a rename,
    # and a failed keep removes only what this round made (a shared name, or an `rm -rf` of the directory, made
    # every round of 16 rehearsal nodes ship py-spy again)
    for base in "${TMPDIR:-/tmp}" /var/tmp /dev/shm "$HOME"; do
      k="$base/$keep" f="$base/$keep/py-spy.$sha" t="" made=""
      mkdir -m 700 "$k" 2>/dev/null && made=1; ours "$k" || continue
      if [ -f "$f" ] && [ ! -L "$f" ] && [ -O "$f" ] && [ "$(sum_of "$f")" = "$sha" ] && "$f" --version >/dev/null 2>&1; then
        spy=$f; echo "$M kept $sha"; break
      fi
      t=$(mktemp "$k/py-spy.XXXXXX" 2>/dev/null) && cp "$dir/py-spy" "$t" 2>/dev/null && chmod 700 "$t" \
        && mv -f "$t" "$f" && "$f" --version >/dev/null 2>&1 && { spy=$f; echo "$M kept $sha"; break; }
      [ -n "$t" ] && rm -f "$t"
      [ -n "$made" ] && rm -rf "$k"
    done
  fi
  if [ -z "$spy" ] && "$dir/py-spy" --version >/dev/null 2>&1; then spy="$dir/py-spy"
  elif [ -z "$spy" ]; then  # a noexec /tmp: another place, removed as well at the end
    for base in /var/tmp /dev/shm "$HOME"; do
      d=$(mktemp -d "$base/clusterctl-stacks.XXXXXX" 2>/dev/null) || continue
      extra="$extra $d"
      cp "$dir/py-spy" "$d/py-spy" 2>/dev/null && "$d/py-spy" --version >/dev/null 2>&1 && { spy="$d/py-spy"; break; }
    done
  fi
  [ -n "$spy" ] && echo "$M tool shipped $("$spy" --version 2>&1 | head -n 1)"
fi
cat >/dev/null 2>&1
if [ -z "$spy" ] && spy=$(command -v py-spy 2>/dev/null); then echo "$M tool node $spy $("$spy" --version 2>&1 | head -n 1)"; fi
[ -n "$spy" ] || { echo "$M problem no py-spy: the shipped binary does not run here ($(uname -m)) and none is on PATH"; exit 0; }
shell() { case $(readlink "/proc/$1/exe" 2>/dev/null) in */sh|*/dash|*/bash|*/busybox) return 0;; esac; return 1; }
# what a straggler round keeps for the next ones: beside the kept py-spy (the run's own 0700 directory), else this round's
state=$dir; [ -n "$nb" ] && [ -n "$keep" ] && case $spy in */"$keep"/py-spy.*) state=${spy%/*};; esac
# the ranks found by an earlier round, all of them (as many as their LOCAL_WORLD_SIZE) and all still running (the
# same start time): no process's environment read again. One file per host: hosts that share a machine (several
# `connection: local` hosts, rehearsal nodes) share its /tmp and so the kept directory
kept_ranks=$state/ranks.${host##*/}
ranks=$kept_ranks
if [ "$state" != "$dir" ] && [ -s "$ranks" ]; then
  while read -r p rank lrank start; do
    l=""; { read -r l < "/proc/$p/stat"; } 2>/dev/null; set -f; set -- ${l##*) }; set +f
    [ "${20:-}" = "$start" ] || { : > "$ranks"; break; }
  done < "$ranks"
fi
if [ ! -s "$ranks" ]; then
  ranks=$dir/ranks lws=""
  for e in $(grep -lzxF "CLUSTERCTL_CLUSTER=$cluster" /proc/[0-9]*/environ 2>/dev/null \
      | xargs -r grep -lzxF "CLUSTERCTL_HOST=$host" 2>/dev/null | xargs -r grep -lzxF "CLUSTERCTL_RUN_ID=$run" 2>/dev/null); do
    p=${e#/proc/}; p=${p%/environ}
    rank="" lrank=""
    set -f; set -- $(tr '\0' '\n' < "$e" 2>/dev/null | sed -n 's/^RANK=\([0-9][0-9]*\)$/r=\1/p
      s/^LOCAL_RANK=\([0-9][0-9]*\)$/l=\1/p; s/^LOCAL_WORLD_SIZE=\([0-9][0-9]*\)$/w=\1/p'); set +f
    for kv; do case $kv in r=*) rank=${kv#r=};; l=*) lrank=${kv#l=};; w=*) lws=${kv#w=};; esac; done
    [ -n "$rank" ] || continue
    shell "$p" && continue  # a launcher's shell around the rank (job.launcher none, deepspeed): the rank is its child
    l=""; { read -r l < "/proc/$p/stat"; } 2>/dev/null; set -f; set -- ${l##*) }; set +f
    ppid=${2:-} start=${20:-0}
    prank=$(tr '\0' '\n' < "/proc/$ppid/environ" 2>/dev/null | sed -n 's/^RANK=\([0-9][0-9]*\)$/\1/p')
    [ "$prank" = "$rank" ] && ! shell "$ppid" && continue
    echo "$p $rank ${lrank:--} $start" >> "$ranks"
  done
  found=0; [ -s "$ranks" ] && while read -r _line; do found=$((found + 1)); done < "$ranks"
  [ "$state" != "$dir" ] && [ -n "$lws" ] && [ "$found" = "$lws" ] && cp "$ranks" "$kept_ranks" 2>/dev/null
fi
[ -s "$ranks" ] || { echo "$M problem no rank of run $run runs here"; exit 0; }
to=""; command -v timeout >/dev/null 2>&1 && to="timeout -s KILL $SPY_TIMEOUT"
look() {
  # rank $p read with the shell's own `read` (no process started: a sample costs a node py-spy's dumps at
  # most). The straggler rounds ($nb) first read how long its main thread has run (schedstat): unchanged
  # since its last good dump, it has not run since, so its stack is that dump's and py-spy is not started
  ran=""; [ -n "$nb" ] && { read -r ran < "/proc/$p/task/$p/schedstat"; } 2>/dev/null
  l=""; { read -r l < "/proc/$p/task/$p/stat"; } 2>/dev/null; set -f; set -- ${l##*) }; set +f
  st=${1:--} ticks=$(( ${12:-0} + ${13:-0} ))
  wc=""; { read -r wc < "/proc/$p/task/$p/wchan"; } 2>/dev/null
  case $wc in 0|*[!A-Za-z0-9_.]*) wc="";; esac
  seen=""; [ -n "$ran" ] && { read -r seen < "$state/ran.$p"; } 2>/dev/null
  # its dump of an earlier round is the controller's where it says so ($known); a later sample has this round's
  [ "$i" = 1 ] && case $known in *" $p "*) ;; *) seen="";; esac
}
one() {  # dump rank $p (in the background): the state, ticks, wchan and schedstat `look` read just before
  case "$nb$st" in
    # a blocking py-spy would wait forever to attach to a stopped or D-state process: the state is the answer
    T|t|D|Z|X) out="Error: not read: the process is in state $st"; code=125;;
    *) out=$($to "$spy" dump --json $nb --pid "$p" 2>&1); code=$?
       # an older py-spy on the node without --json: its text form
       [ "$code" != 0 ] && case "$out" in *--json*) out=$($to "$spy" dump --full-filenames --pid "$p" 2>&1); code=$?;; esac
       [ "$code" = 137 ] && [ -n "$to" ] && out="Error: py-spy did not answer within $SPY_TIMEOUT s (killed)";;
  esac
  if [ "$code" = 0 ]; then [ -n "$ran" ] && echo "$ran" > "$state/ran.$p"; else : > "$state/ran.$p"; fi
  echo "$M rank $i $p $rank $lrank $ticks $code $st ${wc:--}"
  printf '%s\n' "$out"
  [ -n "$nb" ] && return 0  # the straggler rounds judge no socket: the roll call of a hang reads them
  inodes=$(ls -l "/proc/$p/fd" 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\]$/\1/p' | tr '\n' ' ')
  echo "$M sockets $i $p"
  [ -n "$inodes" ] && awk -v want=" $inodes " 'FNR > 1 && index(want, " " $10 " ")' "/proc/$p/net/tcp" "/proc/$p/net/tcp6" 2>/dev/null
}
i=1
while :; do
  # every rank's state first, at about one moment (asleep (S) inside torch is a wait), then the dumps at once
  dumped=""
  while read -r p rank lrank _start; do
    look
    if [ -n "$ran" ] && [ "$ran" = "$seen" ]; then echo "$M rank $i $p $rank $lrank $ticks 0 $st ${wc:--} same"
    else one > "$dir/s$i.$p" 2>&1 & dumped=1; fi
  done < "$ranks"
  wait
  [ -n "$dumped" ] && cat "$dir"/s$i.* 2>/dev/null
  [ "$i" -ge "$samples" ] && break
  # a round does not outlive its ranks (the run ended, or they failed): no sample of nothing until $samples
  alive=""; while read -r p _rest; do [ -d "/proc/$p" ] && { alive=1; break; }; done < "$ranks"
  [ -n "$alive" ] || break
  i=$((i + 1)); sleep "$interval"
done
echo "$M done"
'''.replace("@SPY_TIMEOUT@", str(SPY_TIMEOUT_S))

# `platform.machine()` and `uname -m` agree on Linux; the wheel's binary is an ELF for this machine
_ELF = b"\x7fELF"
_payload_lock = threading.Lock()
_payload: Optional[tuple[bytes, str, str]] = None


def pyspy_binary() -> Optional[str]:
    """The py-spy binary of the installed `py-spy` wheel (clusterctl's dependency), or one on PATH."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            dist = distribution("py-spy")
            for file in dist.files or ():
                if file.name == "py-spy" and "bin" in file.parts:
                    path = str(dist.locate_file(file))
                    if os.access(path, os.X_OK):
                        return os.path.realpath(path)
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover (Python < 3.8)
        pass
    from shutil import which

    return which("py-spy")


def payload() -> tuple[bytes, str, str]:
    """(the gzipped binary, the `uname -m` it runs on, the binary's sha256); (b"", "", "") where this
    controller has no Linux py-spy to ship (macOS, Windows): the nodes then use their own. Made once
    per process: gzip's fastest level, 0.09 CPU s for the 8 MB binary against 0.31 s at level 6 (issue 52: a
    third of the controller's CPU in a short run), for 3.15 MB shipped per node instead of 2.84 MB."""
    global _payload
    with _payload_lock:
        if _payload is None:
            path = pyspy_binary()
            data = b""
            if path and platform.system() == "Linux":
                with open(path, "rb") as handle:
                    data = handle.read()
            _payload = ((gzip.compress(data, compresslevel=1), platform.machine(), hashlib.sha256(data).hexdigest())
                        if data[:4] == _ELF else (b"", "", ""))
        return _payload


def sample_command(inventory: Inventory, host: str, run_id: str, samples: int = 2, interval_s: float = 3.0,
                   inside: bool = False, nonblocking: bool = False, keep: str = "", ship: bool = True,
                   known: Iterable[int] = ()) -> Command:
    """The script for one node, on the host (as root where sudo allows) or, with `inside`, in the container.
    `keep`: the kept directory's name (watch/pyspy_kept.py): the node keeps the binary shipped, and with
    `ship` false runs the one it keeps (only its sha256 goes, no stdin). `known`: the pids whose last good dump
    the controller holds (KeptPySpy.dumps): not run since, the node says `same` for them from the first sample."""
    data, arch, sha = payload()
    keep = keep if sha and not inside else ""
    ship = ship or not keep
    argv = ("sh", "-c", _SCRIPT, "clusterctl-stacks", inventory.name, host, run_id, str(max(1, samples)),
            f"{max(0.0, interval_s):g}", arch, "--nonblocking" if nonblocking else "", keep, sha if keep else "",
            "ship" if ship else "kept", " ".join(str(int(pid)) for pid in sorted(known)) if keep else "")
    if inside:
        argv = in_container(inventory, argv, interactive=True)
    timeout = 60 + max(0.0, interval_s) * max(0, samples - 1)
    return Command(argv, stdin=(data or None) if ship else None, timeout=timeout, privileged=not inside)


@dataclass(frozen=True)
class NodeStacks:
    """What one node's script said: a tuple of ranks' stacks per sample, or why there are none."""

    host: str
    samples: tuple[tuple[RankStack, ...], ...] = ()
    tool: str = ""
    problem: str = ""
    uid: Optional[int] = None
    kept: str = ""  # the sha256 of the py-spy the node keeps for the run's later rounds
    asks: bool = False  # its kept py-spy was gone or changed: the next round ships it again
    dumps: dict = field(default_factory=dict, compare=False, repr=False)  # pid -> its last good dump's text

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r.rank for sample in self.samples for r in sample}))


_RANK_RE = re.compile(r"rank (\d{1,6}) (\d{1,10}) (\d{1,9}) (\d{1,9}|-) (\d{1,20}) (\d{1,3})"
                      r"(?: ([A-Za-z]|-) ([A-Za-z0-9_.]{1,64}|-)( same)?)?$")
_SOCKETS_RE = re.compile(r"sockets (\d{1,6}) (\d{1,10})$")


def parse_node_output(stdout: str, host: str, earlier: Optional[dict] = None) -> NodeStacks:
    """The script's output -> NodeStacks (`earlier`: pid -> the last good dump of an earlier round, for the
    ranks the node says are the `same`). Lines it does not understand are ignored; never raises."""
    sections: list[tuple[str, list[str]]] = []
    for line in stdout.splitlines():
        if line.startswith(MARK):
            sections.append((line[len(MARK):].strip(), []))
        elif sections:
            sections[-1][1].append(line)
    values: dict[str, str] = {}
    ranks: dict[tuple[int, int], dict] = {}
    dumped: dict[int, str] = dict(earlier or {})  # each pid's last good dump: a `same` rank has not run since
    for head, body in sections:
        word = head.split(" ", 1)[0]
        if word in ("uid", "clk_tck", "tool", "problem", "kept", "ship"):
            values.setdefault(word, head[len(word):].strip())
            continue
        rank, sockets = _RANK_RE.match(head), _SOCKETS_RE.match(head)
        if rank:
            sample, pid, code, text = int(rank.group(1)), int(rank.group(2)), int(rank.group(6)), "\n".join(body)
            if rank.group(9):
                code, text = (0, dumped[pid]) if pid in dumped else (1, "Error: not read again and no earlier dump")
            elif code == 0:
                dumped[pid] = text
            ranks[(sample, pid)] = {"rank": int(rank.group(3)), "local": rank.group(4), "ticks": int(rank.group(5)),
                                    "code": code, "text": text, "sockets": (),
                                    "state": (rank.group(7) or "").strip("-"), "wchan": (rank.group(8) or "").strip("-")}
        elif sockets and (int(sockets.group(1)), int(sockets.group(2))) in ranks:
            ranks[(int(sockets.group(1)), int(sockets.group(2)))]["sockets"] = parse_tcp_table("\n".join(body))
    clk = _int(values.get("clk_tck")) or 100
    by_sample: dict[int, list[RankStack]] = {}
    for (sample, pid), item in sorted(ranks.items()):
        threads, error = parse_pyspy(item["text"])
        if item["code"] != 0 and not error:
            error = f"py-spy exited {item['code']}"
        elif not threads and not error:
            error = "py-spy found no Python thread"
        by_sample.setdefault(sample, []).append(RankStack(
            host, item["rank"], None if item["local"] == "-" else int(item["local"]), pid,
            () if error and item["code"] != 0 else threads, error if item["code"] != 0 or not threads else "",
            item["ticks"] / clk, item["sockets"], item["state"], item["wchan"]))
    samples = tuple(tuple(sorted(by_sample[k], key=lambda r: r.rank)) for k in sorted(by_sample))
    problem = values.get("problem", "")
    if not samples and not problem:
        problem = "the node's stack script printed nothing understood" + (f": {stdout.strip()[-200:]!r}" if stdout.strip() else "")
    kept = values.get("kept", "")
    pids = {pid for _sample, pid in ranks}
    return NodeStacks(host, samples, values.get("tool", ""), problem, _int(values.get("uid")),
                      kept if re.fullmatch(r"[0-9a-f]{64}", kept) else "", "ship" in values,
                      {pid: text for pid, text in dumped.items() if pid in pids})


def _int(text: Optional[str]) -> Optional[int]:
    return int(text) if text and text.isascii() and text.isdigit() and len(text) < 10 else None


def sample_action(inventory: Inventory, run_id: str, samples: int = 2, interval_s: float = 3.0,
                  nonblocking: bool = False, kept: Optional[KeptPySpy] = None):
    """A host action (executor's `(transport, host) -> HostResult`) whose data["stacks"] is a NodeStacks.
    With `kept` (a run's watches), py-spy travels to each node once per run, not every round."""

    def action(transport, host: Host) -> HostResult:
        sha = payload()[2]
        ship = ship_now(kept, host, sha)
        earlier = kept.dumps(host.name) if kept is not None and nonblocking else {}
        result = transport.run(sample_command(inventory, host.name, run_id, samples, interval_s, nonblocking=nonblocking,
                                              keep=kept.name if kept and not kept.closed else "", ship=ship,
                                              known=earlier))
        node = parse_node_output(result.stdout, host.name, earlier)
        if kept is not None:
            kept.heard(transport, host.name, node.kept if ship else sha if node.tool.startswith("kept") else "", node.asks)
            if nonblocking:
                kept.dumped(host.name, node.dumps)
        if not node.samples and node.uid not in (None, 0) and inventory.uses_container:
            # a user without sudo cannot see the ranks (root in the container): ask in the container
            result = transport.run(sample_command(inventory, host.name, run_id, samples, interval_s, inside=True,
                                                  nonblocking=nonblocking))
            inside = parse_node_output(result.stdout, host.name)
            node = inside if inside.samples else node
        if result.timed_out:
            node = NodeStacks(host.name, node.samples, node.tool, node.problem or "the stack script timed out", node.uid,
                              node.kept, node.asks)
        return HostResult(host.name, HostStatus.OK, data={"stacks": node})

    return action


def node_stacks(results: dict[str, HostResult]) -> dict[str, NodeStacks]:
    """The NodeStacks of each host's result (an unreachable host: none, and why)."""
    return {name: r.data.get("stacks") or NodeStacks(name, problem=r.detail or "no answer") for name, r in results.items()}


def take_stacks(inventory: Inventory, hosts: list[Host], run_id: str, connections: Connections, samples: int = 2,
                interval_s: float = 3.0) -> dict[str, NodeStacks]:
    """Every rank's stack on every host, `samples` times `interval_s` apart; one NodeStacks per host."""
    return node_stacks(for_each_host(hosts, sample_action(inventory, run_id, samples, interval_s), connections))


def merged_samples(nodes: dict[str, NodeStacks]) -> list[list[RankStack]]:
    """The nodes' samples side by side: sample i of every node, as one list of ranks."""
    count = max((len(n.samples) for n in nodes.values()), default=0)
    return [[r for n in nodes.values() if i < len(n.samples) for r in n.samples[i]] for i in range(count)]
