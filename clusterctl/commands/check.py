"""`clusterctl check`: the preflight checks alone, as a table of checks x hosts, each node's health state
beside its verdicts (the verdicts recorded: issue 36)."""
from __future__ import annotations

import argparse

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--strict", action="store_true", help="warnings fail too")


def execute(args, app) -> Outcome:
    from clusterctl.backends import backend_for
    from clusterctl.health.fleet import judged
    from clusterctl.models import CheckStatus
    from clusterctl.preflight.probe import run_checks_and_facts
    from clusterctl.registry.image_pull import image_pull_checks

    inventory = app.inventory()
    checks, gpus = backend_for(app, inventory).place_checks(inventory), {}
    if inventory.hosts:
        found, _, gpus = run_checks_and_facts(inventory, list(inventory.hosts), app.connections,
                                              image_pull_checks)
        checks += found
    note, health = judged(app.state, inventory, [c.to_json() for c in checks], "check", gpus)
    app.renderer.checks_table(checks, {node["host"]: node["state"] for node in health})
    if note:
        app.renderer.message(note, "yellow")
    bad = {CheckStatus.FAIL} | ({CheckStatus.WARN} if args.strict else set())
    failed = [c for c in checks if c.status in bad]
    summary = {s.value: sum(1 for c in checks if c.status is s) for s in CheckStatus}
    app.renderer.message(f"checks: {summary['pass']} pass, {summary['warn']} warn, {summary['fail']} fail",
                         "red" if failed else "green")
    unreachable = any(c.check == "ssh" and c.status is CheckStatus.FAIL for c in checks)
    return Outcome({"ok": not failed, "checks": [c.to_json() for c in checks], "summary": summary, "health": health},
                   unreachable=unreachable and len(failed) == sum(1 for c in failed if c.check == "ssh"))
