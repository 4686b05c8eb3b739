"""The run of a job, the same for every backend: lock the cluster, reach the nodes (the backend's
`reach`: SSH, or an allocation's srun steps), learn their facts, plan, launch torchrun on every node,
stream, fail fast, and record. What differs between backends is asked of the backend, never branched
on here."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, replace
from typing import Optional
from clusterctl.backends.base import Plan, RunRequest, recorded_hosts
from clusterctl.heal import replicas
from clusterctl.heal.hooks import (StopRequested, earlier_attempts, held_or_taken, latest_checkpoint,
                                               stop_requested)
from clusterctl.errors import StateError, UsageError
from clusterctl.health.fleet import record_run_end
from clusterctl.ground.records import RunStore
from clusterctl.ground.run_record import RunRecord
from clusterctl.outcome import Outcome, any_unreachable, hosts_document
from clusterctl.run.in_progress import ensure_no_run_in_progress


@dataclass(frozen=True)
class LiveOptions:
    """The live log's rank filter (`run --ranks`, `--local-ranks`)."""

    ranks: tuple = ()
    local_ranks: tuple = ()


def run_job(session, backend, inventory, request: RunRequest, live: LiveOptions = LiveOptions(),
            plan_only: bool = False, relaunch_of: Optional[Plan] = None) -> Outcome:
    """`clusterctl run` (and `Cluster.run`): the whole run, or with `plan_only` the plan alone.
    `relaunch_of`: a plan to launch as it is (its run id, its attempt), where it has a layout; else
    the layout is planned anew on the nodes reached, under its run id and attempt."""
    from clusterctl.run.phases import Phases
    from clusterctl.ground.records import run_lock

    inventory = session.plannable(inventory)  # quarantined hosts left out (issue 36)
    phases = Phases()  # run/phases.py: when each phase of the run was reached (`run --json`'s `phases`)
    if plan_only and not backend.plans_on_nodes:
        return _plan_document(session, backend.plan(inventory, request, None))
    backend.refuse(request)
    run_id = (relaunch_of.run_id if relaunch_of is not None else None) or session.state.new_run_id()
    # one run of a cluster at a time: a second is refused naming the first (`clusterctl stop RUN`);
    # a run that heals itself holds the lock across its attempts (backends/healing.py)
    with held_or_taken(session, inventory, run_id), \
            backend.reach(inventory, run_id) as (inventory, connections, scheduled):
        if relaunch_of is not None and relaunch_of.attempt > 1:  # not to meet the last attempt's stop mark
            set_aside(inventory, connections, run_id, relaunch_of.attempt - 1)
        facts, problems, busy, facts_from = backend.facts(inventory, connections)
        phases.reach("probe")
        if problems:
            return not_ready(session, problems)
        plan = _plan(session, backend, inventory, connections, request, run_id, facts, relaunch_of, plan_only)
        leases = None if plan_only or not backend.leases_on_nodes else _take_leases(session, inventory, connections,
                                                                                    plan, request)
        if leases is not None and request.wait:  # what ran when the facts were read may have ended meanwhile
            busy = backend.busy(inventory, connections, ensure_no_run_in_progress(inventory, connections))
        kept = False
        try:
            result = _launch(session, backend, inventory, connections, plan, request, live, plan_only,
                             facts_from, busy, scheduled, phases, leases)
            kept = isinstance(result, Outcome) and bool(result.document.get("detached"))
        finally:
            if leases is not None and not kept:  # a detached run's leases live on with its keepers' beats
                _release(session, leases)  # released already as the run ended (_watch): for a run never launched
    if isinstance(result, Outcome):
        return result
    summary, record, outcome = result
    phases.reach("returned")  # written again: the phases (and on Slurm whether scancel emptied the queue) are known now
    record["phases"], record["phases_cpu"] = phases.to_json(), phases.cpu_json()
    RunStore(session.state).write(RunRecord.from_json(record))
    session.renderer.run_summary(record)
    return _ended(summary, record, outcome)


def _take_leases(session, inventory, connections, plan: Plan, request: RunRequest):
    """The run's GPU leases on every node before any rank starts (run/leases.py): refused naming the
    holder, or with `run --wait` queued for them. An attempt of a run that heals itself (attached): the
    loop holds them across attempts, this attempt's hosts `hold` theirs (None: nothing to release here)."""
    from clusterctl.run import leases

    say, ended = (lambda text: session.renderer.message(text, "yellow")), leases.ended_in(session.state)
    held = leases.held_for(plan.run_id)
    if held is not None:
        held.hold(inventory, connections, leases.wanted(plan.topology), request.wait, say, ended)
        return None
    return leases.take(inventory, connections, plan.run_id, leases.wanted(plan.topology), wait=request.wait,
                       say=say, ended=ended)


