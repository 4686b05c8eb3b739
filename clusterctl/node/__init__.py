"""Everything that runs on a node, as its own process: standard library only (torch too for the
rank-side benchmark), because nothing of clusterctl is installed where the ranks run.

The controller ships these files by name into a run's directory on every node (`program(name)`
reads them; each file keeps the name it has on the node, which older run dirs and the node-side
scripts use too) and imports them where it needs their contracts. Nothing here imports anything
outside `clusterctl/node/`; the programs shipped together (the agent with its healer and health
watch) import each other as files beside each other on the node.

- `node_agent.py`: the part of a run that lives on the cluster when no clusterctl watches it (`run
  --detach`, a hang-up): a supervisor on the master node and a keeper per node, talking signed HTTP on
  the cluster network, holding the leases, failing fast, ending with the run.
- `node_healing.py` (beside the agent): a detached run that heals itself; `node_health.py` (beside
  the agent): the keepers' passive health watch.
- `node_metrics.py`: the metrics sampler beside the ranks; `node_mpi_gate.py`: mpirun's authenticated
  stand-in for SSH; `node_archive.py`: collect-logs' archiver; `allreduce_bench.py`: nccl-test's ranks.
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def program(name: str) -> Path:
    """The file of a node program (`node_agent.py`, ...), as the controller ships it."""
    return HERE / name


def source(name: str) -> bytes:
    """The bytes of a node program, as shipped to the nodes."""
    return program(name).read_bytes()
