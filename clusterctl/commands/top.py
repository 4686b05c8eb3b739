"""`clusterctl top [RUN] [--once] [--every S]`: every node and GPU of a running run (attached or
detached), refreshed every few seconds until the run ends or Ctrl-C: CPU, memory and network per node;
utilisation, memory, power, temperature, SM clock and throttle reasons per GPU, with the rank on it and
its last log line, and the straggler the run's watch names (the record's `stragglers`, kept up to date
by the attached watch and, detached, by the supervisor) in the title while it is late.
One round trip per node a refresh (backends/observing.py). `--once`: one frame;
`--json`: `{"ok", "run_id", "state", "nodes": [{"host", "sample", "exit_code", "error", "ranks"}]}`
(the sample as the node's metrics.jsonl has it, docs/metrics.md)."""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("run", nargs="?", help="the run id (default: the last run; `clusterctl status` lists them)")
    parser.add_argument("--once", action="store_true", help="one frame, then exit")
    parser.add_argument("--every", type=_seconds, default=3.0, metavar="S", help="seconds between refreshes (default 3)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.5 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"not a number of seconds from 0.5 to 3600: {text!r}")
    return value


def late(record: dict) -> str:
    """` · straggler node2 r3: +0.41 s per step (2.1x the median)` for each rank named and not yet caught up."""
    said = []
    for item in record.get("stragglers") or ():
        if not isinstance(item, dict) or item.get("until") is not None or not isinstance(item.get("host"), str):
            continue
        lag = item.get("lag_s")
        how = f"+{lag:.2f} s per step" if isinstance(lag, (int, float)) else \
            f"+{item.get('lag_share', 0) or 0:.0%} of each step" if isinstance(item.get("lag_share"), (int, float)) else "late"
        ratio = f" ({item['ratio']:.1f}x the median)" if isinstance(item.get("ratio"), (int, float)) else ""
        said.append(f" · straggler {item.get('host')} r{item.get('rank')}: {how}{ratio}")
    return "".join(said[-2:])


def execute(args, app) -> Outcome:
    from clusterctl.backends.observing import watch
    from clusterctl.observe.top import COLUMNS, rows

    def show(seen) -> None:
        title = f"top {seen.run_id} ({seen.state})" + late(seen.record)
        app.renderer.live_table(title, COLUMNS, rows(list(seen.views)), live=not args.once)

    seen = watch(app, args.run, args.inventory, args.every, show, once=args.once or args.json)
    app.renderer.stop_live()
    unread = [v for v in seen.views if v.error]
    return Outcome(seen.document(ok=not unread), unreachable=bool(unread))
