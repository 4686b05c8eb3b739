"""A run that heals itself (issue 35): the one loop around the run flow, the same for every backend.

An attempt is launching.run_job on the hosts in use. When it fails, its first failure (watch/failures.py:
the host, the global rank, the diagnosis) is classified (ground/healing.py): a job fault ends the run as
without `restarts`; a transient one is relaunched on the same hosts; a node fault leaves that host out
for the rest of the run (never taken back) and the first spare joins, or, without one, the job goes on
with fewer nodes down to `job.min_nodes`. The topology is planned again on the hosts in use (the first
one is the master: the lost master's place is taken by the first survivor), and `Backend.relaunch`
launches the same command under the same run id as the next attempt, after a backoff. Every rank of
the failed attempt was stopped by the run flow (fail fast) before its run_job returned.

The run lock is held across the attempts; `clusterctl stop` between two attempts (and Ctrl-C) ends the
run with nothing launched. Every attempt is kept in the run record's `attempts`."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Optional

from clusterctl.backends.base import Plan, RunRequest
from clusterctl.heal.hooks import StopRequested, holding, stop_requested
from clusterctl.errors import UsageError
from clusterctl.node import heal_policy
from clusterctl.ground.records import RunStore
from clusterctl.outcome import Outcome


@dataclass
class Fleet:
    """The hosts of a run: those in use (the first is the master), the spares, and those left out."""

    active: list
    spares: list
    excluded: list = field(default_factory=list)  # {"host", "cause"}
    granted: bool = False  # a Slurm allocation's nodes: the scheduler grants another in place of one left out

    def leave_out(self, host: str, cause: str) -> Optional[str]:
        """`host` out for good, the first spare in its place (heal_policy.leave_out); the spare's name, or
        None without one."""
        active, spares, joined = heal_policy.leave_out(self.names(), [h.name for h in self.spares], host, self.granted)
        self.hosts_in_use(active, spares)
        self.excluded.append({"host": host, "cause": cause})
        return joined

    def hosts_in_use(self, active: list, spares: list) -> None:
        """The engine's choice (names) as this fleet's hosts."""
        known = {h.name: h for h in (*self.active, *self.spares)}
        self.active, self.spares = [known[n] for n in active], [known[n] for n in spares]

    def names(self) -> list[str]:
        return [h.name for h in self.active]


def run_healing(session, backend, inventory, request: RunRequest, live=None, plan_only: bool = False) -> Outcome:
    """`clusterctl run` (and `Cluster.run`): today's run where the inventory has no `job.restarts` and no
    `job.nodes`; else its attempts on the hosts in use (`plan_only`: the plan of the first). The run's
    notifications (inventory `notify:`, issue 41) are sent around it."""
    from clusterctl.observe.notify_hooks import notified

    if plan_only:
        return _run_healing(session, backend, inventory, request, live, plan_only)
    return notified(session, inventory, lambda: _run_healing(session, backend, inventory, request, live, plan_only))


def _run_healing(session, backend, inventory, request: RunRequest, live, plan_only: bool) -> Outcome:
    from clusterctl.backends.run_flow import LiveOptions, run_job

    healing, live = inventory.job.healing, live or LiveOptions()
    if not healing.enabled and healing.nodes is None:
        return run_job(session, backend, inventory, request, live, plan_only=plan_only)
    inventory = session.plannable(inventory)  # quarantined hosts out before the fleet: spares take their place
    fleet = _fleet(inventory, healing.nodes, _suspects(session, inventory, healing.nodes))
    if plan_only:
        return run_job(session, backend, on_hosts(inventory, fleet), request, live, plan_only=True)
    run_id = session.state.new_run_id()
    if request.detach and healing.enabled:
        return _detached(session, backend, inventory, request, live, fleet, run_id)
    from clusterctl.run.leases import holding as holding_leases

    # the run lock and the nodes' GPU leases held across the attempts (run/leases.py: survivors keep theirs)
    with holding(session, inventory, run_id), \
            holding_leases(run_id, lambda line: session.renderer.message(line, "yellow")):
        return _attempts(session, backend, inventory, request, live, fleet, run_id)


def _detached(session, backend, inventory, request: RunRequest, live, fleet: Fleet, run_id: str) -> Outcome:
    """`run --detach` of a run that heals itself: its first attempt, handed over to the cluster with what
    the supervisor there needs to heal it (heal/detached.py, node/node_healing.py). A spare whose
    facts cannot be learned now is no spare."""
    from clusterctl.backends.run_flow import run_job
    from clusterctl.heal.detached import plan_healing

    if not backend.lists_hosts(inventory):
        raise UsageError("a detached run heals itself on SSH nodes only", where="--detach",
                         fix="leave --detach out, or set job.restarts: 0")
    facts, problems, _busy, _from = backend.facts(replace(inventory, hosts=tuple(fleet.active + fleet.spares)),
                                                  session.connections)
    spares = [h for h in fleet.spares if h.name not in problems]
    for name in problems:
        session.renderer.message(f"{name} is no spare for this run: its facts could not be learned", "yellow")
    heal = plan_healing(inventory, fleet.active, spares, facts, run_id, request.prompt, request.strict)
    return run_job(session, backend, on_hosts(inventory, fleet), replace(request, heal_on_cluster=heal), live,
                   relaunch_of=Plan(backend.name, inventory.name, run_id, 0, 0, 0, attempt=1))


def _fleet(inventory, nodes: Optional[int], suspect: frozenset = frozenset()) -> Fleet:
    """`nodes` hosts take part, the rest are spares. Which: the rendezvous master (first, as the planner
    orders them), then healthy hosts before `suspect` ones (issue 48: a suspect host is taken only when
    needed); those taking part stay in the inventory's order, so the master and every rank's place are as
    written. The spares: healthy ones first, so a relaunch takes those first too."""
    hosts = list(inventory.hosts)
    master = inventory.rendezvous.master
    if master:
        hosts.sort(key=lambda h: h.name != master)
    count = nodes or len(hosts)
    ranked = hosts[:1] + sorted(hosts[1:], key=lambda h: h.name in suspect)  # stable: the inventory's order
    chosen = {h.name for h in ranked[:count]}
    return Fleet([h for h in hosts if h.name in chosen], ranked[count:], granted=not hosts)


def _suspects(session, inventory, nodes: Optional[int]) -> frozenset:
    """The suspect hosts in the fleet's health record, where the run leaves spares (else: none matter)."""
    from clusterctl.health.fleet import suspect_hosts

    if not nodes or nodes >= len(inventory.hosts):
        return frozenset()
    return suspect_hosts(session.state.health_db, inventory)


