"""Where the run flows meet the notifier (issue 41): around a whole run (`notified`: the end, the
failure, hosts quarantined by it), at a relaunch (backends/healing.py), when a straggler is named
(backends/run_flow.py) and at a detached run's end, learned by the next `status`/`attach`/`stop`
(run/supervision.refresh_record). Each hook does nothing without a `notify:` in the inventory.

The notifier of the run in progress is a context variable set by `notified`, read by the hooks on
the controller's main thread (the straggler hook captures it there for the watch's own thread)."""
from __future__ import annotations

import contextvars
import time
from typing import Callable, Optional

from clusterctl.ground.masking import masker
from clusterctl.models import Inventory
from clusterctl.observe.messages import message
from clusterctl.observe.notify import Notifier

CURRENT: contextvars.ContextVar[Optional[Notifier]] = contextvars.ContextVar("clusterctl_notifier", default=None)
DETACHED_FLUSH_S = 10.0  # `status` waits at most this for a detached run's end notification


def notifier_for(store, inventory: Inventory) -> Notifier:
    return Notifier(inventory.notify, store.run_dir, masker(inventory))


def notified(session, inventory: Inventory, go):
    """Run `go()` (the whole run, every attempt) with a notifier; then its end (and failure) is sent,
    and each host that the run got quarantined. Returns what `go()` returned."""
    if inventory.notify is None:
        return go()
    notifier = notifier_for(session.state, inventory)
    before, last_before = _quarantined(session, inventory), _last_run(session)
    token = CURRENT.set(notifier)
    try:
        outcome = go()
    finally:
        CURRENT.reset(token)
        run_id = _last_run(session)
        if run_id and run_id != last_before:
            _ended(notifier, _record(session.state, run_id), inventory, session, before)
        notifier.flush()
    return outcome


def _ended(notifier: Notifier, record: dict, inventory: Inventory, session, before: dict) -> None:
    if not record or record.get("detached") and record.get("state") == "running":
        return  # sent when `status`, `attach` or `stop` learns the end from the supervisor
    now = time.time()
    if message("end", record, now).state == "failed":
        notifier.send(message("failure", record, now))
    notifier.send(message("end", record, now))
    for host, reason in _quarantined(session, inventory).items():
        if host not in before:
            notifier.send(message("quarantine", record, now, summary=f"{host} quarantined: {reason}",
                                  detail={"host": host, "reason": reason}))


def ended_detached(store, inventory: Inventory, record: dict) -> None:
    """A detached run's end, as the controller first learns it (refresh_record, once)."""
    if inventory.notify is None:
        return
    notifier = notifier_for(store, inventory)
    now = time.time()
    if message("end", record, now).state == "failed":
        notifier.send(message("failure", record, now))
    notifier.send(message("end", record, now, detail={"learned_by": "the controller, after the run ended"}))
    notifier.flush(DETACHED_FLUSH_S)


def relaunching(session, run_id: str, verdict: str, failure: Optional[dict], attempt: int) -> None:
    """backends/healing.py: attempt `attempt` failed and the run goes on as the next one."""
    notifier = CURRENT.get()
    if notifier is None:
        return
    record = _record(session.state, run_id)
    notifier.send(message("relaunch", record, time.time(), failure=failure,
                          summary=f"run {run_id} attempt {attempt} failed: {verdict}; relaunching",
                          detail={"attempt": attempt, "verdict": verdict}))


def straggler_hook(record: dict) -> Callable[[list], None]:
    """For the straggler watch's `on_change`: each rank named late is sent once (its `since`)."""
    notifier, told = CURRENT.get(), set()
    if notifier is None:
        return lambda found: None

    def on_change(found: list) -> None:
        for entry in found:
            key = (entry.get("host"), entry.get("rank"), entry.get("since"))
            if entry.get("until") is None and key not in told:
                told.add(key)
                notifier.send(message("straggler", record, time.time(), detail=dict(entry), summary=(
                    f"run {record.get('run_id')}: {entry.get('host')} rank {entry.get('rank')} is a straggler: "
                    f"{entry.get('evidence', '')}")[:500]))

    return on_change


def _quarantined(session, inventory: Inventory) -> dict:
    from clusterctl.health.fleet import states_of

    try:
        return dict(states_of(session.state.health_db, inventory)) if session.state.health_db.exists() else {}
    except Exception:  # a record that cannot be read sends no quarantine; the run is not to fail for it
        return {}


def _last_run(session) -> Optional[str]:
    from clusterctl.ground.records import RunStore

    try:
        return RunStore(session.state).last_id()
    except Exception:
        return None


def _record(store, run_id: str) -> dict:
    from clusterctl.ground.records import RunStore

    try:
        return RunStore(store).read(run_id).to_json()
    except (OSError, ValueError):
        return {}
