"""The controller's one way into a run's files on a node (issue 47): the argv of a `run_files.py`
operation (node/run_files.py: poll, stop's note, logs, top, the supervisor's state, ...), run the one way
every node program of one command runs (node `inline_argv`), `python3 -I -S -c <program>`: the program's text travels in the command itself (never a file the job or
another user could have changed), the layer (node/safe_files.py) and the streaming part
(node/follow_files.py) loaded as modules from that same text. `-I -S`: no environment variable, user
site or working directory of the node changes what runs, and no `site` import (the poll's start costs
a third less). On the host through the bind mount when the outputs are one (as root: sudo), else in the
job's container with the job's python.
"""
from __future__ import annotations

from typing import Optional

from clusterctl.models import Command, Inventory
from clusterctl.node import inline_argv
from clusterctl.plan.container import host_path, in_container

# the operations that import follow_files (`await-exit`: its watch for agent.exit)
STREAMING = frozenset({"follow", "logs", "probe", "tail", "await-exit"})
BELOW_OUTPUTS = 3  # logs/<run id>/<host> (or .files): opened without following a link; above it is job.outputs


def _beside(streaming: bool, healing: bool = False, waits: bool = False, paths: bool = False) -> tuple:
    """The files run_files.py imports: the layer, for streaming operations follow_files.py (a poll
    without it compiles a third less), for `checkpoints` heal_policy.py, for `collective-waits` its reader
    and the logs' marks it writes before its pokes (rank_output.py, which builds the paths with layout.py), the
    ranks' CPU time (rank_procs.py) and the names of a GPU's throttle reasons (node_metrics.py); for `dumps` the
    run's paths (layout.py: the flight recorder's file name)."""
    return ("safe_files", *(("follow_files",) if streaming else ()), *(("heal_policy",) if healing else ()),
            *(("layout",) if waits or paths else ()),
            *(("rank_output", "rank_procs", "node_metrics", "collective_waits") if waits else ()))


def split_run_path(path: str, below: int = BELOW_OUTPUTS) -> tuple[str, str]:
    """(job.outputs, `logs/<run id>/<host>`): the trusted base and the part opened without following links."""
    parts = path.rstrip("/").split("/")
    below = max(1, min(below, len(parts) - 1))
    return "/".join(parts[:-below]) or "/", "/".join(parts[-below:])


def argv(python: str, operation: str, path: str, *args: str) -> tuple[str, ...]:
    base, rel = split_run_path(path)
    return inline_argv(python, _beside(operation in STREAMING, waits=operation == "collective-waits",
                                       paths=operation == "dumps"), "run_files",
                       operation, base, rel, *args)


def command(inventory: Inventory, path: str, operation: str, *args: str, timeout: Optional[float] = 60,
            stdin: Optional[bytes] = None, stdin_open: bool = False, in_container_only: bool = False) -> Command:
    """`operation` on the run path `path` (a node's run dir, or the run's .files), where its files are:
    on the host through the bind mount (the host's python3, as root), else in the container (the job's
    python). `in_container_only`: where the job's own user writes (the env, shipped files), never the host's root."""
    on_host = None if in_container_only else host_path(inventory, path)
    if on_host is not None:
        found = argv("python3", operation, on_host, *args)
    else:
        found = in_container(inventory, argv(inventory.job.python, operation, path, *args),
                             interactive=stdin is not None or stdin_open)
    return Command(found, timeout=timeout, stdin=stdin, stdin_open=stdin_open, privileged=on_host is not None)


def checkpoints_command(inventory: Inventory, directory: str, run_id: str = "") -> Command:
    """The `checkpoints` operation on `job.checkpoint.dir` (`directory`, where the container sees it): its
    complete steps as the nodes' own rules find them (heal_policy.complete_steps, through the layer), and
    with `run_id` the replicas of that run it holds (issue 50); read back by heal/replicas.parse_holdings.
    On the host through the bind mount where the dir is one (as root), else in the container."""
    complete = inventory.job.healing.checkpoint.complete
    on_host = host_path(inventory, directory)

    def operation(python: str, where: str) -> tuple[str, ...]:
        return inline_argv(python, _beside(False, healing=True), "run_files", "checkpoints", where, "", complete, run_id)

    found = operation("python3", on_host) if on_host is not None else in_container(inventory, operation(inventory.job.python,
                                                                                                        directory))
    return Command(found, timeout=30, privileged=on_host is not None)
