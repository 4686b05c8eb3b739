"""`clusterctl nccl-test`: all-reduce connectivity, small sizes, full sweep; node pairs.

The test runs through the same path as `clusterctl run` (node facts, topology.plan,
JobRunner: one static rendezvous, lease, poll, fail fast, streamed rank logs), with an
inventory copy whose job is the rank-side benchmark, clusterctl/nccltest/
allreduce_bench.py. That file is shipped to every node by the runner (`files`), so the
nodes need nothing of clusterctl, only torch. Rank 0 writes its records to a result
file in its run dir, which is read back after the run; the same records stream live.
Every test is recorded like a run (`.clusterctl/runs/<id>/run.json`), so
`clusterctl collect-logs` and `diagnose` work on a failed one.
"""
from __future__ import annotations

import argparse
from typing import Optional

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome
from clusterctl.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--max-size", default=None, metavar="SIZE",
                        help="largest message, e.g. 1G (default: 1G on GPUs, 64M on CPUs)")
    parser.add_argument("--min-size", default="8", metavar="SIZE", help="smallest message (default 8)")
    parser.add_argument("--iters", type=int, default=20, metavar="N", help="timed all_reduce calls per size (default 20)")
    parser.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed calls before each size (default 5)")
    parser.add_argument("--stage", choices=("connect", "small", "full"), default="full",
                        help="stop after this stage: connect (init + one all_reduce), small (8 B..1 MiB), full")
    parser.add_argument("--pairs", action="store_true",
                        help="test every pair of nodes as its own 2-node job, rank the pairs, name the slowest node")
    parser.add_argument("--connect-timeout", type=float, default=60.0, metavar="S",
                        help="seconds for the ranks to connect; also each collective's timeout (default 60)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S",
                        help="stop a test after this many seconds (default 600)")


def _sizes(args) -> tuple[int, Optional[int]]:
    from clusterctl.nccltest.plan import parse_size

    try:
        low = parse_size(args.min_size)
        high = parse_size(args.max_size) if args.max_size is not None else None
    except ValueError as exc:
        raise UsageError(str(exc), where="--min-size/--max-size", fix="write sizes like 8, 64K, 1M, 1G") from None
    if high is not None and high < low:
        raise UsageError(f"--max-size {args.max_size} is below --min-size {args.min_size}", where="--max-size",
                         fix="give a --max-size at least as large as --min-size")
    if args.iters < 1 or args.warmup < 0:
        raise UsageError("--iters must be >= 1 and --warmup >= 0", where="--iters", fix="e.g. --iters 20 --warmup 5")
    return low, high


def execute(args, app) -> Outcome:
    from clusterctl.backends.nccl_test import NcclTestOptions, run_nccl_test

    sizes = _sizes(args)
    options = NcclTestOptions(args.min_size, args.max_size, args.iters, args.warmup, args.stage, args.pairs,
                              args.connect_timeout, args.timeout)
    return run_nccl_test(app, options, sizes)
