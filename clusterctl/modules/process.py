"""Stale-rank cleanup, scoped exactly by the marker clusterctl sets on what it starts.

Every torchrun agent and rank clusterctl launches carries `CLUSTERCTL_CLUSTER=<inventory
name>` and `CLUSTERCTL_HOST=<host name>` in its environment (inherited by every child).
Cleanup finds processes by those two exact lines of /proc/PID/environ, never by a
`pkill -f` pattern that can match the ssh session running it or other users' work.
Foreign processes holding GPUs or the rendezvous port are reported; killed only with force.
"""
from __future__ import annotations

import re
from typing import Optional

from clusterctl.models import Command, HostResult, HostStatus
from clusterctl.modules.catalog import module
from clusterctl.plan.marker import MARKER_CLUSTER, MARKER_HOST, MARKER_RUN, marker_env  # noqa: F401  (process.*)

# The py-spy a run's nodes keep (watch/pyspy_kept.py) removed, where the sampler's script may have kept it:
# $kept is its directory's name (a pattern for every run of a cluster). Only a directory of the
# script's own user that is not a link goes. Shared by the scan's kills and the run's end.
REMOVE_KEPT = r'''for base in "${TMPDIR:-/tmp}" /var/tmp /dev/shm "$HOME"; do for d in "$base"/$kept; do
  [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ] && rm -rf "$d" && echo "removed $d"
done; done'''

# $1 cluster, $2 host, $3 rendezvous port, $4 mode (list | kill | kill-foreign), $5 run id or "", $6 the
# names (a pattern; with $7's list, their prefix) of the py-spy directories the killed runs kept
# (watch/pyspy_kept.py): removed with them,
# $7 "-" (every marked process) or the run ids whose processes alone count as ours (the runs proven dead,
# node/leases.py: a live run's processes, or those of a run that started since they were judged, are
# neither listed as ours nor killed, and only the listed runs' kept directories go). Prints one line per
# process: "<kind> <pid> <user> <args>", kind in ours|gpu|port (and "removed <dir>"), and
# "runof <pid> <run id>" for every marked process.
_SCAN = r'''
cluster=$1 host=$2 port=$3 mode=$4 run=$5 kept=$6 only=$7
ours=$(grep -lzxF "CLUSTERCTL_CLUSTER=$cluster" /proc/[0-9]*/environ 2>/dev/null \
  | xargs -r grep -lzxF "CLUSTERCTL_HOST=$host" 2>/dev/null)
if [ -n "$run" ] && [ -n "$ours" ]; then ours=$(echo "$ours" | xargs -r grep -lzxF "CLUSTERCTL_RUN_ID=$run" 2>/dev/null); fi
ours=$(echo "$ours" | sed -n 's#^/proc/\([0-9]*\)/environ$#\1#p' | grep -vx "$$" | tr '\n' ' ')
marked=$ours keep=
if [ "$mode" = list ] || [ "$only" != - ]; then  # a kill of every marked process needs no run ids
  for p in $marked; do
    r=$(grep -zm1 '^CLUSTERCTL_RUN_ID=' "/proc/$p/environ" 2>/dev/null | tr -d '\0'); r=${r#CLUSTERCTL_RUN_ID=}
    echo "runof $p $r"
    if [ "$only" = - ]; then keep="$keep $p"
    elif [ -n "$r" ]; then case " $only " in *" $r "*) keep="$keep $p";; esac; fi
  done
  ours=$keep
fi
kepts=$kept
if [ "$only" != - ]; then kepts=; for r in $only; do kepts="$kepts $kept$r"; done; fi
show() { for p in $2; do ps -o user=,args= -p "$p" 2>/dev/null | sed "s#^#$1 $p #"; done; }
show ours "$ours"
foreign=""
if command -v nvidia-smi >/dev/null 2>&1; then
  for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' '); do
    case " $marked " in *" $p "*) ;; *) foreign="$foreign $p"; show gpu "$p";; esac
  done
fi
# `ss -p` reads every process's fds: only when something listens on the port at all
if ss -ltnH "sport = :$port" 2>/dev/null | grep -q .; then
  for p in $(ss -ltnpH "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
    case " $marked " in *" $p "*) ;; *) foreign="$foreign $p"; show port "$p";; esac
  done
fi
if [ "$mode" != list ]; then for kept in $kepts; do
%(remove_kept)s
done; fi
victims=""
[ "$mode" = kill ] && victims="$ours"
[ "$mode" = kill-foreign ] && victims="$ours $foreign"
[ -n "$(echo $victims)" ] || exit 0
kill -TERM $victims 2>/dev/null
i=0; while [ $i -lt 50 ]; do
  alive=""; for p in $victims; do
    state=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -c1)
    [ -n "$state" ] && [ "$state" != Z ] && alive="$alive $p"
  done
  [ -z "$alive" ] && exit 0
  sleep 0.1; i=$((i+1))
done
kill -KILL $alive 2>/dev/null; echo "sigkill$alive"
''' % {"remove_kept": REMOVE_KEPT}


