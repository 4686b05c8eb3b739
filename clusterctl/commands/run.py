"""`clusterctl run PROMPT_FILE`: plan, launch torchrun on every node, stream, fail fast, record
(backends/run_flow.py, on the backend the inventory chooses)."""
from __future__ import annotations

import argparse
from pathlib import Path

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("prompt_file", type=Path, help="its text becomes {prompt} in job.args, byte for byte")
    parser.add_argument("--plan", action="store_true", help="print the topology and per-node commands; launch nothing")
    parser.add_argument("--dry-run", dest="plan", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--include-quarantined", action="store_true",
                        help="plan the hosts the health record quarantined too (`clusterctl health`)")
    parser.add_argument("--strict", action="store_true",
                        help="fail instead of shrinking nproc_per_node to fit world_size_divides")
    parser.add_argument("--timeout", type=float, default=None, help="stop the job after this many seconds")
    parser.add_argument("--stall-timeout", type=_seconds, default=None, metavar="S",
                        help="seconds without output before every rank's stack is taken; stacks that do not move "
                             "stop the run and name the rank elsewhere (default: job.stall_timeout, 900; 0: off)")
    parser.add_argument("--no-straggler-watch", dest="straggler_watch", action="store_false",
                        help="do not sample the ranks to name one the others wait for (a straggler); by default "
                             "every rank is sampled with py-spy every second, without pausing it")
    parser.add_argument("-d", "--detach", action="store_true",
                        help="return once every rank has started, printing the run id; the run goes on, watched "
                             "on the cluster (`clusterctl attach`, `logs -f`, `stop`, `status`)")
    parser.add_argument("--wait", action="store_true", help="queue (in arrival order) for GPUs another run holds "
                                                           "instead of being refused; Ctrl-C leaves the queue")
    parser.add_argument("--ranks", type=_ranks, default=(), metavar="LIST",
                        help="show only these global ranks' lines in the live log, e.g. 0,8 or 0-3,8 (the files on "
                             "the nodes, the run record and the diagnosis keep every rank)")
    parser.add_argument("--local-ranks", "--local-ranks-filter", dest="local_ranks", type=_ranks, default=(),
                        metavar="LIST", help="show only these local ranks of every node in the live log, like "
                                             "torchrun's --local-ranks-filter (with --ranks: a rank either selects shows)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds (0 or more): {text!r}")
    return value


def _ranks(text: str):
    from clusterctl.watch.livelog import parse_ranks

    try:
        return parse_ranks(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def execute(args, app) -> Outcome:
    from clusterctl.backends import RunRequest, backend_for
    from clusterctl.plan.prompt import run_prompt
    prompt, inventory = run_prompt(app.inventory, args.prompt_file)
    (backend := backend_for(app, inventory)).reach_soon(inventory)  # connecting while the rest imports and plans
    from clusterctl.backends.healing import run_healing
    from clusterctl.backends.run_flow import LiveOptions
    request = RunRequest(prompt, strict=args.strict, timeout_s=args.timeout, stall_timeout_s=args.stall_timeout,
                         detach=args.detach, straggler_watch=args.straggler_watch, wait=args.wait)
    live = LiveOptions(getattr(args, "ranks", ()) or (), getattr(args, "local_ranks", ()) or ())
    return run_healing(app, backend, inventory, request, live, plan_only=args.plan)
