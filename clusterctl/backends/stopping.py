"""Ending a run on every node, from any terminal (`clusterctl stop`, `Run.stop()`).

1. Every node's run dir gets a `stopped` mark first, before any rank ends: the attached
   `clusterctl run` (its poll) then tells the stop from a crash on whichever node it sees end
   first, and ends saying the run was stopped (exit 1), naming no failure.
2. Then, on each node, what carries the run's marker (torchrun and its ranks; modules/process.py)
   is ended, TERM then KILL; the node agent writes agent.exit and ends within a second of its
   torchrun, which is waited for (10 s); a last scan says whether anything of the run is left.
3. The run record says "stopped": the attached `run` writes it as it ends (waited for, 30 s);
   without one (its controller was killed), this command does.
Exit 0 when it stopped everywhere (or the run had already ended: said, nothing touched), 3 when a
node was unreachable, 1 when something of the run would not end.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Optional

from clusterctl.ground.run_record import RunState
from clusterctl.outcome import Outcome, any_unreachable, hosts_document

AWAIT_CONTROLLER_S = 30.0


def stop_run(app, given_run: Optional[str], given_inventory: Optional[str] = None) -> Outcome:
    """`clusterctl stop` (and `Run.stop()`): the run named (default: the last) ended on every node."""
    from clusterctl.ground import records
    from clusterctl.run import supervision

    run_id, record = records.resolve(app.state, given_run)
    state = records.state_of(record, run_id, app.state.lock_holder)
    planned = [n.get("host") for n in record.get("topology") or []]
    planned += [h for h in record.get("fleet") or [] if h not in planned]  # a detached run that heals itself
    if state in (RunState.RUNNING, RunState.UNKNOWN):
        inventory = app.inventory_of_run(given_inventory, run_id, record, planned)
        # a detached run may have ended on the cluster since: its record learns it first
        record = supervision.refresh_record(app.state, inventory, app.connections, run_id, record,
                                            supervision.masker(inventory))
        state = records.state_of(record, run_id, app.state.lock_holder)
    if state not in (RunState.RUNNING, RunState.UNKNOWN):
        app.renderer.message(f"run {run_id} has already ended ({state}); nothing to stop", "green")
        return Outcome({"ok": True, "run_id": run_id, "state": state, "already_ended": True, "hosts": {}})
    from clusterctl.heal.hooks import request_stop

    request_stop(app.state, run_id)  # a run that heals itself, between attempts, launches no more
    by_name = {h.name: h for h in inventory.hosts}
    return _stop_on_nodes(app, inventory, [by_name[name] for name in planned], run_id, record, state)


def _stop_on_nodes(app, inventory, hosts: list, run_id: str, record: dict, state: str) -> Outcome:
    """Mark every node's run dir stopped, end what carries the run's marker, wait for the node agents."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.plan import wrapper as agent
    from clusterctl.node.layout import node_run_dir
    from clusterctl.models import HostResult, HostStatus
    from clusterctl.modules import process
    from clusterctl.slurm.allocation import allocation_ended

    outputs = record.get("outputs") or inventory.job.outputs
    run_dir = {h.name: node_run_dir(outputs, run_id, h.name) for h in hosts}
    port = inventory.rendezvous.port
    note = f"clusterctl stop from {socket.gethostname()} (pid {os.getpid()}) at {time.strftime('%Y-%m-%d %H:%M:%S')}"
    app.renderer.message(f"stopping run {run_id} on {len(hosts)} node(s)")

    def mark(transport, host) -> HostResult:
        return run_commands(transport, host, [agent.mark_stopped_command(inventory, run_dir[host.name], note)])

    marked = for_each_host(hosts, mark, app.connections)

    job_id = (record.get("slurm") or {}).get("job_id")

    def end(transport, host) -> HostResult:
        kill = process.scan_command(inventory.name, host.name, port, "kill", run_id)
        after = process.scan_command(inventory.name, host.name, port, "list", run_id)
        ended = run_commands(transport, host, [kill])
        if not ended.succeeded:
            return ended
        waited = run_commands(transport, host, [agent.await_exit_command(inventory, run_dir[host.name]), after])
        if not waited.succeeded and job_id and allocation_ended(str(job_id)):
            # the attached `run` saw the stop and gave its allocation back meanwhile, which ended this
            # step: Slurm ends every process of an allocation with it, so nothing of the run is left
            return HostResult(host.name, HostStatus.CHANGED if ended.stdout.strip() else HostStatus.OK,
                              f"ended with Slurm allocation {job_id}", data={"ended": len(process.parse_scan(
                                  ended.stdout)["ours"])})
        if not waited.succeeded:
            return waited
        return _verdict(host.name, process.parse_scan(ended.stdout)["ours"], waited.stdout,
                        process.parse_scan(waited.stdout)["ours"], "no run dir" in marked[host.name].stdout)

    results = {**marked, **for_each_host([h for h in hosts if marked[h.name].succeeded], end, app.connections)}
    results = {h.name: results[h.name] for h in hosts}
    from clusterctl.run.leases import held_for, release

    # its GPU leases (issue 48) go now, not a lease window later; Slurm's nodes hold none, and a relaunch's
    # own stop keeps those its healing loop holds across attempts (backends/healing.py)
    if not job_id and held_for(run_id) is None:
        release(inventory, app.connections, [h.name for h in hosts if results[h.name].succeeded], run_id)
    final = _record_stopped(app, run_id, record, note)
    if job_id and state is RunState.UNKNOWN:  # a Slurm run whose controller is gone: nobody else gives the allocation back
        from clusterctl.slurm.allocation import cancel

        cancel(str(job_id))
    app.renderer.hosts_table(f"stop run {run_id}", results, extra_columns=("ended",))
    document = hosts_document(results, run_id=run_id, state=final)
    if any_unreachable(results):
        app.renderer.message("an unreachable node stops the run's ranks by itself once it stops hearing from the "
                             "controller (its lease, 15 s); `clusterctl stop` again checks", "yellow")
    return Outcome(document, unreachable=any_unreachable(results))


