"""Get, describe and give back a Slurm allocation; the checks before asking for one.

The only module that runs Slurm's own commands (sinfo, squeue, salloc, scancel, scontrol), on
this machine, with its environment as it is (SLURM_CONF and the rest are honoured). Failures
come back as values (CheckResults, None) or as one ClusterctlError with what, where and a fix.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Callable

from clusterctl.errors import StateError, UsageError
from clusterctl.executor import ticks
from clusterctl.models import CheckResult, CheckStatus, Host, Inventory
from clusterctl.slurm import partition, submit

GRANT_TIMEOUT_S = None  # salloc waits for the scheduler as long as the queue takes; Ctrl-C gives up
CANCEL_WAIT_S = 15.0


@dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: tuple[tuple[str, str], ...]  # (Slurm node name, address), in allocation order: the first is the master

    def hosts(self, template: Inventory) -> tuple[Host, ...]:
        """The allocation's nodes as inventory hosts (the inventory's ssh settings, for what goes over SSH)."""
        listed = {h.name: h for h in template.hosts}
        return tuple(listed.get(name) or Host(name=name, address=address, ssh=template.ssh)
                     for name, address in self.nodes)


def slurm(argv: tuple[str, ...], timeout: float = 30.0) -> subprocess.CompletedProcess:
    """One Slurm command here; a missing binary or a timeout is a result (exit 127 / 124), not an exception."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]} did not answer in {timeout:g}s")


# --------------------------------------------------------------------------- before submitting


def presubmit_checks(inventory: Inventory) -> list[CheckResult]:
    """sinfo and squeue, judged (slurm/partition.py); a Slurm that does not answer is one FAIL."""
    info = slurm(partition.SINFO_ARGV)
    if info.returncode != 0:
        where = os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
        fix = ("install Slurm's client commands (Debian: slurm-client) on this machine" if info.returncode == 127
               else f"check that slurmctld runs and that {where} (SLURM_CONF) is this cluster's")
        return [CheckResult(None, "slurm.partition", CheckStatus.FAIL,
                            f"`sinfo` failed: {(info.stderr or info.stdout).strip()[:300]}", fix)]
    queue = slurm(partition.SQUEUE_ARGV)
    jobs = partition.parse_squeue(queue.stdout) if queue.returncode == 0 else ()
    return partition.presubmit_checks(inventory.scheduler, submit.node_count(inventory),
                                      partition.parse_sinfo(info.stdout), jobs)


def queued_jobs() -> tuple[partition.QueuedJob, ...]:
    """clusterctl's jobs (named clusterctl-*) that Slurm lists; none when squeue does not answer."""
    done = slurm(partition.SQUEUE_ARGV)
    jobs = partition.parse_squeue(done.stdout) if done.returncode == 0 else ()
    return tuple(j for j in jobs if j.name.startswith(submit.JOB_NAME_PREFIX))


def allocation_ended(job_id: str) -> bool:
    """Whether Slurm no longer holds `job_id` (gone from the queue, or completing: its steps are being
    ended); False when squeue does not answer (nothing known)."""
    done = slurm(partition.SQUEUE_ARGV)
    if done.returncode != 0:
        return False
    job = next((j for j in partition.parse_squeue(done.stdout) if j.job_id == str(job_id)), None)
    return job is None or job.state.upper() in ("CG", "COMPLETING", "CD", "COMPLETED", "CA", "CANCELLED")


def refuse_unless_ready(inventory: Inventory, checks: list[CheckResult]) -> None:
    """The first failed check as the one error said before anything is submitted."""
    failed = [c for c in checks if c.status is CheckStatus.FAIL]
    if failed:
        where = f"scheduler.{failed[0].check.split('.')[-1]}"
        if inventory.source:
            where += f" in {inventory.source}"
        raise UsageError(failed[0].detail, where=where, fix=failed[0].fix)


# --------------------------------------------------------------------------- the allocation


def allocate(inventory: Inventory, run_id: str, on_note: Callable[[str], None],
             exclude: tuple[str, ...] = ()) -> Allocation:
    """salloc --no-shell, waiting for the grant (each line of salloc's is a note: "queued and
    waiting for resources"). Ctrl-C while it waits: salloc withdraws the request, and the job id,
    once known, is cancelled too, so nothing stays queued."""
    argv = submit.salloc_argv(inventory, run_id, exclude)
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    except FileNotFoundError:
        raise UsageError("salloc is not installed on this machine", where="scheduler",
                         fix="run clusterctl where Slurm's client commands are (a login node)") from None
    lines: list[str] = []
    job_id = None
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            on_note(line.strip())
            job_id = job_id or partition.parse_job_id(line)
        code = proc.wait()
    except BaseException:
        proc.terminate()
        proc.wait(10)
        if job_id:
            cancel(job_id)
        raise
    granted = partition.parse_job_id("\n".join(lines)) if any("Granted" in line for line in lines) else None
    if code != 0 or granted is None:
        if job_id:
            cancel(job_id)
        raise UsageError(f"Slurm refused the allocation: {' / '.join(lines)[-400:] or f'salloc exited {code}'}",
                         where=" ".join(argv), fix=refusal_fix(lines))
    try:
        return Allocation(granted, nodes_of(granted))
    except BaseException:
        cancel(granted)
        raise


def nodes_of(job_id: str) -> tuple[tuple[str, str], ...]:
    """The allocation's nodes in Slurm's order (the first is the master) with their addresses."""
    state = submit.parse_job_state(slurm(submit.squeue_job_argv(job_id)).stdout)
    if state is None or not state[1]:
        raise StateError(f"Slurm does not list the nodes of job {job_id}", where=f"job {job_id}",
                         fix="see `squeue -j` and `scontrol show job`; the job may have been cancelled")
    names = [n.strip() for n in slurm(submit.hostnames_argv(state[1])).stdout.splitlines() if n.strip()]
    addresses = partition.parse_node_addresses(slurm(submit.node_addresses_argv(state[1])).stdout)
    return tuple((name, addresses.get(name, name)) for name in names)


def cancel(job_id: str, wait_s: float = CANCEL_WAIT_S) -> bool:
    """scancel, then wait until Slurm says the job is no longer pending or running. True when it is gone."""
    slurm(submit.scancel_argv(job_id))
    for _left in ticks(wait_s, 0.25):
        state = submit.parse_job_state(slurm(submit.squeue_job_argv(job_id)).stdout)
        if state is None or state[0] not in ("pending", "running", "configuring", "completing", "suspended"):
            return True
    return False


REFUSALS = ("slurm_request_invalid", "insufficient_resources")  # the diagnosis' causes of a refused request


def refusal_fix(lines: list[str]) -> str:
    """What to change, from the diagnosis of salloc's own words (a GRES form the site does not take, a partition
    it does not know, more than it has); Slurm's message alone when the diagnosis names neither."""
    from clusterctl.diagnose import diagnose_text

    findings = diagnose_text("\n".join(lines))
    if findings and findings[0].cause in REFUSALS:
        return f"{findings[0].cause}: {findings[0].fix}"
    return "see Slurm's message; `clusterctl check` runs the same checks"
