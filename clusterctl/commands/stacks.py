"""`clusterctl stacks [--run ID]`: every rank's Python stack now, grouped by identical stacks.

Saved as `./.clusterctl/runs/<run id>/stacks/stacks-<time>.json` and, per node, into the node's
run dir (where collect-logs fetches it). One py-spy sample per rank (watch/sampler.py); the roll call
(watch/rollcall.py) names the ranks that are elsewhere than the others.
"""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome
from clusterctl.ground import records

SHOWN_FRAMES = 12  # of each group's stack, innermost first; the file has them all


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--run", help="the run id (default: the last run)")


def execute(args, app) -> Outcome:
    from clusterctl.backends.stacks import take_run_stacks
    from clusterctl.watch import rollcall

    run_id, record = records.resolve(app.state, args.run, where="--run")
    inventory = app.inventory(args.inventory or record.get("inventory"))
    nodes, call, saved = take_run_stacks(app, inventory, run_id, record)
    ranks = [r for n in nodes.values() for sample in n.samples[-1:] for r in sample]
    groups = rollcall.group_by_stack([r for r in ranks if r.frames])
    _show(app, run_id, groups, call, nodes, str(saved))
    problems = {h: n.problem for h, n in nodes.items() if n.problem}
    document = {
        "ok": bool(groups), "run_id": run_id, "saved": str(saved), "evidence": call.evidence() if groups else None,
        "groups": [{"ranks": [{"host": r.host, "rank": r.rank, "pid": r.pid} for r in members],
                    "stack": [str(f) for f in stack]} for stack, members in groups],
        "roll_call": call.to_json(), "problems": problems,
    }
    if not groups:
        document["error"] = f"no rank of run {run_id} could be read" + (
            f" ({'; '.join(f'{h}: {p}' for h, p in problems.items())})" if problems else "")
    unreachable = any("unreachable" in p.lower() or "could not connect" in p.lower() for p in problems.values())
    return Outcome(document, unreachable=unreachable and not groups)


def _show(app, run_id: str, groups, call, nodes, saved: str) -> None:
    from clusterctl.watch.rollcall import describe_ranks

    renderer = app.renderer
    for stack, members in groups:
        renderer.message(f"{describe_ranks(members)} ({len(members)} rank{'s' if len(members) > 1 else ''}):", "bold")
        for frame in stack[:SHOWN_FRAMES]:
            renderer.message(f"    {frame}")
        if len(stack) > SHOWN_FRAMES:
            renderer.message(f"    ... {len(stack) - SHOWN_FRAMES} more frames (in the saved file)", "dim")
    for rank in call.failed:
        renderer.message(f"rank {rank.rank} on {rank.host}: no stack ({rank.error})", "yellow")
    for host, node in nodes.items():
        if node.problem:
            renderer.message(f"{host}: {node.problem}", "yellow")
    if call.missing:
        renderer.message(f"not found on any node: rank(s) {', '.join(map(str, call.missing))}", "yellow")
    if groups:
        renderer.message(f"roll call: {call.evidence()}", "bold")
        renderer.message(f"saved: {saved}", "dim")
    else:
        renderer.error(f"no rank of run {run_id} could be read (has it ended? `clusterctl status`)")

