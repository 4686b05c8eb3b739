"""Back to the live log of a run that goes on without its `clusterctl run` (`clusterctl attach`)."""
from __future__ import annotations

import time
from typing import Optional

from clusterctl.ground.run_record import RunState
from clusterctl.outcome import Outcome

FINISH_S = 40.0  # after the nodes' files end: the supervisor's last word (it settles, then drains)


def attach(app, given_run: Optional[str], given_inventory: Optional[str], tail: int) -> Outcome:
    """`clusterctl attach`: the live log of a run that goes on, until it ends on every node; its end."""
    from clusterctl.backends.reading import read_logs
    from clusterctl.executor import Event, ticks
    from clusterctl.watch import logs
    from clusterctl.ground import records
    from clusterctl.run import supervision
    from clusterctl.watch.livelog import LiveLog, LiveLogEvents, RankFilter

    run_id, record = records.resolve(app.state, given_run)
    topology = record.get("topology") or []
    inventory = app.inventory_of_run(given_inventory, run_id, record, [n.get("host") for n in topology])
    mask = supervision.masker(inventory)
    record = supervision.refresh_record(app.state, inventory, app.connections, run_id, record, mask)
    if records.state_of(record, run_id, app.state.lock_holder) is RunState.RUNNING:
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
                read_logs(app, inventory, run_id, record, logs.select(topology), show, max(0, tail), follow=True)
            finally:
                live.close()
            for _ in ticks(FINISH_S, 1.0):
                if records.state_of(record, run_id, app.state.lock_holder) is not RunState.RUNNING:
                    break
                record = supervision.refresh_record(app.state, inventory, app.connections, run_id, record, mask)
        except KeyboardInterrupt:
            app.renderer.message(f"detached; run {run_id} goes on (`clusterctl attach {run_id}` again, "
                                 f"`clusterctl stop {run_id}` to end it)", "yellow")
            return Outcome({"ok": True, "run_id": run_id, "state": RunState.RUNNING, "detached": True})
    state = records.state_of(record, run_id, app.state.lock_holder)
    if state is RunState.RUNNING:
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
