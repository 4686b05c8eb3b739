"""The only importer of rich. Draws events live and summaries as tables on stderr.

Machine output (`--json`) is one document on stdout, written by `emit_json`; in JSON mode
the live view stays quiet except for errors, so scripts can parse stdout.
"""
from __future__ import annotations

import json
import sys
import threading
from typing import Iterable, Mapping, Optional

from clusterctl.executor import Event
from clusterctl.models import CheckResult, CheckStatus, Finding, HostResult, HostStatus

STATUS_STYLE = {
    HostStatus.OK: "green", HostStatus.CHANGED: "yellow", HostStatus.SKIPPED: "cyan",
    HostStatus.FAILED: "bold red", HostStatus.UNREACHABLE: "bold magenta",
}
CHECK_STYLE = {CheckStatus.PASS: "green", CheckStatus.WARN: "yellow", CheckStatus.FAIL: "bold red"}


class Renderer:
    def __init__(self, json_mode: bool = False, verbose: bool = False, stream=None):
        from rich.console import Console

        self.json_mode = json_mode
        self.verbose = verbose
        self.console = Console(file=stream or sys.stderr, highlight=False, soft_wrap=True)
        self._lock = threading.Lock()
        self._progress = None
        self._live = None
        self._bars: dict[str, int] = {}

    # ---- live events
    def on_event(self, event: Event) -> None:
        if self.json_mode and event.kind != "error":
            return
        handler = getattr(self, f"_on_{event.kind}", None)
        if handler is not None:
            with self._lock:
                handler(event)

    def _on_task(self, event: Event) -> None:
        hosts = event.data.get("hosts", [])
        self.console.print(f"[bold]TASK[/bold] {event.text} [dim]({len(hosts)} hosts)[/dim]")

    def _on_host_done(self, event: Event) -> None:
        result: HostResult = event.data["result"]
        if result.status in (HostStatus.OK, HostStatus.SKIPPED) and not self.verbose:
            return
        style = STATUS_STYLE[result.status]
        detail = f" {result.detail}" if result.detail else ""
        self.console.print(f"  [{style}]{result.status.value}[/{style}] {result.host}{detail}", markup=True)

    def _on_line(self, event: Event) -> None:
        prefix = event.data.get("prefix") or f"[{event.host}]"
        style = "red" if event.data.get("stream") == "stderr" else "cyan"
        self.console.print(f"[{style}]{_escape(prefix)}[/{style}] {_escape(event.text)}")

    def _on_note(self, event: Event) -> None:
        where = f"[{event.host}] " if event.host else ""
        self.console.print(f"[dim]{_escape(where + event.text)}[/dim]")

    def _on_error(self, event: Event) -> None:
        self.console.print(f"[bold red]error:[/bold red] {_escape(event.text)}")

    def _on_status(self, event: Event) -> None:
        """The live run view: a compact line per node under the streaming log (terminals only)."""
        if not self.console.is_terminal:
            return
        from rich.live import Live
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        for name, node in event.data["nodes"].items():
            style = {"lost": "bold red", "running": "cyan"}.get(node["state"], "green" if node["state"] == "exited 0" else "yellow")
            if node["state"].startswith("exited") and node["state"] != "exited 0":
                style = "bold red"
            table.add_row(f"[bold]{_escape(name)}[/bold]", f"[{style}]{node['state']}[/{style}]",
                          f"ranks {node['ranks']}", f"[dim]{_escape(node['last'])}[/dim]")
        if self._live is None:
            self._live = Live(table, console=self.console, transient=True, auto_refresh=False)
            self._live.start()
        self._live.update(table, refresh=True)

    def stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _on_progress(self, event: Event) -> None:
        """data: {key, description, completed, total}; a bar per key (e.g. a pull on one host)."""
        if not self.console.is_terminal:
            return
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        if self._progress is None:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                      console=self.console, transient=True)
            self._progress.start()
        key = event.data["key"]
        if key not in self._bars:
            self._bars[key] = self._progress.add_task(event.data.get("description", key), total=event.data.get("total"))
        self._progress.update(self._bars[key], completed=event.data.get("completed", 0), total=event.data.get("total"))

    def stop_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._bars.clear()

    # ---- summaries
    def hosts_table(self, title: str, results: Mapping[str, HostResult], extra_columns: Iterable[str] = ()) -> None:
        if self.json_mode:
            return
        from rich.table import Table

        self.stop_progress()
        table = Table(title=title, title_justify="left")
        table.add_column("host")
        table.add_column("status")
        for column in extra_columns:
            table.add_column(column)
        table.add_column("detail", overflow="fold")
        for result in results.values():
            style = STATUS_STYLE[result.status]
            extras = [str(result.data.get(c, "")) for c in extra_columns]
            detail = result.detail
            if result.log_path and not result.succeeded:
                detail += f"\nlog: {result.log_path}"
            table.add_row(result.host, f"[{style}]{result.status.value}[/{style}]", *map(_escape, extras), _escape(detail))
        self.console.print(table)

    def checks_table(self, checks: list[CheckResult]) -> None:
        """A matrix of checks x hosts, then the detail and fix of everything not passing."""
        if self.json_mode:
            return
        from rich.table import Table

        self.stop_progress()
        hosts = list(dict.fromkeys(c.host or "cluster" for c in checks))
        cells: dict[tuple[str, str], CheckResult] = {(c.check, c.host or "cluster"): c for c in checks}
        table = Table(title="preflight checks", title_justify="left")
        table.add_column("check")
        for host in hosts:
            table.add_column(host, justify="center")
        for check in dict.fromkeys(c.check for c in checks):
            row = []
            for host in hosts:
                cell = cells.get((check, host))
                row.append(f"[{CHECK_STYLE[cell.status]}]{cell.status.value}[/]" if cell else "[dim]-[/dim]")
            table.add_row(check, *row)
        self.console.print(table)
        for check in checks:
            if check.status is not CheckStatus.PASS or self.verbose:
                style = CHECK_STYLE[check.status]
                self.console.print(f"[{style}]{check.status.value}[/{style}] {_escape(check.host or 'cluster')} "
                                   f"{check.check}: {_escape(check.detail)}")
                if check.fix:
                    self.console.print(f"    [bold]fix:[/bold] {_escape(check.fix)}")

    def findings(self, findings: list[Finding], title: str = "diagnosis") -> None:
        if self.json_mode:
            return
        if not findings:
            self.console.print(f"[green]{_escape(title)}: no failure found[/green]")
            return
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for column in ("#", "cause", "host", "rank", "evidence", "fix"):
            table.add_column(column, overflow="fold")
        for index, finding in enumerate(findings, 1):
            style = "bold red" if index == 1 else ""
            table.add_row(str(index), f"[{style}]{finding.cause}[/{style}]" if style else finding.cause,
                          finding.host or "-", "-" if finding.rank is None else str(finding.rank),
                          _escape(finding.evidence), _escape(finding.fix))
        self.console.print(table)

    def plan(self, topology, commands: Mapping[str, dict]) -> None:
        """`run --plan`: the topology and the exact per-node command lines."""
        if self.json_mode:
            return
        from rich.table import Table

        table = Table(title=f"plan: {topology.nnodes} nodes x {topology.nproc_per_node} = world size "
                            f"{topology.world_size}, master {topology.master_addr}:{topology.port}", title_justify="left")
        for column in ("node", "host", "ranks", "gpus", "nic", "local addr"):
            table.add_column(column)
        for node in topology.nodes:
            gpus = "cpu" if node.gpu_ids is None else ",".join(map(str, node.gpu_ids))
            table.add_row(str(node.node_rank), node.host.name, f"{node.ranks.start}..{node.ranks.stop - 1}", gpus,
                          node.nic or "-", node.local_addr)
        self.console.print(table)
        for note in topology.notes:
            self.console.print(f"[yellow]note:[/yellow] {_escape(note)}")
        for host, command in commands.items():
            env = " ".join(f"{k}={v}" for k, v in command["env"].items())
            self.console.print(f"[bold]{_escape(host)}[/bold] (env: {_escape(env)})")
            self.console.print("  " + _escape(command["command"]))

    def run_summary(self, record: Mapping) -> None:
        self.stop_live()
        if self.json_mode:
            return
        from rich.table import Table

        table = Table(title=f"run {record['run_id']}", title_justify="left")
        for column in ("host", "ranks", "exit", "run dir (on the node)"):
            table.add_column(column, overflow="fold")
        ranks = {n["host"]: n["ranks"] for n in record["topology"]}
        for host, node in record["nodes"].items():
            code = "lost" if node["lost"] else ("-" if node["exit_code"] is None else str(node["exit_code"]))
            style = "green" if code == "0" else "bold red"
            table.add_row(host, f"{ranks[host][0]}..{ranks[host][1]}", f"[{style}]{code}[/{style}]", node["run_dir"])
        self.console.print(table)
        failure = record.get("first_failure")
        if failure:
            where = f"{failure.get('host')}" + (f" rank {failure['rank']}" if failure.get("rank") is not None else "")
            self.console.print(f"[bold red]first failure:[/bold red] {_escape(where)}")
            for line in failure.get("log_tail", [])[-10:]:
                self.console.print(f"  [dim]{_escape(line)}[/dim]")
            for finding in failure.get("diagnosis", [])[:1]:
                self.console.print(f"  [bold]cause:[/bold] {finding['cause']}  [bold]evidence:[/bold] {_escape(finding['evidence'])}")
                self.console.print(f"  [bold]fix:[/bold] {_escape(finding['fix'])}")
            self.console.print("  more: clusterctl collect-logs")
        elif record["exit_code"] == 0:
            self.console.print(f"[green]run {record['run_id']} succeeded in {record['duration_s']:.1f}s[/green]; "
                               f"outputs under {_escape(record['outputs'])} on the nodes (clusterctl collect-logs)")

    def message(self, text: str, style: str = "") -> None:
        if self.json_mode:
            return
        self.console.print(f"[{style}]{_escape(text)}[/{style}]" if style else _escape(text))

    def error(self, text: str) -> None:
        self.stop_progress()
        self.stop_live()
        self.console.print(f"[bold red]error:[/bold red] {_escape(text)}")


def emit_json(document: dict, stream=None) -> None:
    (stream or sys.stdout).write(json.dumps(document, indent=2, default=str) + "\n")


def _escape(text: Optional[str]) -> str:
    from rich.markup import escape

    return escape(text or "")
