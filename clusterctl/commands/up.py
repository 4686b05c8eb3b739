"""`clusterctl up INVENTORY`: clean stale ranks, pull, start containers, preflight; remember the cluster."""
from __future__ import annotations

import argparse

from clusterctl.cli import Outcome
from clusterctl.commands import any_unreachable, hosts_document


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inventory", nargs="?", help="inventory file (default: the active cluster)")
    parser.add_argument("-i", dest="inventory_opt", help=argparse.SUPPRESS)
    parser.add_argument("--limit", help="comma-separated host names or groups to act on")
    parser.add_argument("--force", action="store_true",
                        help="also kill foreign processes holding GPUs/the port and replace foreign containers")
    parser.add_argument("--playbook", default="up", help="the flow to run (default: playbooks/up.yaml)")


def execute(args, app) -> Outcome:
    return run_flow(args, app, args.playbook, title="up", remember=True, variables={"force": args.force})


def run_flow(args, app, flow: str, title: str, remember: bool = False, variables=None) -> Outcome:
    """Shared by up/down: validate everything, lock the cluster, run the flow's playbook."""
    from clusterctl import modules
    from clusterctl.executor import run_plan
    from clusterctl.playbook import find_playbook, load_playbook

    playbook = load_playbook(find_playbook(flow))
    path = app.inventory_path(getattr(args, "inventory", None) or getattr(args, "inventory_opt", None))
    inventory = app.inventory(str(path))
    with app.state.lock(f"cluster-{inventory.name}", f"`clusterctl {title}`"):
        if remember:
            app.state.set_active_inventory(path)
        log_dir = app.state.step_logs(title)
        report = run_plan(playbook.tasks, inventory, app.connections, modules.resolve,
                          variables=dict(variables or {}), on_event=app.renderer.on_event, log_dir=log_dir)
    app.renderer.hosts_table(title, report.hosts)
    checks = [c for r in report.hosts.values() for c in r.data.get("checks", [])]
    document = hosts_document(report.hosts, inventory=str(path), logs=str(log_dir))
    if checks:
        document["checks"] = checks
    changed = sum(1 for r in report.hosts.values() if r.status.value == "changed")
    app.renderer.message(f"{title}: {len(report.hosts)} hosts, {changed} changed", "green" if document["ok"] else "red")
    return Outcome(document, unreachable=any_unreachable(report.hosts))
