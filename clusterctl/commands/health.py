"""`clusterctl health`: the fleet's health record (issue #36; logic in clusterctl/health/).

    clusterctl health [--json]              every node: state, since, reason, last events
    clusterctl health HOST                  that node's history
    clusterctl health check HOST            preflight, a short GPU burn, an nccl-test pair; recorded
    clusterctl health release HOST [--force]
    clusterctl health export --prometheus   node and GPU states as metrics on stdout
"""
from __future__ import annotations

import argparse
import getpass

from clusterctl.commands import add_cluster_options
from clusterctl.outcome import Outcome
from clusterctl.errors import UsageError

USAGE = ("clusterctl health [HOST] | health check HOST | health release HOST [--force] | "
         "health export --prometheus")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("words", nargs="*", metavar="HOST | check HOST | release HOST | export",
                        help="a host's history, `check HOST`, `release HOST`, or `export --prometheus`")
    parser.add_argument("--force", action="store_true", help="release without a passing check since the quarantine")
    parser.add_argument("--prometheus", action="store_true", help="export: Prometheus text exposition format")


def execute(args, app) -> Outcome:
    from clusterctl.health.export import prometheus_text
    from clusterctl.health.record import HealthRecord

    inventory = app.inventory()
    words = list(args.words)
    if words[:1] == ["check"] and len(words) == 2:
        from clusterctl.backends.health_check import check_outcome

        return check_outcome(app, inventory, words[1])
    with HealthRecord.open(app.state.health_db, inventory.name, inventory.health) as record:
        if words[:1] == ["release"] and len(words) == 2:
            node = record.release(words[1], force=args.force, by=getpass.getuser())
            app.renderer.message(f"{node.host} is {node.state} again", "green")
            return Outcome({"ok": True, "nodes": [node.to_json()]})
        if words[:1] == ["export"] and len(words) == 1:
            if not args.prometheus:
                raise UsageError("export needs a format", where="clusterctl health export", fix="add --prometheus")
            text = prometheus_text(inventory.name, record.states(h.name for h in inventory.hosts))
            app.renderer.raw(text)
            return Outcome({"ok": True, "prometheus": text})
        if len(words) == 1 and words[0] not in ("release", "export", "check"):
            node = record.state(words[0])
            app.renderer.health_table(f"health of {node.host}: {node.state}", [node], history=True)
            return Outcome({"ok": True, "nodes": [node.to_json(last=None)]})
        if words:
            raise UsageError(f"cannot read `health {' '.join(words)}`", where="clusterctl health", fix=USAGE)
        nodes = record.states(h.name for h in inventory.hosts)
        app.renderer.health_table(f"health of {inventory.name}", nodes)
        return Outcome({"ok": True, "nodes": [node.to_json() for node in nodes]})