def _release(session, leases) -> None:
    """The run's leases released; a node that kept them is said (run/leases.py)."""
    leases.release_saying(lambda line: session.renderer.message(line, "yellow"))


def _plan(session, backend, inventory, connections, request: RunRequest, run_id: str, facts,
          relaunch_of: Optional[Plan], plan_only: bool) -> Plan:
    """What the launch carries out: `relaunch_of` as it is where it was planned for this run; else planned
    here (on its layout where it has one) with the checkpoint the attempt resumes from."""
    if relaunch_of is not None and relaunch_of.launches_as_planned() and relaunch_of.run_id == run_id:
        return relaunch_of
    topology = (relaunch_of.topology if relaunch_of is not None and relaunch_of.topology is not None
                else backend.layout(inventory, request, facts))
    attempt = relaunch_of.attempt if relaunch_of else 1
    restore = None
    if plan_only:
        checkpoint = None
    elif replicas.wanted(inventory, request.detach) and attempt > 1:  # issue 50: the copies of the last attempt
        last = [n for n in RunStore(session.state).read_or_new(run_id).get("topology") or [] if n.get("host")]
        restore = replicas.restore_order(inventory, connections, topology, run_id, [n["host"] for n in last],
                                         session.renderer)
        checkpoint = f"{inventory.job.healing.checkpoint.dir.rstrip('/')}/{restore['step']}" if restore else None
    else:
        checkpoint = latest_checkpoint(inventory, connections, topology, session.renderer)
    planned = backend.plan(inventory, request, run_id, facts, attempt=attempt, checkpoint=checkpoint, topology=topology)
    return replace(planned, restore=restore)


def _launch(session, backend, inventory, connections, plan: Plan, request: RunRequest, live_options: LiveOptions,
            plan_only: bool, facts_from: dict, busy, scheduled, phases=None, leases=None) -> Outcome:
    from clusterctl.watch.livelog import LiveLog, LiveLogEvents
    from clusterctl.run.runner import JobRunner

    topology, run_id = plan.topology, plan.run_id
    ranks = rank_filter(live_options, topology)
    live = LiveLogEvents(LiveLog(ranks), session.renderer.on_event, time.monotonic)
    summary = {**summary_of(inventory, topology, run_id), "facts_from": facts_from}
    reused = sum(1 for where in facts_from.values() if where == "up")
    if reused:
        session.renderer.message(f"facts of {reused} node(s) as `clusterctl up` learned them (same boot, same "
                                 f"container); {len(facts_from) - reused} probed", "dim")
    if scheduled is not None:
        summary["slurm"] = scheduled  # the same dict: its `cancelled` is filled in as the allocation ends
    if plan_only:
        session.renderer.plan(topology, plan.commands())
        return Outcome({"ok": True, **summary, "plan": plan.commands(), "exit_code": None})
    runner = JobRunner(inventory, topology, run_id, request.prompt, connections, live.on_event,
                       timeout_s=request.timeout_s, stall_timeout_s=request.stall_timeout_s,
                       stacks_dir=RunStore(session.state).stacks_dir(run_id), launches=plan.launches)
    runner.health_watch = _health_watch(session, inventory, connections, runner, live.on_event)
    runner.phases = phases if phases is not None else runner.phases
    runner.heal = request.heal_on_cluster  # a detached run that heals itself (backends/healing.py)
    if replicas.wanted(inventory, request.detach):  # issue 50: each attempt's wrapper hosts the copier
        last = {n.get("host"): n.get("local_addr") for n in RunStore(session.state).read_or_new(run_id).get("topology") or []}
        runner.replicas = replicas.configs(inventory, topology, run_id, plan.attempt, plan.restore, last)
    runner.stragglers.enabled = runner.stragglers.enabled and request.straggler_watch
    busy = backend.busy(inventory, connections, busy)
    if busy:
        raise StateError(f"a run is already in progress: {busy}", where=inventory.name, fix=busy_fix(busy))
    for note in topology.notes:
        session.renderer.message(f"plan: {note}", "yellow")
    if ranks.ranks or ranks.local_ranks:
        session.renderer.message(f"live log: {ranks} only (every rank's output stays in the files on the nodes)", "dim")
    place = {"backend": backend.name, "hosts": recorded_hosts(inventory.hosts), "attempt": plan.attempt,
             "inventory_source": session.source().to_json(), "checkpoint": plan.checkpoint,
             **earlier_attempts(session, run_id, plan.attempt)}
    if stop_requested(session, run_id):  # `clusterctl stop` while a run that heals itself relaunched
        raise StopRequested(run_id)
    return _watch(session, backend, runner, summary, place, request, live, leases)