def on_hosts(inventory, fleet: Fleet, addresses: Optional[dict] = None):
    """The inventory of one attempt: the hosts in use. A master left out gives way to the first host in
    use; a `rendezvous.address` (the master's address on the job's network) becomes the new master's
    address on that network: the one the last plan found it on (`addresses`: host -> local_addr)."""
    if not inventory.hosts:  # a Slurm allocation's nodes: the scheduler grants them, none of those left out
        return excluding(inventory, [e["host"] for e in fleet.excluded])
    rendezvous, names = inventory.rendezvous, fleet.names()
    master = rendezvous.master or inventory.hosts[0].name
    if master not in names:
        address = (addresses or {}).get(names[0]) if rendezvous.address else None
        rendezvous = replace(rendezvous, master=None, address=address)
    return replace(inventory, hosts=tuple(fleet.active), rendezvous=rendezvous)


def excluding(inventory, hosts: list):
    """The inventory whose next Slurm allocation leaves `hosts` out: one more `--exclude=` in
    `scheduler.extra_args`, which salloc's argv merges with the others into one (slurm/submit.py)."""
    if not hosts or inventory.scheduler is None:
        return inventory
    extra = (*inventory.scheduler.extra_args, f"--exclude={','.join(hosts)}")
    return replace(inventory, scheduler=replace(inventory.scheduler, extra_args=extra))


