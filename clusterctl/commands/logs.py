"""`clusterctl logs [RUN] [--node N] [--rank R] [--tail K] [--follow]`: a run's output, read from
the nodes, running or ended.

Lines print on stdout as the live log of `run` writes them, `[node2 r3] text` (torchrun's own:
`[node2] text`), terminal-safe, secrets masked; node by node, each file in turn (the files carry no
times to interleave them by). `--follow` streams until the run ends on those nodes (agent.exit) or
Ctrl-C. `--json`: `{"ok", "run_id", "lines": [{"host", "rank", "stream", "text"}], "hosts"}`.
"""
from __future__ import annotations

import argparse

from clusterctl.app import add_cluster_options
from clusterctl.cli import Outcome
from clusterctl.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("run", nargs="?", help="the run id (default: the last run; `clusterctl status` lists them)")
    parser.add_argument("--node", metavar="N", help="only this node's ranks and torchrun's own lines")
    parser.add_argument("--rank", type=_count, metavar="R", help="only this global rank's stdout and stderr")
    parser.add_argument("--tail", type=_count, metavar="K", help="only the last K lines of each file")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="keep streaming until the run ends on those nodes (or Ctrl-C)")


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise argparse.ArgumentTypeError(f"not a whole number (0 or more): {text!r}")
    return int(text)


def execute(args, app) -> Outcome:
    from clusterctl.commands import any_unreachable, run_inventory
    from clusterctl.job import logs, records

    if args.follow and args.json:
        raise UsageError("--follow streams lines as they come; --json prints one document at the end",
                         where="--follow", fix="leave out one of them (`logs --json --tail K` for the latest lines)")
    run_id, record = records.resolve(app.state, args.run)
    try:
        parts = logs.select(record.get("topology") or [], args.node, args.rank)
    except ValueError as exc:
        raise UsageError(f"run {run_id}: {exc}", where="--rank" if args.rank is not None else "--node",
                         fix="`clusterctl status` lists the runs; run.json under .clusterctl/runs/ has their "
                             "topology") from None
    inventory = run_inventory(app, args.inventory, run_id, record, [p.host for p in parts])
    collected: list = []

    def show(lines) -> None:
        for line in lines:
            if args.json:
                collected.append(line.to_json())
            else:
                app.renderer.log_line(line.prefix, line.text, line.stream)

    results = read_logs(app, inventory, run_id, record, parts, show, args.tail, args.follow)
    for name, result in results.items():
        if not result.succeeded:
            app.renderer.message(f"{name}: {result.detail}", "yellow")
    document = {"ok": all(r.succeeded for r in results.values()), "run_id": run_id,
                "hosts": {n: {"status": r.status.value, "detail": r.detail} for n, r in results.items()}}
    if args.json:
        document["lines"] = collected
    return Outcome(document, unreachable=any_unreachable(results))


def read_logs(app, inventory, run_id: str, record: dict, parts: list, show, tail=None, follow: bool = False) -> dict:
    """Read (or follow) the run's files of `parts` (job/logs.py NodeSlice) on their nodes; `show(lines)`
    gets job/logs.py LogLines, as they come when following, else node by node at the end."""
    from clusterctl.executor import Streams, for_each_host
    from clusterctl.job import agent, logs
    from clusterctl.job.supervision import masker
    from clusterctl.job.torchrun import log_dir
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
        return agent.logs_command(inventory, log_dir(outputs, run_id, host.name), part.local_ranks, part.agent_log,
                                  tail, follow)

    def ended(host_name: str, result) -> HostResult:
        take(node_lines[host_name].finish(), host_name)
        if result.exit_code == 3 and "no run directory" in result.stderr:
            return HostResult(host_name, HostStatus.FAILED, f"no run directory {log_dir(outputs, run_id, host_name)} "
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
                          app.connections)
        while not streams.wait(0.5):
            pass
        return streams.results
    results = for_each_host(targets, read, app.connections)
    for part in parts:  # node by node, in the run's order
        show(pending.get(part.host, []))
    return results
