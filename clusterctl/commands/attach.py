"""`clusterctl attach [RUN]`: back to the live log of a run that goes on without its `clusterctl run`
(started with `run --detach`, or whose terminal hung up).

Shows the last `--tail` lines of every rank, then follows them as `logs -f` does, until the run ends
on every node; then the run's end as its supervisor saw it (job/supervision.py), the first failure
named and diagnosed, and the run's exit code (0 succeeded, 1 failed or stopped). Ctrl-C detaches
again: the run goes on (`clusterctl stop RUN` ends it). A run that already ended prints its end.
"""
from __future__ import annotations

import argparse
import time

from clusterctl.app import add_cluster_options
from clusterctl.cli import Outcome

FINISH_S = 40.0  # after the nodes' files end: the supervisor's last word (it settles, then drains)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("run", nargs="?", help="the run id (default: the last run; `clusterctl status` lists them)")
    parser.add_argument("--tail", type=int, default=10, metavar="K",
                        help="lines of each rank's output shown from before attaching (default 10)")


def execute(args, app) -> Outcome:
    from clusterctl.commands import run_inventory
    from clusterctl.commands.logs import read_logs
    from clusterctl.executor import Event
    from clusterctl.job import logs, records, supervision
    from clusterctl.job.livelog import LiveLog, LiveLogEvents, RankFilter

    run_id, record = records.resolve(app.state, args.run)
    topology = record.get("topology") or []
    inventory = run_inventory(app, args.inventory, run_id, record, [n.get("host") for n in topology])
    mask = supervision.masker(inventory)
    record = supervision.refresh_record(app.state, inventory, app.connections, run_id, record, mask)
    if records.state_of(record, run_id, app.state.lock_holder) == "running":
        app.renderer.message(f"attached to run {run_id}: Ctrl-C detaches (the run goes on; "
                             f"`clusterctl stop {run_id}` ends it)", "dim")

        # the lines pass through the live log of `run`: repeats across ranks shown once, with a count
        live = LiveLogEvents(LiveLog(RankFilter()), app.renderer.on_event, time.monotonic)

        def show(lines) -> None:
            for line in lines:
                live.on_event(Event("line", line.host, line.text, {"prefix": line.prefix, "stream": line.stream,
                                                                   "rank": line.rank}))

        try:
            try:
                read_logs(app, inventory, run_id, record, logs.select(topology), show, max(0, args.tail), follow=True)
            finally:
                live.close()
            deadline = time.monotonic() + FINISH_S
            while records.state_of(record, run_id, app.state.lock_holder) == "running" and time.monotonic() < deadline:
                time.sleep(1.0)
                record = supervision.refresh_record(app.state, inventory, app.connections, run_id, record, mask)
        except KeyboardInterrupt:
            app.renderer.message(f"detached; run {run_id} goes on (`clusterctl attach {run_id}` again, "
                                 f"`clusterctl stop {run_id}` to end it)", "yellow")
            return Outcome({"ok": True, "run_id": run_id, "state": "running", "detached": True})
    state = records.state_of(record, run_id, app.state.lock_holder)
    if state == "running":
        app.renderer.message(f"run {run_id}: every node's output ended, but its supervisor has not finished; "
                             "`clusterctl status` asks again", "yellow")
        return Outcome({"ok": False, "run_id": run_id, "state": state, "exit_code": None})
    if isinstance(record.get("nodes"), dict) and record.get("exit_code") is not None:
        app.renderer.run_summary(record)
    document = {"ok": record.get("exit_code") == 0, "run_id": run_id, "state": state,
                "exit_code": record.get("exit_code")}
    if record.get("first_failure"):
        document["first_failure"] = record["first_failure"]
    return Outcome(document)
