"""What the controller hands the node sampler (node/node_metrics.py): the program itself, shipped with
the run's files, and the wrapper's arguments that start it (plan/wrapper.py); where its file lands."""
from __future__ import annotations

from pathlib import Path

from clusterctl.models import Inventory
from clusterctl.node import program

SAMPLER = "node_metrics.py"
_SOURCE = program(SAMPLER)


def sampler_args(inventory: Inventory) -> tuple[str, str, str]:
    """(python, every_s, interfaces) for the ranks' wrapper; every_s "" when `job.metrics_every` is 0.
    The interfaces are the job's NCCL_SOCKET_IFNAME where it names them (the job network's), else all."""
    every = inventory.job.metrics_every
    interfaces = next((e.value for e in inventory.job.env if e.name == "NCCL_SOCKET_IFNAME" and not e.is_secret), "")
    return inventory.job.python, (f"{every:g}" if every > 0 else ""), interfaces


def shipped(inventory: Inventory) -> dict[str, bytes]:
    """{file name: bytes} the run ships to its nodes' `.files` for the sampler ({} when it is off)."""
    return {SAMPLER: _SOURCE.read_bytes()} if inventory.job.metrics_every > 0 else {}


def bundle_path(dest: Path, run_id: str, host: str) -> Path:
    """Where collect-logs puts a node's metrics.jsonl: beside its other run-dir files, under the node's
    fetched outputs (collect/gather.py's layout)."""
    from clusterctl.node import layout

    return Path(dest) / layout.bundle_run_dir(run_id, host) / layout.METRICS
