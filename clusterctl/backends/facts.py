"""The planner's facts of the nodes over SSH, with the look for a run in progress, in one round trip."""
from __future__ import annotations

from clusterctl.models import Inventory


def facts_and_busy(state, inventory: Inventory, connections):
    """(the planner's facts, the nodes not ready, a run in progress or None, where each node's facts
    came from: "up" or "probed"), in one round trip per node: the look for a run in progress
    batched with either the full probe or, where `up` remembered the facts, the light read of the
    node's boot and container (node_facts.recall). Only nodes whose facts no longer hold are
    probed again, in a second round trip."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.run.in_progress import run_in_progress, run_scan_command
    from clusterctl.preflight import node_facts
    from clusterctl.transport import batch_command, split_batch

    remembered = node_facts.recall(state, inventory)
    look = node_facts.instance_command(inventory) if remembered else node_facts.probe_command(inventory)

    def action(transport, host):
        batch = batch_command([("scan", run_scan_command(inventory, host)), ("look", look)],
                              timeout=(look.timeout or 60) + 60)
        return run_commands(transport, host, [batch])

    results = for_each_host(list(inventory.hosts), action, connections)
    busy = run_in_progress({name: split_batch(r.stdout).get("scan", "") for name, r in results.items() if r.succeeded})
    if not remembered:
        facts, problems = node_facts.facts_of(inventory, results)
        return facts, problems, busy, {name: "probed" for name in facts}
    instances = {name: node_facts.parse_instance(r.stdout, inventory) if r.succeeded else None
                 for name, r in results.items()}
    facts = node_facts.still_valid(remembered, instances)
    sources = {name: "up" for name in facts}
    stale = [h for h in inventory.hosts if h.name not in facts]
    problems = {}
    if stale:
        probed, problems = node_facts.gather_node_facts(inventory, connections, stale)
        facts.update(probed)
        sources.update({name: "probed" for name in probed})
    return facts, problems, busy, sources
