"""`clusterctl report [RUN] [-o FILE]`: one self-contained HTML file of a run (issue 41): its attempts,
nodes and ranks over time, the first failure and its diagnosis, stragglers, the nodes' metrics and
links to each rank's log in the collected bundle (clusterctl/observe/report*.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", help="a run id, or a directory from collect-logs (default: the last run; "
                                               "its ./logs/<run-id> bundle is used when collect-logs made one)")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="the HTML file to write (default: report.html in the bundle, else ./report-<run-id>.html)")


def execute(args, app) -> Outcome:
    from clusterctl.observe.report import write_report

    written = write_report(app.state, args.run, args.output)
    app.renderer.message(f"report of run {written['run_id']}: {written['report']} (open it in a browser; it needs "
                         "no network)", "green")
    if not written["bundle"]:
        app.renderer.message("no collected bundle: `clusterctl collect-logs` first for the rank logs and metrics", "dim")
    return Outcome(written)
