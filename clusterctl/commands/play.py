"""`clusterctl play PLAYBOOK`: run any playbook against the active inventory."""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome, any_unreachable, hosts_document


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("playbook", help="a playbook file, or the name of a built-in flow under playbooks/")


def execute(args, app) -> Outcome:
    from clusterctl.api.playbooks import run_tasks
    from clusterctl.playbook import find_playbook, load_playbook

    playbook = load_playbook(find_playbook(args.playbook))  # fails before any connection
    inventory = app.inventory()
    run_dir = app.state.step_logs("play")
    report = run_tasks(app, inventory, playbook.tasks, {"playbook_dir": str(playbook.path.parent.resolve())}, run_dir)
    app.renderer.hosts_table(f"play {playbook.name}", report.hosts)
    tasks = [{"name": t.task.name, "hosts": {h: r.status.value for h, r in t.results.items()}} for t in report.tasks]
    return Outcome(hosts_document(report.hosts, playbook=str(playbook.path), tasks=tasks, logs=str(run_dir)),
                   unreachable=any_unreachable(report.hosts))