def scan_command(cluster: str, host: str, port: int, mode: str = "list", run_id: str = "",
                 only: Optional[tuple[str, ...]] = None) -> Command:
    """`only`: the run ids whose processes alone are ours here (the runs proven dead: `up`/`down` without
    --force); None: every marked process."""
    if only is not None:  # the names of the listed runs' directories: this prefix and each run id
        kept = kept_pyspy_name(cluster, "")
    else:
        kept = kept_pyspy_name(cluster, run_id) if run_id else kept_pyspy_name(cluster, "") + "*"
    return Command(("sh", "-c", _SCAN, "clusterctl-scan", cluster, host, str(port), mode, run_id, kept,
                    "-" if only is None else " ".join(r for r in only if r)), timeout=60,
                   privileged=True)  # ranks in the container run as root: their /proc environ is root's


def kept_pyspy_name(cluster: str, run_id: str) -> str:
    """The directory a run's nodes keep py-spy in (watch/pyspy_kept.py): one path component, no pattern."""
    return "clusterctl-pyspy." + re.sub(r"[^A-Za-z0-9_-]", "_", cluster) + "." + re.sub(r"[^A-Za-z0-9_-]", "_", run_id)


def runs_of(stdout: str) -> dict[int, str]:
    """pid -> run id of every marked process a scan saw (its "runof" lines)."""
    found = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) in (2, 3) and parts[0] == "runof" and parts[1].isascii() and parts[1].isdigit():
            found[int(parts[1])] = parts[2] if len(parts) == 3 else ""
    return found


