"""What the one run flow (backends/run_flow.py) and `clusterctl stop` need of a run that heals itself
(backends/healing.py): the run lock held across attempts, the latest complete checkpoint, and a
stop asked for while no attempt runs."""
from __future__ import annotations

import contextvars
from contextlib import contextmanager, nullcontext
from typing import Optional

# the run id whose run lock this context already holds (the healing loop, across its attempts)
HELD_RUN_LOCK: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("clusterctl_held_run_lock", default=None)
STOP_REQUESTED = "stop-requested"


class StopRequested(Exception):
    """`clusterctl stop` asked for while the run was between attempts: nothing more is launched."""


def held_or_taken(session, inventory, run_id: str):
    """The cluster's run lock for `run_id`: taken here, unless the healing loop holds it already."""
    from clusterctl.ground.records import run_lock

    if HELD_RUN_LOCK.get() == run_id:
        return nullcontext()
    return session.state.lock(run_lock(inventory.name), "a `clusterctl run`", run_id=run_id)


@contextmanager
def holding(session, inventory, run_id: str):
    """Hold the run lock for every attempt of `run_id` (the attempts' run_job take it no more)."""
    with held_or_taken(session, inventory, run_id):
        token = HELD_RUN_LOCK.set(run_id)
        try:
            yield
        finally:
            HELD_RUN_LOCK.reset(token)


def request_stop(state, run_id: str) -> None:
    """`clusterctl stop` of a running run: said on this machine too, for a controller between attempts."""
    path = state.run_dir(run_id) / STOP_REQUESTED
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("stop\n")


def withdraw_stop(state, run_id: str) -> None:
    """The stop a relaunch made itself (Backend.relaunch stops the attempt it replaces): not a user's."""
    (state.run_dir(run_id) / STOP_REQUESTED).unlink(missing_ok=True)


def stop_requested(session, run_id: str) -> bool:
    return (session.state.run_dir(run_id) / STOP_REQUESTED).exists()


def latest_checkpoint(inventory, connections, topology, renderer) -> Optional[str]:
    """The newest complete checkpoint under `job.checkpoint.dir` as the master of this attempt sees
    it (a shared volume, or the master's own disk), or None: none yet, or no `job.checkpoint`."""
    return checkpoint_on(inventory, connections, topology.master.host, renderer)


def checkpoint_on(inventory, connections, master, renderer) -> Optional[str]:
    """The newest complete checkpoint under `job.checkpoint.dir` as the host `master` sees it."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.heal.replicas import parse_holdings
    from clusterctl.plan.node_files import checkpoints_command

    spec = inventory.job.healing.checkpoint
    if spec is None:
        return None
    command = checkpoints_command(inventory, spec.dir)
    result = for_each_host([master], lambda transport, host: run_commands(transport, host, [command]),
                           connections)[master.name]
    own = parse_holdings(result.stdout)["own"] if result.succeeded else []  # plain names only (the node's rules)
    name = own[-1] if own else None
    if not result.succeeded:
        renderer.message(f"checkpoint: could not list {spec.dir} on {master.name} ({result.detail}); "
                         "starting without one", "yellow")
    return f"{spec.dir.rstrip('/')}/{name}" if name else None


def earlier_attempts(session, run_id: str, attempt: int) -> dict:
    """The `attempts` the record kept so far, for the record an attempt after the first writes."""
    if attempt <= 1:
        return {}
    from clusterctl.ground.records import RunStore

    attempts = RunStore(session.state).read_or_new(run_id).get("attempts")
    return {"attempts": attempts} if attempts else {}
