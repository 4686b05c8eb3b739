"""A running run seen from its nodes (issue 41): `top`'s look at every node (one round trip each), its
refresh loop, and `metrics --prometheus`'s document of the latest samples, the run and its nodes' health."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from clusterctl.documents.commands import LookDocument
from clusterctl.documents.convert import plain


@dataclass(frozen=True)
class Look:
    """One look at a run: its id, its record (a detached run's brought up to date) and every node's view."""
    run_id: str
    record: dict
    cluster: str
    views: tuple  # observe/top.py NodeView, in the topology's order
    state: str = "unknown"  # ground/records.py state_of: running, succeeded, failed, stopped, ...

    @property
    def ended(self) -> bool:
        return all(v.exit_code is not None or v.error for v in self.views)

    def document(self, ok: bool) -> dict:
        """`top --json`, `metrics --json`: this look."""
        return plain(LookDocument(ok=ok, run_id=self.run_id, state=self.state, nodes=[v.to_json() for v in self.views]))


def look(session, given_run: Optional[str], given_inventory: Optional[str]) -> Look:
    """Every node of the run named (default: the last) read once: its latest sample and ranks' last lines."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.ground import records
    from clusterctl.run.supervision import masker, refresh_record
    from clusterctl.node.layout import node_run_dir
    from clusterctl.observe.top import NodeView, parse_probe, probe_command

    run_id, record = records.resolve(session.state, given_run)
    topology = [n for n in record.get("topology") or [] if isinstance(n, dict) and n.get("host")]
    inventory = session.inventory_of_run(given_inventory, run_id, record, [n["host"] for n in topology])
    mask = masker(inventory)
    record = refresh_record(session.state, inventory, session.connections, run_id, record, mask)
    outputs = record.get("outputs") or inventory.job.outputs
    first = {n["host"]: int((n.get("ranks") or [0])[0]) for n in topology}
    hosts = [h for h in inventory.hosts if h.name in first]
    results = for_each_host(hosts, lambda t, h: run_commands(t, h, [probe_command(inventory, node_run_dir(outputs, run_id, h.name))]),
                            session.connections)
    views = []
    for name in first:
        result = results.get(name)
        if result is not None and result.succeeded:
            views.append(parse_probe(name, result.stdout, first[name], mask))
        else:
            views.append(NodeView(name, error=(result.detail if result else "not in the inventory") or "unreachable",
                                  first_rank=first[name]))
    return Look(run_id, record, inventory.name, tuple(views), records.state_of(record, run_id, session.state.lock_holder))


def watch(session, given_run: Optional[str], given_inventory: Optional[str], every_s: float,
          show: Callable[[Look], None], once: bool = False) -> Look:
    """`look` every `every_s` seconds, each shown, until the run ended on every node (or Ctrl-C); the last."""
    from clusterctl.executor import Ticker

    seen = look(session, given_run, given_inventory)
    show(seen)
    if once or seen.ended:
        return seen
    for _period in Ticker(every_s).during(float("inf"), lambda: seen.ended):
        seen = look(session, seen.run_id, given_inventory)
        show(seen)
    return seen


def prometheus_document(session, given_run: Optional[str], given_inventory: Optional[str]) -> tuple[Look, str]:
    """(the look, the Prometheus text exposition of it, the run's state and its nodes' health states)."""
    from clusterctl.errors import ClusterctlError
    from clusterctl.health.record import HealthRecord
    from clusterctl.observe.prometheus import prometheus_text

    seen = look(session, given_run, given_inventory)
    hosts = [v.host for v in seen.views]
    try:
        inventory = session.inventory_of_run(given_inventory, seen.run_id, seen.record, hosts)
        with HealthRecord.open(session.state.health_db, inventory.name, inventory.health) as health:
            states = {n.host: n.state for n in health.states(hosts)}
    except ClusterctlError:  # no health record to read: the numbers without it
        states = {}
    return seen, prometheus_text(seen, states)
