"""The argv of every Slurm command clusterctl runs, built from the inventory's `scheduler:`. Pure.

- `salloc --no-shell`: the allocation, held by the controller for the run and cancelled after it;
- `srun --jobid=J --overlap -w NODE -N1 -n1`: one command on one node of it (slurm/transport.py);
- `scancel`, `squeue`, `scontrol show hostnames`, `sinfo --Node`: the allocation's state and nodes.
Every command reads SLURM_CONF and the SLURM_* input variables of the environment it runs in,
as Slurm's own commands do: clusterctl passes the controller's environment through untouched.
"""
from __future__ import annotations

from typing import Optional

from clusterctl.models import Inventory, SchedulerSpec

JOB_NAME_PREFIX = "clusterctl-"


def job_name(run_id: str) -> str:
    return f"{JOB_NAME_PREFIX}{run_id}"


def node_count(inventory: Inventory) -> int:
    """The nodes to ask for: scheduler.nodes, else the listed hosts, else Slurm's default of one."""
    spec = inventory.scheduler
    if spec is not None and spec.nodes is not None:
        return spec.nodes
    return len(inventory.hosts) or 1


def resource_options(spec: SchedulerSpec, nodes: int, nodelist: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The options salloc and sbatch share: what the allocation is, one task per node."""
    options = [f"--nodes={nodes}", "--ntasks-per-node=1"]
    if spec.partition:
        options.append(f"--partition={spec.partition}")
    if spec.time:
        options.append(f"--time={spec.time}")
    if spec.account:
        options.append(f"--account={spec.account}")
    if spec.gpus_per_node:
        options.append(f"--gpus-per-node={spec.gpus_per_node}")
    if nodelist:
        options.append(f"--nodelist={','.join(nodelist)}")
    return (*options, *spec.extra_args)


def salloc_argv(inventory: Inventory, run_id: str, exclude: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Ask for the allocation; salloc prints "Granted job allocation J" and exits, leaving it held.
    `exclude`: nodes Slurm must not grant (backends/slurm.py: excluded_nodes)."""
    spec = inventory.scheduler
    assert spec is not None
    options = resource_options(spec, node_count(inventory), tuple(h.name for h in inventory.hosts))
    return ("salloc", "--no-shell", f"--job-name={job_name(run_id)}", *one_exclude(options, exclude))


def one_exclude(options: tuple[str, ...], exclude: tuple[str, ...]) -> tuple[str, ...]:
    """`options` with a single `--exclude=`: Slurm honours only the last of several, so the inventory's
    own (`scheduler.extra_args`), the hosts a healing run left out and the quarantined nodes are one list."""
    given = [name for a in options if a.startswith("--exclude=") for name in a.split("=", 1)[1].split(",") if name]
    names = list(dict.fromkeys([*given, *exclude]))
    kept = tuple(a for a in options if not a.startswith("--exclude="))
    return (*kept, *((f"--exclude={','.join(names)}",) if names else ()))


def srun_prefix(job_id: str, node: str) -> tuple[str, ...]:
    """One task on one node of the allocation, alongside whatever else runs there (--overlap: the
    launch, the polls and the log followers of one node are several steps at once). No labels or
    buffering: the output is the command's, byte for byte."""
    return ("srun", f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--quiet",
            "--kill-on-bad-exit=0")


def scancel_argv(job_id: str) -> tuple[str, ...]:
    return ("scancel", job_id)


def squeue_job_argv(job_id: str) -> tuple[str, ...]:
    """The job's state and nodes; no line once Slurm forgot it (MinJobAge after it ended)."""
    return ("squeue", "--noheader", f"--jobs={job_id}", "--states=all", "--format=%T|%N")


def hostnames_argv(nodelist: str) -> tuple[str, ...]:
    return ("scontrol", "show", "hostnames", nodelist)


def node_addresses_argv(nodelist: str) -> tuple[str, ...]:
    return ("sinfo", "--noheader", "--Node", f"--nodes={nodelist}", "--format=%N|%o|%n|%T")


def parse_job_state(stdout: str) -> Optional[tuple[str, str]]:
    """squeue_job_argv's output -> (state, nodelist), or None when the job is not listed."""
    for line in stdout.splitlines():
        state, sep, nodelist = line.strip().partition("|")
        if sep and state:
            return state.lower(), nodelist.strip()
    return None