def _attempts(session, backend, inventory, request: RunRequest, live, fleet: Fleet, run_id: str) -> Outcome:
    from clusterctl.observe.notify_hooks import relaunching

    healing, attempts, addresses = inventory.job.healing, [], {}
    plan = Plan(backend.name, inventory.name, run_id, 0, 0, 0, attempt=1)
    while True:
        try:
            hosts = on_hosts(inventory, fleet, addresses)
            if plan.attempt == 1:
                outcome = backend.launch(plan, request, hosts, live)
            else:
                outcome = backend.relaunch(replace(plan, attempt=plan.attempt - 1), request, hosts)
        except (KeyboardInterrupt, StopRequested) as ended:
            return _ended_between(session, run_id, attempts, interrupted=isinstance(ended, KeyboardInterrupt))
        except Exception as error:  # a plan that no longer fits (TopologyError...): recorded, then said
            _record(session, run_id, attempts, {"heal_refused": str(error)})
            raise
        attempts.append(_attempt_entry(session, run_id, plan.attempt, fleet, outcome, attempts))
        if not outcome.ok:
            attempts[-1]["progress"] = _progress(session, inventory, fleet, attempts)
        addresses.update({n.get("host"): n.get("local_addr") for n in _read(session, run_id).get("topology") or []})
        left_out = len(fleet.excluded)
        verdict, reason = _next_step(outcome, healing, plan.attempt, fleet, [a.get("progress") for a in attempts])
        attempts[-1]["excluded"] = fleet.excluded[left_out:]
        _remember_excluded(session, inventory, run_id, attempts[-1]["excluded"])
        if verdict is None:
            _release_leases(run_id)
            if reason:
                session.renderer.message(f"not relaunched: {reason}", "red")
            return _finished(session, run_id, attempts, outcome, reason)
        _release_leases(run_id, [e["host"] for e in attempts[-1]["excluded"]])  # the rest are kept for the next
        session.renderer.message(f"attempt {plan.attempt}: {verdict}; relaunching on {', '.join(fleet.names())} "
                                 f"(attempt {plan.attempt + 1} of at most {healing.restarts + 1})", "yellow")
        relaunching(session, run_id, verdict, outcome.document.get("first_failure"), plan.attempt)
        try:
            if not _backoff(session, run_id, attempts, plan.attempt):
                return _ended_between(session, run_id, attempts, interrupted=False)
        except KeyboardInterrupt:
            return _ended_between(session, run_id, attempts, interrupted=True)
        plan = replace(plan, attempt=plan.attempt + 1)


def _progress(session, inventory, fleet: Fleet, attempts: list) -> Optional[bool]:
    """heal_policy.progress_of the attempt that just failed: the newest complete checkpoint as its
    master sees it now, against the one it resumed from."""
    from clusterctl.heal.hooks import checkpoint_on

    spec, last = inventory.job.healing.checkpoint, attempts[-1]
    newest = checkpoint_on(inventory, session.connections, fleet.active[0], session.renderer) if spec else None
    earlier = attempts[-2].get("first_failure") if len(attempts) > 1 else None
    return heal_policy.progress_of(spec is not None, last.get("resumed_from"), newest, last.get("first_failure"),
                                   earlier)


def _next_step(outcome: Outcome, healing, attempt: int, fleet: Fleet,
               progress: tuple = (None,)) -> tuple[Optional[str], Optional[str]]:
    """(what is done, None) when the run goes on; (None, why not) when it ends here (why: None when it
    simply succeeded, was stopped or interrupted): the engine's decision (heal_policy.decide) on the
    attempt's first failure, the blamed host left out of `fleet`. The world size is checked by the
    next attempt's plan."""
    document = outcome.document
    ended = ("succeeded" if outcome.ok else "stopped" if outcome.interrupted or document.get("stopped")
             or document.get("exit_code") is None else "failed")
    rules = {"table": healing.heal, "restarts": healing.restarts, "min_nodes": healing.min_nodes}
    decision = heal_policy.decide(ended, heal_policy.failure_of(document.get("first_failure")), attempt, rules,
                                  fleet.names(), [h.name for h in fleet.spares], fleet.granted, progress)
    fleet.excluded += decision.excluded
    if decision.relaunch:
        fleet.hosts_in_use(decision.active, decision.spares)
    return (decision.says, None) if decision.relaunch else (None, decision.why)


def _attempt_entry(session, run_id: str, attempt: int, fleet: Fleet, outcome: Outcome, earlier: list) -> dict:
    """One entry of the record's `attempts`, from the record the attempt wrote as it ended."""
    record = _read(session, run_id)
    ended_before = earlier[-1]["ended"] if earlier else None
    started = record.get("started")
    return {"attempt": attempt, "started": started, "ended": record.get("ended") or time.time(),
            "hosts": [n.get("host") for n in record.get("topology") or []] or fleet.names(),
            "exit_code": outcome.document.get("exit_code"), "first_failure": outcome.document.get("first_failure"),
            "excluded": [], "relaunch_s": round(started - ended_before, 1) if started and ended_before else None,
            "checkpoint": record.get("checkpoint"), "resumed_from": record.get("checkpoint"), "progress": None}


