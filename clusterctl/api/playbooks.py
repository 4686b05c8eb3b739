"""The flows that are playbooks (`up`, `down`): the cluster locked on its master while they run."""
from __future__ import annotations

import getpass
import os
import socket
from contextlib import contextmanager
from typing import Optional

from clusterctl.health.fleet import record_checks
from clusterctl.outcome import Outcome, any_unreachable, hosts_document


@contextmanager
def cluster_lock(app, inventory, title: str):
    """Hold the cluster's lock on the master node (modules/lock.py) while the flow runs: another
    controller's `up`/`down` on the same cluster is refused instead of interleaving with ours. A
    master that cannot be reached is no reason to stop: the flow reports it like any host."""
    from clusterctl.errors import StateError
    from clusterctl.executor import Event, for_each_host, run_commands
    from clusterctl.modules import lock

    master = inventory.master
    owner = f"`clusterctl {title}` by {_user()}@{socket.gethostname()} (pid {os.getpid()})"
    command = lock.acquire_command(f"cluster-{inventory.name}", owner, via_ssh=not master.is_local)
    result = for_each_host([master], lambda t, h: run_commands(t, h, [command]), app.connections)[master.name]
    holder, text = lock.parse_acquire(result.stdout) if result.succeeded else (None, "")
    if holder is None and text:
        raise StateError(f"`clusterctl {title}` is already in progress on this cluster from another controller: {text}",
                         where=f"{master.name}:/tmp/clusterctl-locks-*/cluster-{inventory.name}.lock",
                         fix=f"wait for it to finish. If that clusterctl is gone, its lock goes with its SSH "
                             f"connection; to clear it at once, kill the lock's holder (the pid named above) on {master.name}")
    if holder is None:
        app.renderer.on_event(Event("note", master.name, "cluster lock not taken (" + (
            result.detail or result.stdout.strip() or "no answer") + "); going on with the local lock only"))
    yield
    if holder is not None:  # on an exception, our connection closing releases it
        for_each_host([master], lambda t, h: run_commands(t, h, [lock.release_command(f"cluster-{inventory.name}", holder)]),
                      app.connections)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in the environment nor in the password database
        return f"uid {os.getuid()}"


def run_flow(app, given: Optional[str], flow: str, title: str, remember: bool = False, variables=None) -> Outcome:
    """`up`/`down` (and `Cluster.up()`/`down()`): validate everything, lock the cluster, run the flow's
    playbook on the inventory `given` (default: the session's)."""
    from clusterctl import modules
    from clusterctl.executor import run_plan
    from clusterctl.playbook import find_playbook, load_playbook
    from clusterctl.preflight import node_facts

    playbook = load_playbook(find_playbook(flow))
    path = app.inventory_path(given)
    inventory = app.inventory(str(path))
    if remember:  # `up`: quarantined hosts left out (issue 36)
        inventory = app.plannable(inventory)
    with app.state.lock(f"cluster-{inventory.name}", f"`clusterctl {title}`"), \
            cluster_lock(app, inventory, title):
        if remember:
            app.state.set_active_inventory(path, app.source(str(path)).to_json())
        log_dir = app.state.step_logs(title)
        report = run_plan(playbook.tasks, inventory, app.connections, modules.resolve,
                          variables={"flow": title, **(variables or {})}, on_event=app.renderer.on_event, log_dir=log_dir)
        if remember:  # `up`: what run may reuse of the preflight's probes (preflight/node_facts.py)
            node_facts.remember(app.state, inventory, {name: r.data["node_facts"] for name, r in report.hosts.items()
                                                       if r.succeeded and "node_facts" in r.data})
    app.renderer.hosts_table(title, report.hosts)
    _say_left_running(app, report.hosts, title)
    checks = [c for r in report.hosts.values() for c in r.data.get("checks", [])]
    document = hosts_document(report.hosts, inventory=str(path), logs=str(log_dir))
    if checks:
        document["checks"] = checks
        _say_health(app, record_checks(app.state, inventory, checks, "up",
                                       {name: r.data.get("gpus_seen", ()) for name, r in report.hosts.items()}))
    changed = sum(1 for r in report.hosts.values() if r.status.value == "changed")
    app.renderer.message(f"{title}: {len(report.hosts)} hosts, {changed} changed", "green" if document["ok"] else "red")
    return Outcome(document, unreachable=any_unreachable(report.hosts))


def _say_left_running(app, hosts, title: str) -> None:
    """One line per node and live run that the cleanup left alone (issue 48: a run of anyone is not stale)."""
    from clusterctl.plan.leasing import when

    for name, result in hosts.items():
        for run in result.data.get("left_running") or ():
            since = when(run["since"]) if run.get("since") else "before leases"
            app.renderer.message(f"{name}: ranks of run {run['run_id']} ({run.get('operator') or 'operator unknown'}, "
                                 f"since {since}) left running; `clusterctl stop {run['run_id']}` where it was "
                                 f"started, or `clusterctl {title} --force` to end them", "yellow")


def _say_health(app, note) -> None:
    if note:
        app.renderer.message(note, "yellow")


def run_tasks(session, inventory, tasks, variables: Optional[dict] = None, log_dir=None, events: bool = True):
    """A playbook's tasks (or `status`'s planned tasks: (name, module, params)) on every host of
    `inventory` through the session's connections: the executor's RunReport."""
    from clusterctl import modules
    from clusterctl.executor import PlannedTask, run_plan

    planned = [t if isinstance(t, PlannedTask) else PlannedTask(*t) for t in tasks]
    options = {"on_event": session.renderer.on_event} if events else {}
    return run_plan(planned, inventory, session.connections, modules.resolve, variables=variables, log_dir=log_dir,
                    **options)
