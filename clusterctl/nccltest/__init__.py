"""`clusterctl nccl-test`, the pure part: `plan.py` (sizes, bandwidth math, records, verdicts, pairs).

The rank-side program is node/allreduce_bench.py: torch and the standard library only, no
clusterctl import, because nothing of clusterctl is installed where the ranks run. The controller
reads its bytes with `source(name)` and ships them into the run's directory on every node (the
runner's `files`); the flow (connectivity, small sizes, the full sweep, pairs) is
backends/nccl_test.py, since it drives the run flow."""
from __future__ import annotations

from clusterctl.node import source  # noqa: F401  (the bytes of one node program, as shipped)

ALLREDUCE_BENCH = "allreduce_bench.py"
