"""Reading a run's output from its nodes, running or ended (`clusterctl logs`, `attach`, `Run.logs()`)."""
from __future__ import annotations

from typing import Callable, Iterator, Optional

from clusterctl.errors import UsageError


def read_run_logs(session, given_run: Optional[str], given_inventory: Optional[str], show: Callable,
                  node: Optional[str] = None, rank: Optional[int] = None, tail: Optional[int] = None,
                  follow: bool = False) -> tuple[str, dict]:
    """(run id, {host: HostResult}) of reading the named run's files (default: the last run) of the
    node and rank asked for; `show(lines)` gets watch/logs.py LogLines."""
    from clusterctl.watch import logs
    from clusterctl.ground import records

    run_id, record = records.resolve(session.state, given_run)
    try:
        parts = logs.select(record.get("topology") or [], node, rank)
    except ValueError as exc:
        raise UsageError(f"run {run_id}: {exc}", where="--rank" if rank is not None else "--node",
                         fix="`clusterctl status` lists the runs; run.json under .clusterctl/runs/ has their "
                             "topology") from None
    inventory = session.inventory_of_run(given_inventory, run_id, record, [p.host for p in parts])
    return run_id, read_logs(session, inventory, run_id, record, parts, show, tail, follow)


def log_lines(session, given_run: Optional[str], follow: bool = False, **select) -> Iterator:
    """The run's lines (watch/logs.py LogLine: .host .rank .stream .text), node by node; with `follow`,
    all of them once the run ended on its nodes."""
    collected: list = []
    read_run_logs(session, given_run, None, collected.extend, follow=follow, **select)
    return iter(collected)


def read_logs(session, inventory, run_id: str, record: dict, parts: list, show, tail=None, follow: bool = False) -> dict:
    """Read (or follow) the run's files of `parts` (watch/logs.py NodeSlice) on their nodes; `show(lines)`
    gets watch/logs.py LogLines, as they come when following, else node by node at the end."""
    from clusterctl.executor import Streams, for_each_host, wait_until
    from clusterctl.plan import wrapper as agent
    from clusterctl.watch import logs
    from clusterctl.run.supervision import masker
    from clusterctl.node.layout import node_run_dir
    from clusterctl.models import Command, HostResult, HostStatus

    hosts = {h.name: h for h in inventory.hosts}
    outputs = record.get("outputs") or inventory.job.outputs
    mask = masker(inventory)
    by_host = {p.host: p for p in parts}
    pending: dict[str, list] = {p.host: [] for p in parts}  # without follow: shown node by node at the end
    node_lines = {p.host: logs.NodeLines(p, mask) for p in parts}
    take = (lambda lines, _host: show(lines)) if follow else (lambda lines, host: pending[host].extend(lines))

    def command(host) -> Command:
        part = by_host[host.name]
        return agent.logs_command(inventory, node_run_dir(outputs, run_id, host.name), part.local_ranks, part.agent_log,
                                  tail, follow)

    def ended(host_name: str, result) -> HostResult:
        take(node_lines[host_name].finish(), host_name)
        if result.exit_code == 3 and "no run directory" in result.stderr:
            return HostResult(host_name, HostStatus.FAILED, f"no run directory {node_run_dir(outputs, run_id, host_name)} "
                                                            "there (did the run start on this node?)")
        if not result.ok:
            why = "timed out" if result.timed_out else f"exit {result.exit_code}"
            return HostResult(host_name, HostStatus.FAILED, f"reading the logs failed ({why}): {result.stderr[-300:]}")
        return HostResult(host_name, HostStatus.OK)

    def read(transport, host) -> HostResult:
        class Sink:
            @staticmethod
            def write(data: bytes) -> None:
                take(node_lines[host.name].feed(data), host.name)

        return ended(host.name, transport.run_to_sink(command(host), Sink()))

    targets = [hosts[p.host] for p in parts]
    if follow:  # every node streams at once (one thread reads them all); lines show as they come
        streams = Streams(targets, command, lambda name, data: take(node_lines[name].feed(data), name), ended,
                          session.connections)
        wait_until(lambda: streams.wait(0.5), float("inf"), 0)
        return streams.results
    results = for_each_host(targets, read, session.connections)
    for part in parts:  # node by node, in the run's order
        show(pending.get(part.host, []))
    return results
