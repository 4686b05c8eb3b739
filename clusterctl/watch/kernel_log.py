"""What the node's kernel says of a rank killed by SIGKILL (issue 39): a SIGKILL is the OOM killer's
signal, but also an operator's `kill -9`, a scheduler's preemption, a watchdog's. Only the kernel's
own record confirms an OOM kill ("Out of memory: Killed process PID", "oom-kill:..."), so `run` reads
the node's kernel log since the run started before it names the cause: with such a line the cause
is the OOM killer, quoted; without one the first failure says so, and the diagnosis does not call
it an OOM kill with confidence.

dmesg needs root where kernel.dmesg_restrict is set, so it runs privileged (through `become`); a
node whose log cannot be read says so instead of a verdict."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from clusterctl.models import Command

MAX_LINES = 20
NO_RECORD = "no OOM-killer line in the node's kernel log since the run started"
UNREADABLE = "the node's kernel log could not be read (dmesg)"
# the kernel's ring buffer stamps lines with seconds since boot: those before the run are left out
_OOM_SINCE = r'''
since=$1; now=$(date +%s); up=$(cut -d. -f1 /proc/uptime); boot=$((now - up))
out=$(dmesg 2>/dev/null) || { echo "unreadable"; exit 0; }
printf '%s\n' "$out" | grep -E 'Out of memory|oom-kill|Killed process|oom_reaper|Memory cgroup out of memory' |
while IFS= read -r line; do
  ts=${line#\[}; ts=${ts%%]*}; ts=${ts%%.*}; ts=${ts##* }
  case $ts in ''|*[!0-9]*) continue;; esac
  [ $((boot + ts)) -ge "$since" ] && printf '%s\n' "$line"
done | tail -n 20
'''


def oom_lines_command(since: float) -> Command:
    return Command(("sh", "-c", _OOM_SINCE, "oom", str(int(since))), timeout=20, privileged=True)


def read_oom_lines(host, since: float, connections) -> Optional[list[str]]:
    """The node's OOM-killer lines since `since`; None where the kernel log cannot be read."""
    from clusterctl.executor import for_each_host, run_commands

    results = for_each_host([host], lambda transport, h: run_commands(transport, h, [oom_lines_command(since)]),
                            connections)
    result = results.get(host.name)
    if result is None or not result.succeeded or result.stdout.strip() == "unreadable":
        return None
    return [line for line in result.stdout.splitlines() if line.strip()][-MAX_LINES:]


def with_kernel_log(first: dict, lines: Optional[list[str]]) -> dict:
    """`first` (a rank killed by SIGKILL) with what the kernel log shows, and its diagnosis told again:
    an OOM-killer line makes it oom_killed with that line as evidence; none lowers an oom_killed
    guess to what it is, a guess."""
    from clusterctl.diagnose import diagnose_text

    if first.get("signal") != "SIGKILL":
        return first
    if lines is None:
        return {**first, "kernel_log": [UNREADABLE]}
    if not lines:
        return {**first, "kernel_log": [NO_RECORD], "diagnosis": [_unconfirmed(f) for f in first.get("diagnosis") or []]}
    oom = [f for f in diagnose_text("\n".join(lines), host=first.get("host")) if f.cause == "oom_killed"]
    diagnosis = [f for f in first.get("diagnosis") or [] if f.get("cause") != "oom_killed"]
    if oom:
        diagnosis = [replace(oom[0], host=first.get("host"), rank=first.get("rank")).to_json(), *diagnosis]
    return {**first, "kernel_log": lines, "diagnosis": diagnosis[:5]}


def _unconfirmed(finding: dict) -> dict:
    if finding.get("cause") != "oom_killed":
        return finding
    confidence = min(float(finding.get("confidence") or 0.5), 0.4)
    return {**finding, "confidence": confidence,
            "evidence": f"{finding.get('evidence', '')} ({NO_RECORD}: killed by a signal, not confirmed as the OOM killer)"}