def _backoff(session, run_id: str, attempts: list, attempt: int) -> bool:
    """Wait before the next attempt, the run still `running` for `clusterctl stop`; False when stopped."""
    from clusterctl.executor import wait_until

    ended = _read(session, run_id).get("state")
    _record(session, run_id, attempts, {"state": "running", "relaunching": True})
    pause = heal_policy.backoff_of(attempt)
    from clusterctl.run.leases import held_for

    held = held_for(run_id)  # no attempt renews the nodes' leases meanwhile: the loop does
    stopped = wait_until(lambda: (held.renew() if held else None, stop_requested(session, run_id))[1], pause,
                         interval_s=0.2)
    if not stopped:  # ended again: the stop that Backend.relaunch makes finds nothing to stop
        _record(session, run_id, attempts, {"state": ended, "relaunching": False})
    return not stopped


def _finished(session, run_id: str, attempts: list, outcome: Outcome, reason: Optional[str]) -> Outcome:
    extra = {"heal_refused": reason} if reason else {}
    _record(session, run_id, attempts, extra)
    for line in summary_lines(attempts):
        session.renderer.message(line, "green" if outcome.ok else "yellow")
    return replace(outcome, document={**outcome.document, "attempts": attempts, **extra})


def _ended_between(session, run_id: str, attempts: list, interrupted: bool) -> Outcome:
    """Ctrl-C or `clusterctl stop` while no attempt ran: the run ends stopped, nothing launched."""
    how = "interrupted" if interrupted else "stopped"
    _release_leases(run_id)
    session.renderer.message(f"run {run_id} {how} between two attempts: nothing more is launched", "yellow")
    _record(session, run_id, attempts, {"state": "stopped", "stopped": True, "interrupted": interrupted,
                                        "relaunching": False})
    record = _read(session, run_id)  # the last attempt's plan: what CONTRACT.md's run document names
    planned = {key: record.get(key) for key in ("world_size", "nproc_per_node", "master") if key in record}
    return Outcome({"ok": False, "run_id": run_id, **planned, "exit_code": 130 if interrupted else 1, "stopped": True,
                    "attempts": attempts}, interrupted=interrupted)


def _release_leases(run_id: str, hosts: Optional[list] = None) -> None:
    """The leases the loop holds across attempts (run/leases.py): those of `hosts` left out as the attempt
    that left them out ends, all of them before the run's last record."""
    from clusterctl.run.leases import held_for

    held = held_for(run_id)
    if held is not None:
        held.release(hosts)


def _record(session, run_id: str, attempts: list, changes: dict) -> None:
    RunStore(session.state).update(run_id, **changes, attempts=attempts)


def _read(session, run_id: str) -> dict:
    return RunStore(session.state).read_or_new(run_id).to_json()


def summary_lines(attempts: list) -> list[str]:
    """One line per relaunch: "node2 lost (node_unreachable): relaunched on node1, node3 in 24 s, resuming from step-5"."""
    lines = []
    for before, after in zip(attempts, attempts[1:]):
        lost = ", ".join(f"{e['host']} lost ({e['cause']})" for e in before["excluded"])
        first = before.get("first_failure") or {}
        cause = ((first.get("diagnosis") or [{}])[0]).get("cause", "unknown")
        what = lost or f"attempt {before['attempt']} failed ({cause})"
        resume = f", resuming from {after['checkpoint'].rstrip('/').rsplit('/', 1)[-1]}" if after.get("checkpoint") else ""
        took = f" in {after['relaunch_s']:.0f} s" if after.get("relaunch_s") is not None else ""
        lines.append(f"{what}: relaunched on {', '.join(after['hosts'])}{took}{resume}")
    return lines


def _remember_excluded(session, inventory, run_id: str, excluded: list) -> None:
    """The fleet's health record keeps every host a healing run left out (a `heal_excluded` event)."""
    from clusterctl.health.events import Event
    from clusterctl.health.fleet import record_events

    events = [Event(e["host"], "heal_excluded", "heal", evidence=f"left out of run {run_id}: {e['cause']}",
                    cause=e["cause"], run_id=run_id) for e in excluded]
    note = record_events(session.state.health_db, inventory, events)
    if note:
        session.renderer.message(f"health: {note}", "yellow")
