"""`clusterctl nccl-test`: plan.py (sizes, bandwidth math, verdicts, pairs; pure) and the
rank-side program it ships, allreduce_bench.py.

The rank-side file is self-contained: torch and the standard library only, no clusterctl
import, because nothing of clusterctl is installed where the ranks run. The controller
reads its bytes with `source(name)` and writes them into the run's directory on every
node (see job.runner.JobRunner's `files`).
"""
from __future__ import annotations

from clusterctl.node import source  # noqa: F401  (the bytes of one node program, as shipped)

ALLREDUCE_BENCH = "allreduce_bench.py"
