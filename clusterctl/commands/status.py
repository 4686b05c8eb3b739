"""`clusterctl status`: hosts, container state and image, GPUs in use, running ranks; and the latest
runs of this directory's records (ground/records.py says how "running" is told from "unknown"; a detached
run's record is first brought up to date from its supervisor on the cluster)."""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome, any_unreachable, hosts_document
TASKS = (  # (name, module, params) of the executor's PlannedTask
    ("running ranks", "process.list", {}),
    ("container", "docker.inspect", {}),
    ("gpus", "checks.gpu_usage", {}),
    ("leases", "process.leases", {}),  # every operator's runs on these nodes (issue 48)
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)


def execute(args, app) -> Outcome:
    from clusterctl.api.fleet import fleet_view, say_fleet
    from clusterctl.api.playbooks import run_tasks
    from clusterctl.backends import backend_for
    from clusterctl.ground.records import list_runs
    from clusterctl.run.supervision import masker, refresh_running

    inventory = app.inventory()
    backend = backend_for(app, inventory)
    if not backend.lists_hosts(inventory):  # the nodes are an allocation's, known to Slurm only
        return backend.queue_status(inventory, list_runs(app.state))
    report = run_tasks(app, inventory, TASKS, events=False)
    for result in report.hosts.values():
        data = result.data
        data["ranks_running"] = len(data.get("ranks", []))
        data.setdefault("container", "none" if not inventory.uses_container else "?")
    app.renderer.hosts_table(f"status of {inventory.name}", report.hosts,
                             extra_columns=("container", "image", "gpus_in_use", "ranks_running"))
    refresh_running(app.state, inventory, app.connections, masker(inventory))
    fleet = fleet_view(app, inventory, {name: r.data for name, r in report.hosts.items()})
    runs = list_runs(app.state)
    app.renderer.runs_table(runs)
    say_fleet(app, fleet, {r.run_id for r in runs})
    for run in runs:
        if run.stalled_s:
            app.renderer.message(f"run {run.run_id}: no output from any rank for {run.stalled_s:.0f}s (its supervisor on the "
                                 f"cluster says so): `clusterctl stacks --run {run.run_id}` names the rank elsewhere, "
                                 f"`clusterctl stop {run.run_id}` ends it", "yellow")
    return Outcome(hosts_document(report.hosts, cluster=inventory.name, runs=[r.to_json() for r in runs], fleet=fleet),
                   unreachable=any_unreachable(report.hosts))