def _health_watch(session, inventory, connections, runner, on_event):
    """The passive watch of the run's nodes (issue 36), its events kept in the health record."""
    from clusterctl.health.fleet import record_events
    from clusterctl.watch.health_watch import PassiveWatch

    def record(events, gpus):
        return record_events(session.state.health_db, inventory, events, gpus)

    return PassiveWatch(connections, runner.started_at, record, on_event, runner.run_id)


def _watch(session, backend, runner, summary: dict, place: dict, request: RunRequest, live, leases=None) -> Outcome:
    from clusterctl.run.runner import RunnerCrashed

    run_id, started, inventory_given = summary["run_id"], time.time(), str(session.inventory_path())
    store = RunStore(session.state)
    # recorded at the start too: `clusterctl stacks` (and collect-logs) find a run that goes on
    running = {**summary, "commands": runner.commands(), "started": started, "state": "running", "exit_code": None,
               "inventory": inventory_given, **place, "stragglers": []}
    running_record = store.write(RunRecord.from_json(running))
    # a rank named late (or keeping pace again) is in the record at once: `status --json` shows it
    from clusterctl.observe.notify_hooks import straggler_hook

    tell = straggler_hook(running)  # a `notify:` message per rank named late (issue 41)
    runner.stragglers.on_change = lambda found: (store.write(running_record.with_(stragglers=found)), tell(found))
    try:
        with backend.hang_up() as hung_up:
            outcome, crash = runner.run(detach=request.detach, hung_up=hung_up), None
    except RunnerCrashed as crashed:
        outcome, crash = crashed.outcome, crashed.cause
    finally:
        live.close()  # the last progress states and counts of repeats, before the summary
    if leases is not None and not outcome.detached:  # part of the end: released before the record says ended
        _release(session, leases)
    if outcome.detached:
        return _detached(session, runner, summary, started, request.prompt, place)
    record = {**summary, "prompt_sha256": sha256(request.prompt), "commands": runner.commands(),
              "started": started, "ended": time.time(), "duration_s": round(outcome.duration, 3),
              "exit_code": outcome.exit_code, "nodes": node_states(runner),
              "first_failure": outcome.first_failure, "interrupted": outcome.interrupted,
              "inventory": inventory_given, "state": "stopped" if outcome.stopped else "ended", **place,
              "stragglers": runner.stragglers.found()}
    if outcome.stopped:
        record["stopped"] = True
    if crash is not None:
        record["internal_error"] = f"{type(crash).__name__}: {crash}"
    store.write(RunRecord.from_json(record))
    health_note = record_run_end(session.state, runner.inventory, record)  # issue 36: lost and blamed nodes
    if health_note:
        session.renderer.message(health_note, "yellow")
    record_stragglers(session, runner.inventory, run_id, record["stragglers"])
    runner.phases.reach("recorded")
    if crash is not None:
        raise crash
    return summary, record, outcome


def _ended(summary: dict, record: dict, outcome) -> Outcome:
    document = {"ok": outcome.exit_code == 0, **summary, "exit_code": outcome.exit_code,
                "duration_s": record["duration_s"], "nodes": record["nodes"], "phases": record.get("phases", {}),
                "phases_cpu": record.get("phases_cpu", {}),
                "stragglers": record.get("stragglers", [])}
    if outcome.first_failure:
        document["first_failure"] = outcome.first_failure
    if outcome.stopped:
        document["stopped"] = True
    return Outcome(document, interrupted=outcome.interrupted)


def record_stragglers(session, inventory, run_id: str, found: list) -> None:
    """Each rank named late during the run: a `straggler` event in the fleet health record (health/fleet.py)."""
    from clusterctl.health.fleet import record_stragglers as record

    note = record(session.state, inventory, run_id, found)
    if note:  # the run is recorded all the same; the health record says why not
        session.renderer.message(f"straggler events: {note}", "yellow")


def _plan_document(session, plan: Plan) -> Outcome:
    """`run --plan` of a backend that plans without the nodes (Slurm: nothing allocated)."""
    for note in plan.notes:
        session.renderer.message(f"plan: {note}", "yellow")
    session.renderer.message(f"plan: {plan.nnodes} node(s) of the allocation x {plan.nproc_per_node} rank(s) = world "
                             f"size {plan.world_size}; the first allocated node is the master (nothing submitted)",
                             "green")
    if not session.renderer.json_mode:
        print(plan.script)
    return Outcome({"ok": True, "cluster": plan.cluster, "world_size": plan.world_size,
                    "nproc_per_node": plan.nproc_per_node, "nnodes": plan.nnodes, "notes": list(plan.notes),
                    "plan": plan.script, "exit_code": None})


