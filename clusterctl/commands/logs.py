"""`clusterctl logs [RUN] [--node N] [--rank R] [--tail K] [--follow]`: a run's output, read from
the nodes, running or ended.

Lines print on stdout as the live log of `run` writes them, `[node2 r3] text` (torchrun's own:
`[node2] text`), terminal-safe, secrets masked; node by node, each file in turn (the files carry no
times to interleave them by). `--follow` streams until the run ends on those nodes (agent.exit) or
Ctrl-C. `--json`: `{"ok", "run_id", "lines": [{"host", "rank", "stream", "text"}], "hosts"}`.
"""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome
from clusterctl.errors import UsageError
from clusterctl.outcome import any_unreachable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("run", nargs="?", help="the run id (default: the last run; `clusterctl status` lists them)")
    parser.add_argument("--node", metavar="N", help="only this node's ranks and torchrun's own lines")
    parser.add_argument("--rank", type=_count, metavar="R", help="only this global rank's stdout and stderr")
    parser.add_argument("--tail", type=_count, metavar="K", help="only the last K lines of each file")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="keep streaming until the run ends on those nodes (or Ctrl-C)")


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise argparse.ArgumentTypeError(f"not a whole number (0 or more): {text!r}")
    return int(text)


def execute(args, app) -> Outcome:
    from clusterctl.backends.reading import read_run_logs

    if args.follow and args.json:
        raise UsageError("--follow streams lines as they come; --json prints one document at the end",
                         where="--follow", fix="leave out one of them (`logs --json --tail K` for the latest lines)")
    collected: list = []

    def show(lines) -> None:
        for line in lines:
            if args.json:
                collected.append(line.to_json())
            else:
                app.renderer.log_line(line.prefix, line.text, line.stream)

    run_id, results = read_run_logs(app, args.run, args.inventory, show, args.node, args.rank, args.tail, args.follow)
    for name, result in results.items():
        if not result.succeeded:
            app.renderer.message(f"{name}: {result.detail}", "yellow")
    document = {"ok": all(r.succeeded for r in results.values()), "run_id": run_id,
                "hosts": {n: {"status": r.status.value, "detail": r.detail} for n, r in results.items()}}
    if args.json:
        document["lines"] = collected
    return Outcome(document, unreachable=any_unreachable(results))