def parse_scan(stdout: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {"ours": [], "gpu": [], "port": []}
    for line in stdout.splitlines():
        parts = line.split(None, 3)
        # a pid is ASCII digits (str.isdigit() also takes '²', which int() refuses); other lines are noise
        if len(parts) >= 3 and parts[0] in found and parts[1].isascii() and parts[1].isdigit() and len(parts[1]) < 20:
            found[parts[0]].append({"pid": int(parts[1]), "user": parts[2], "command": parts[3] if len(parts) > 3 else ""})
    return found


@module("process.cleanup")
def cleanup(ctx, force: bool = False, run_id: Optional[str] = None):
    """Kill what earlier clusterctl runs left here, never a live run of anyone (node/leases.py: its lease or
    its run dir's lease still beats); with force, everything marked and the foreign GPU/port holders too,
    logged on the node with who did it (the killed run's `status` says so)."""
    from clusterctl.plan import leasing

    inventory = ctx.inventory
    force = force or bool(ctx.vars.get("force"))
    how = f"clusterctl {ctx.vars.get('flow') or 'up'} --force"
    port = inventory.rendezvous.port

    def action(transport, host) -> HostResult:
        listed = transport.run(scan_command(inventory.name, host.name, port, "list", run_id or ""))
        if listed.exit_code is None:
            return HostResult(host.name, HostStatus.FAILED, "stale-rank scan timed out")
        seen = set(runs_of(listed.stdout).values())  # nothing marked here: no lease to ask about (one round less)
        live, notes = live_runs(transport, inventory, host, seen, force) if seen else ({}, [])
        dead = None if force else tuple(sorted(set(runs_of(listed.stdout).values()) - set(live) - {""}))
        result = transport.run(scan_command(inventory.name, host.name, port, "kill-foreign" if force else "kill",
                                            run_id or "", dead))
        if result.exit_code is None:
            return HostResult(host.name, HostStatus.FAILED, "stale-rank scan timed out")
        found = parse_scan(result.stdout)
        foreign = found["gpu"] + found["port"]
        killed = found["ours"] + (foreign if force else [])
        if force and live:  # said on the node: the owners' `status` names who ended their runs
            transport.run(leasing.lease_command(inventory, host, "forced", operator=leasing.operator(), how=how,
                                                run_ids=sorted(live)))
        left = [] if force else [{"run_id": r, "operator": h.get("operator"), "since": h.get("since")}
                                 for r, h in sorted(live.items())]
        data = {"killed": killed, "foreign": [] if force else foreign, "left_running": left}
        if killed:
            notes.insert(0, f"killed {len(killed)} stale process(es): "
                         + ", ".join(f"{p['pid']} ({p['command'][:60]})" for p in killed))
        notes += [f"ranks of run {r['run_id']} ({r['operator'] or 'operator unknown'}, since "
                  f"{leasing.when(r['since']) if r['since'] else 'before leases'}) left running; `clusterctl stop "
                  f"{r['run_id']}` where it was started, or `{how}` to end them" for r in left]
        if foreign and not force:
            notes.append("foreign processes hold GPUs or the rendezvous port (kept; --force kills them): "
                         + ", ".join(f"{p['pid']} {p['user']} {p['command'][:60]}" for p in foreign))
        status = HostStatus.CHANGED if killed else HostStatus.OK
        return HostResult(host.name, status, "; ".join(notes), data=data)

    return action


def live_runs(transport, inventory, host, run_ids: set, force: bool) -> tuple[dict, list[str]]:
    """{run id: holder} of the runs alive on `host` (node/leases.py: a live lease, or a run dir whose lease
    beats), among `run_ids` (the marked processes' runs) and the leases held there; a node that cannot
    tell spares every run (stale must be proven), said in a note."""
    from clusterctl.plan import leasing

    run_ids = {r for r in run_ids if r}
    answer = leasing.parse(host.name, *_out(transport.run(leasing.lease_command(
        inventory, host, "live", run_ids=sorted(run_ids), window_s=leasing.window_s(inventory)))))
    if answer.ok:
        return dict(answer.document["live"]), []
    if force or not run_ids:
        return {}, [f"{answer.error} ({answer.fix})"] if run_ids else []
    return ({r: {"operator": None, "since": None} for r in run_ids},
            [f"cannot tell live runs from stale ones, so every marked process stays: {answer.error}; {answer.fix}"])


def _out(result) -> tuple[str, str, Optional[int]]:
    return result.stdout, result.stderr, result.exit_code


@module("process.list")
def list_ranks(ctx):
    """Report clusterctl's own processes on the host (for `status`)."""
    command = scan_command(ctx.inventory.name, ctx.host.name, ctx.inventory.rendezvous.port, "list")

    def action(transport, host) -> HostResult:
        found = parse_scan(transport.run(command).stdout)
        return HostResult(host.name, HostStatus.OK, data={"ranks": found["ours"], "foreign": found["gpu"] + found["port"]})

    return action


@module("process.leases")
def list_leases(ctx):
    """The node's GPU leases, waiters and forced ends (node/leases.py), for `status`'s view of the fleet."""
    from clusterctl.plan import leasing

    inventory = ctx.inventory

    def action(transport, host) -> HostResult:
        result = transport.run(leasing.lease_command(inventory, host, "list"))
        answer = leasing.parse(host.name, *_out(result))
        if not answer.ok:
            return HostResult(host.name, HostStatus.OK, f"{answer.error}; {answer.fix}",
                              data={"leases": [], "waiting": [], "ended_by": [], "leases_error": answer.error})
        document = answer.document
        return HostResult(host.name, HostStatus.OK, data={
            "leases": [{k: lease.get(k) for k in ("key", "run_id", "operator", "since", "age_s", "alive", "garbage")
                        if lease.get(k) is not None} for lease in document["leases"]],
            "waiting": [{k: t.get(k) for k in ("run_id", "operator", "keys", "stamp")} for t in document["tickets"]],
            "ended_by": document["ended"]})

    return action