def _detached(session, runner, summary: dict, started: float, prompt: str, place: dict) -> Outcome:
    """The run goes on, watched on the cluster: the record says where its supervisor is."""
    record = {**summary, "prompt_sha256": sha256(prompt), "commands": runner.commands(), "started": started,
              "state": "running", "detached": True, "supervisor": runner.supervised.to_json(), "exit_code": None,
              "nodes": node_states(runner), "inventory": str(session.inventory_path()), **place,
              **(_spares_too(runner) if runner.heal else {})}
    RunStore(session.state).write(RunRecord.from_json(record))
    run_id = summary["run_id"]
    session.renderer.message(f"run {run_id} goes on, watched on the cluster (supervisor on {runner.supervised.host}). "
                             f"Follow it: clusterctl attach {run_id} | logs -f {run_id} | status; end it: "
                             f"clusterctl stop {run_id}", "green")
    return Outcome({"ok": True, **summary, "detached": True, "state": "running", "exit_code": None,
                    "supervisor": runner.supervised.to_json()})


def _spares_too(runner) -> dict:
    """A detached run that heals itself: its record names the spares too (their keepers run; `stop` ends them)."""
    return {**runner.heal.record(), "hosts": recorded_hosts((*runner.inventory.hosts, *runner.heal.spares))}


def set_aside(inventory, connections, run_id: str, attempt: int) -> dict:
    """Every node's run dir of `run_id` renamed RUN_DIR.attempt-`attempt` (a relaunch): {host: HostResult}."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.plan import node_files
    from clusterctl.node.layout import node_run_dir

    def action(transport, host):
        # node/run_files.py `set-aside`: a rename that never moves the run dir into a directory already
        # there (another user's, made first), and no link followed (issue 47)
        run_dir = node_run_dir(inventory.job.outputs, run_id, host.name)
        return run_commands(transport, host, [node_files.command(inventory, run_dir, "set-aside", str(attempt))])

    return for_each_host(list(inventory.hosts), action, connections)


def busy_fix(busy: str) -> str:
    """The fix of "a run is already in progress" seen on the nodes: stop that run, by its id when
    its torchrun's command line gives it (`--rdzv-id=RUN`)."""
    import re

    match = re.search(r"^run (\S+) \(", busy)  # run_in_progress's "run ID (N process(es) ... already run on" 
    if match:
        return (f"wait for it to end, or stop it: `clusterctl stop {match.group(1)}` where it was started "
                "(or `clusterctl down`)")
    return "wait for it to end, or stop it with `clusterctl down`"


def rank_filter(options: LiveOptions, topology):
    """The live log's rank filter; one that selects no rank of this job is a mistake said now."""
    from clusterctl.watch.livelog import RankFilter

    ranks = RankFilter(options.ranks or (), options.local_ranks or ())
    if (ranks.ranks or ranks.local_ranks) and not ranks.selects_any(n.ranks for n in topology.nodes):
        raise UsageError(f"{ranks} selects no rank of this job, whose ranks are 0-{topology.world_size - 1} "
                         f"({topology.nproc_per_node} per node)", where="--ranks" if ranks.ranks else "--local-ranks",
                         fix="name ranks the job has, or leave the flag out to see every rank")
    return ranks


def summary_of(inventory, topology, run_id: str) -> dict:
    """The run's layout as its record and its JSON document say it."""
    return {
        "run_id": run_id,
        "cluster": inventory.name,
        "world_size": topology.world_size,
        "nproc_per_node": topology.nproc_per_node,
        "nnodes": topology.nnodes,
        "master": {"host": topology.master.host.name, "address": topology.master_addr, "port": topology.port},
        "topology": [{"host": n.host.name, "node_rank": n.node_rank, "ranks": [n.ranks.start, n.ranks.stop - 1],
                      "gpus": list(n.gpu_ids) if n.gpu_ids is not None else None, "nic": n.nic,
                      "local_addr": n.local_addr} for n in topology.nodes],
        "notes": list(topology.notes),
        "outputs": inventory.job.outputs,
    }


def node_states(runner) -> dict:
    return {name: {"exit_code": n.exit_code, "lost": n.lost, "run_dir": n.run_dir} for name, n in runner.nodes.items()}


def not_ready(session, problems: dict) -> Outcome:
    """The nodes whose facts could not be learned: the run does not start."""
    session.renderer.hosts_table("run: nodes not ready", problems)
    document = hosts_document(problems)
    document["ok"] = False
    document["exit_code"] = None
    return Outcome(document, unreachable=any_unreachable(problems))


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
