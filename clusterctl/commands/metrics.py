"""`clusterctl metrics [RUN] --prometheus`: a run's latest numbers in Prometheus' text exposition format
on stdout (every node's and GPU's latest sample, the run's state, attempt and stragglers, the nodes'
health states; observe/prometheus.py names the series), for a textfile collector or a scrape through a
script. Without --prometheus: the table of `top --once` (with --json, its document)."""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.errors import UsageError
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("run", nargs="?", help="the run id (default: the last run; `clusterctl status` lists them)")
    parser.add_argument("--prometheus", action="store_true", help="the text exposition format on stdout")


def execute(args, app) -> Outcome:
    from clusterctl.backends.observing import prometheus_document

    if args.prometheus and args.json:
        raise UsageError("--prometheus prints the exposition format; --json prints one JSON document",
                         where="--prometheus", fix="leave out one of them")
    seen, text = prometheus_document(app, args.run, args.inventory)
    if args.prometheus:
        app.renderer.raw(text)
    else:  # a person asked: the look as `top --once` draws it
        from clusterctl.observe.top import COLUMNS, rows

        app.renderer.live_table(f"metrics {seen.run_id}", COLUMNS, rows(list(seen.views)))
    unread = [v for v in seen.views if v.error]
    return Outcome(seen.document(ok=not unread), unreachable=bool(unread))
