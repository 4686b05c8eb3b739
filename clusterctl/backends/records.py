"""Where a recorded run stands, asked of its record and, for a run that goes on, of its supervisor on
the cluster (`Backend.describe`, `Run.state`, `Run.wait`)."""
from __future__ import annotations

from typing import Callable, Optional

from clusterctl.backends.base import RunDescription
from clusterctl.ground.run_record import RunState


def describe(session, given_run: Optional[str], backend: str) -> RunDescription:
    """The run's state now: a detached run's record learns its end from the supervisor first."""
    from clusterctl.ground import records
    from clusterctl.run import supervision

    run_id, record = records.resolve(session.state, given_run)
    if record.get("state") == "running" and record.get("detached"):
        inventory = session.inventory_of_run(None, run_id, record)
        record = supervision.refresh_record(session.state, inventory, session.connections, run_id, record,
                                            supervision.masker(inventory))
    return RunDescription(run_id, records.state_of(record, run_id, session.state.lock_holder),
                          record.get("exit_code"), record.get("first_failure"), record.get("backend") or backend)


def wait(session, run_id: str, backend: str, timeout_s: Optional[float], poll_s: float = 2.0) -> RunDescription:
    """`describe` until the run is no longer running, or `timeout_s` passed (then as it stands)."""
    from clusterctl.executor import wait_until

    latest = [describe(session, run_id, backend)]

    def ended() -> bool:
        latest[0] = describe(session, run_id, backend)
        return latest[0].state is not RunState.RUNNING

    if latest[0].state is RunState.RUNNING:
        wait_until(ended, float("inf") if timeout_s is None else timeout_s, poll_s)
    return latest[0]