def _verdict(host: str, ended: list, awaited: str, left: list, never_started: bool):
    """One node's result from what the kill scan ended, the node agent's state and what is left."""
    from clusterctl.models import HostResult, HostStatus

    agent_state = next((line.strip() for line in awaited.splitlines()
                        if line.startswith(("exit ", "running", "no agent"))), "")
    data = {"ended": len(ended)}
    if left:
        return HostResult(host, HostStatus.FAILED, f"{len(left)} process(es) of the run still there: "
                          + ", ".join(f"{p['pid']} ({p['command'][:60]})" for p in left[:5]), data=data)
    if agent_state == "running":
        return HostResult(host, HostStatus.FAILED, "the node agent still runs 10 s after the run's ranks ended", data=data)
    if never_started:
        return HostResult(host, HostStatus.OK, "the run has no directory here (it never started on this node)", data=data)
    detail = f"{len(ended)} process(es) ended" if ended else "nothing of the run was running"
    if agent_state.startswith("exit "):
        detail += f"; the node agent ended ({agent_state})"
    return HostResult(host, HostStatus.CHANGED if ended else HostStatus.OK, detail, data=data)


def _record_stopped(app, run_id: str, record: dict, note: str) -> str:
    """The record's state once the run is stopped. The attached `clusterctl run` (holding the run
    lock for this run) writes its own as it ends, which is waited for; a record still "running"
    after that has no controller any more and is written here."""
    from clusterctl.ground import records

    store = records.RunStore(app.state)
    cluster = record.get("cluster")
    from clusterctl.executor import wait_until

    def controller_gone() -> bool:
        holder = app.state.lock_holder(records.run_lock(cluster))
        return not holder or holder.get("run_id") != run_id

    if cluster:
        wait_until(controller_gone, AWAIT_CONTROLLER_S, 0.25)
    try:
        current = store.read(run_id)
    except (OSError, ValueError):
        current = records.RunRecord.from_json(record, run_id)
    if current.state is records.RunState.RUNNING:
        current = store.write(current.with_(state=records.RunState.STOPPED, stopped=True, ended=time.time(),
                                            stopped_by=note))
    return records.state_of(current, run_id, app.state.lock_holder)
