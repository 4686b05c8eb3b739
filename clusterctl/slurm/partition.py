"""What a partition offers (sinfo), what is queued (squeue), and the checks made before submitting.

Pure: argv tuples, parsers of the outputs captured in tests/fixtures/slurm/ (slurm-wlm 22.05.8),
and verdicts as `CheckResult`s. The checks exist because Slurm does not refuse what can never
run soon: `salloc -N5` on a 2-node partition, or a time over the partition's MaxTime, is queued
and pends ("Requested partition configuration not available now") until someone cancels it, and
sinfo says nothing at all (exit 0) about a partition that does not exist.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from clusterctl.models import CheckResult, CheckStatus, SchedulerSpec
from clusterctl.inventory import timelimit

SINFO_ARGV = ("sinfo", "--noheader", "--format=%P|%a|%l|%D|%T")
SQUEUE_ARGV = ("squeue", "--noheader", "--format=%i|%j|%T|%P|%D|%l|%M|%N|%r")
# Node states (sinfo %T, lower case) in which a node takes no new job.
UNUSABLE = ("down", "drained", "draining", "drain", "fail", "failing", "maint", "inval", "future", "unknown",
            "reboot_issued", "reboot_requested", "powered_down", "powering_down", "power_down", "not_responding")
# sinfo appends a flag to a state: `*` not responding, `~` powered off, `#` powering up, `!` pending power
# down, `%` powering down, `$` maintenance reservation, `@` pending reboot, `^` rebooting, `-` planned.
_FLAG_RE = re.compile(r"[*~#!%$@^\-]+$")


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    available: str  # up | down | drain | inact
    time_limit: Optional[int]  # seconds; None: no limit; -1: sinfo printed something unreadable
    nodes: tuple[tuple[str, int], ...]  # (state, count), as sinfo grouped them

    def count(self, *states: str) -> int:
        return sum(n for state, n in self.nodes if state in states)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.nodes)

    @property
    def usable(self) -> int:
        return sum(n for state, n in self.nodes if state not in UNUSABLE)

    @property
    def idle(self) -> int:
        return self.count("idle")


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    name: str
    state: str
    partition: str
    nodes: int
    time_limit: str
    elapsed: str
    nodelist: str
    reason: str


def node_state(word: str) -> str:
    """`idle*` -> not_responding, `mixed+cloud` -> mixed, `DRAINED` -> drained."""
    base = word.strip().lower().split("+")[0]
    if base.endswith("*"):
        return "not_responding"
    return _FLAG_RE.sub("", base) or "unknown"


def parse_sinfo(text: str) -> tuple[Partition, ...]:
    """SINFO_ARGV's output -> partitions in sinfo's order; lines that are not its format are skipped."""
    order: list[str] = []
    fields: dict[str, dict] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5 or not parts[0].strip() or not parts[3].strip().isdigit():
            continue
        raw, available, limit, count, state = (p.strip() for p in parts)
        name = raw.rstrip("*")
        if not name:
            continue
        if name not in fields:
            order.append(name)
            fields[name] = {"default": raw.endswith("*"), "available": available.lower(),
                            "time_limit": _limit(limit), "nodes": {}}
        nodes = fields[name]["nodes"]
        nodes[node_state(state)] = nodes.get(node_state(state), 0) + int(count[:9])
    return tuple(Partition(name, f["default"], f["available"], f["time_limit"], tuple(f["nodes"].items()))
                 for name, f in ((n, fields[n]) for n in order))


def _limit(text: str) -> Optional[int]:
    try:
        return timelimit.seconds(text)
    except timelimit.TimeLimitError:
        return -1


def parse_squeue(text: str) -> tuple[QueuedJob, ...]:
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 9 or not parts[0].strip():
            continue
        job_id, name, state, partition, nodes, limit, elapsed, nodelist, reason = (p.strip() for p in parts)
        jobs.append(QueuedJob(job_id, name, state.lower(), partition, int(nodes[:9]) if nodes.isdigit() else 0,
                              limit, elapsed, nodelist, reason))
    return tuple(jobs)


# --------------------------------------------------------------------------- checks


def presubmit_checks(spec: SchedulerSpec, nodes: int, partitions: tuple[Partition, ...],
                     queue: tuple[QueuedJob, ...]) -> list[CheckResult]:
    """The partition, the node count and the time limit, judged before anything is submitted.
    A FAIL is a job that would never start (or not as asked); a WARN one that waits in the queue."""
    partition = _chosen(spec, partitions)
    if isinstance(partition, CheckResult):
        return [partition]
    results = [CheckResult(None, "slurm.partition", CheckStatus.PASS,
                           f"{partition.name}{' (default)' if partition.default else ''}: {partition.available}, "
                           f"{partition.total} node(s), time limit {timelimit.text(partition.time_limit)}")]
    if partition.available != "up":
        results[0] = CheckResult(None, "slurm.partition", CheckStatus.FAIL,
                                 f"partition {partition.name} is {partition.available}: it starts no job",
                                 "ask the cluster's admins, or choose another partition (scheduler.partition)")
    results.append(_nodes_check(partition, nodes, queue))
    results.append(_time_check(spec, partition))
    return results


def _chosen(spec: SchedulerSpec, partitions: tuple[Partition, ...]):
    names = [p.name for p in partitions]
    listed = ", ".join(names) or "none"
    if spec.partition is None:
        default = next((p for p in partitions if p.default), None)
        if default is None:
            return CheckResult(None, "slurm.partition", CheckStatus.FAIL,
                               f"no partition is asked for and this cluster has no default one (partitions: {listed})",
                               "set scheduler.partition to one of them")
        return default
    for partition in partitions:
        if partition.name == spec.partition:
            return partition
    return CheckResult(None, "slurm.partition", CheckStatus.FAIL,
                       f"partition {spec.partition} does not exist here (partitions: {listed})",
                       "set scheduler.partition to one that `sinfo` lists (or leave it out for the default)")


def _nodes_check(partition: Partition, nodes: int, queue: tuple[QueuedJob, ...]) -> CheckResult:
    if nodes > partition.usable:
        down = partition.total - partition.usable
        return CheckResult(None, "slurm.nodes", CheckStatus.FAIL,
                           f"{nodes} node(s) asked for; partition {partition.name} has {partition.total}"
                           + (f", {down} of them down or drained" if down else "")
                           + ": Slurm would queue the job and never start it",
                           f"set scheduler.nodes to {partition.usable} or fewer, or choose a larger partition")
    free = partition.idle
    if nodes > free:
        waiting = [j for j in queue if j.partition == partition.name and j.state == "pending"]
        return CheckResult(None, "slurm.nodes", CheckStatus.WARN,
                           f"{nodes} node(s) asked for, {free} idle of {partition.total} in {partition.name} "
                           f"({len(waiting)} job(s) pending there): the job may wait in the queue",
                           "wait, or ask for fewer nodes (scheduler.nodes)")
    return CheckResult(None, "slurm.nodes", CheckStatus.PASS, f"{nodes} node(s) asked for, {free} idle")


def _time_check(spec: SchedulerSpec, partition: Partition) -> CheckResult:
    limit = partition.time_limit
    if spec.time is None:
        return CheckResult(None, "slurm.time", CheckStatus.PASS,
                           f"the partition's default time limit (at most {timelimit.text(limit)})")
    asked = timelimit.seconds(spec.time)
    if limit is not None and limit >= 0 and (asked is None or asked > limit):
        return CheckResult(None, "slurm.time", CheckStatus.FAIL,
                           f"scheduler.time {spec.time} is over partition {partition.name}'s time limit "
                           f"{timelimit.text(limit)}, which is too short: Slurm would queue the job and never start it",
                           f"set scheduler.time to {timelimit.text(limit)} or less, or choose a partition "
                           "with a longer limit")
    return CheckResult(None, "slurm.time", CheckStatus.PASS,
                       f"{spec.time} within {partition.name}'s limit {timelimit.text(limit)}")


# --------------------------------------------------------------------------- the allocation


def parse_job_id(salloc_stderr: str) -> Optional[str]:
    """salloc's "Granted job allocation 12" / "Pending job allocation 12" -> "12"."""
    match = re.search(r"(?:Granted|Pending) job allocation (\d{1,12})\b", salloc_stderr)
    return match.group(1) if match else None


def parse_node_addresses(text: str) -> dict[str, str]:
    """`sinfo --Node --format=%N|%o|%n|%T` -> {node name: address}; a node in several partitions is
    listed once per partition (the same address)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 2 and parts[0] and parts[1] and " " not in parts[1]:
            found.setdefault(parts[0], parts[1])
    return found
