"""The only importer of rich. Draws events live and summaries as tables on stderr.

Machine output (`--json`) is one document on stdout, written by `emit_json`; in JSON mode
the live view stays quiet except for errors, so scripts can parse stdout.

Terminal safety: what nodes print reaches the operator's terminal, and a rank that prints
`ESC ]0;title BEL`, `ESC [2J` or an OSC 52 clipboard write must not retitle, clear or write
the clipboard of the machine that drives the cluster. So every piece of text drawn here goes
through `terminal_safe` (control characters and escape sequences shown as visible escapes)
and is handed to rich as `Text`, never as markup: `[bold red]` in a rank's line prints as
itself. rich's own `escape()` is not enough for that (trailing backslashes defeat it).
Files on disk and `--json` keep what the nodes sent (JSON escapes control characters itself).
"""
from __future__ import annotations

import json
import math
import re
import sys
import threading
from typing import Iterable, Mapping, Optional, Union

from clusterctl.executor import Event
from clusterctl.ground.masking import OUTBOUND
from clusterctl.models import CheckResult, CheckStatus, Finding, HostResult, HostStatus

STATUS_STYLE = {
    HostStatus.OK: "green", HostStatus.CHANGED: "yellow", HostStatus.SKIPPED: "cyan",
    HostStatus.FAILED: "bold red", HostStatus.UNREACHABLE: "bold magenta",
}
CHECK_STYLE = {CheckStatus.PASS: "green", CheckStatus.WARN: "yellow", CheckStatus.FAIL: "bold red"}


# C0 controls except tab and newline, DEL, and C1 controls (U+0080-U+009F: 0x9b is an 8-bit CSI
# for terminals that take 8-bit controls). Every escape sequence (CSI, OSC, DCS, APC, PM, SOS)
# starts with ESC or a C1 control, so showing each of these characters as text neutralises all
# of them: `ESC [2J` prints as the seven characters `\x1b[2J`.
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7f, *range(0x80, 0xa0)) if code not in (0x09, 0x0a)}
_CONTROLS[0x0d] = "\\r"
# Lone surrogates: undecodable bytes kept by surrogateescape (shown as the byte, `\xff`), or
# anything else a UTF-8 stream cannot encode (printing one would raise UnicodeEncodeError).
_SURROGATE = re.compile("[\ud800-\udfff]")


def terminal_safe(text: Union[str, bytes, bytearray, memoryview, None]) -> str:
    r"""Remote text made safe to show on a terminal, every control shown as a visible escape.

    Tab and newline stay; the CR of a CRLF line end is dropped, any other CR shows as `\r`.
    Bytes are read as UTF-8, and bytes that are not UTF-8 (a raw 0x9b among them) show as `\xNN`.
    """
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8", "surrogateescape")
    elif not isinstance(text, str):
        text = str(text)
    text = text.replace("\r\n", "\n").translate(_CONTROLS)
    return _SURROGATE.sub(_show_surrogate, text) if _SURROGATE.search(text) else text


def _show_surrogate(match: "re.Match[str]") -> str:
    code = ord(match.group())
    return f"\\x{code - 0xdc00:02x}" if 0xdc80 <= code <= 0xdcff else f"\\u{code:04x}"


Part = Union[str, tuple]  # text, or (text, style)


def _text(*parts: Part):
    """One rich Text from parts, each made terminal-safe and none read as markup."""
    from rich.text import Text

    text = Text()
    for part in parts:
        value, style = (part, None) if not isinstance(part, tuple) else (part[0], part[1] or None)
        text.append(terminal_safe(value), style=style)
    return text


class Masked:
    """A text stream whose every write is masked (ground/masking.py): what the screen shows is final text."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(OUTBOUND(text))
        return len(text)

    def __getattr__(self, name):  # flush, isatty, encoding, fileno: the stream's own
        return getattr(self.stream, name)


class Renderer:
    def __init__(self, json_mode: bool = False, verbose: bool = False, stream=None):
        from rich.console import Console

        self.json_mode = json_mode
        self.verbose = verbose
        self.console = Console(file=Masked(stream or sys.stderr), highlight=False, soft_wrap=True)
        self._lock = threading.Lock()
        self._progress = None
        self._live = None
        self._bars: dict[str, int] = {}
        self._out = None  # stdout, for `logs`

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
        self.console.print(_text(("TASK", "bold"), f" {event.text} ", (f"({len(hosts)} hosts)", "dim")))

    def _on_host_done(self, event: Event) -> None:
        result: HostResult = event.data["result"]
        if result.status in (HostStatus.OK, HostStatus.SKIPPED) and not self.verbose:
            return
        detail = f" {result.detail}" if result.detail else ""
        self.console.print(_text("  ", (result.status.value, STATUS_STYLE[result.status]), f" {result.host}{detail}"))

    def _on_line(self, event: Event) -> None:
        prefix = event.data.get("prefix") or f"[{event.host}]"
        style = "red" if event.data.get("stream") == "stderr" else "cyan"
        repeated = event.data.get("repeated")  # a run's live log (watch/livelog.py): how often others said it
        self.console.print(_text((prefix, style), " ", event.text, *((" ", (repeated, "dim")) if repeated else ())))

    def _on_note(self, event: Event) -> None:
        where = f"[{event.host}] " if event.host else ""
        self.console.print(_text((where + event.text, "dim")))

    def _on_error(self, event: Event) -> None:
        self.console.print(_text(("error:", "bold red"), " ", event.text))

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
            table.add_row(_text((name, "bold")), _text((node["state"], style)), _text(f"ranks {node['ranks']}"),
                          _text((node["last"], "dim")))
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
            self._progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(),
                                      console=self.console, transient=True)
            self._progress.start()
        key = event.data["key"]
        if key not in self._bars:
            description = terminal_safe(event.data.get("description", key))
            self._bars[key] = self._progress.add_task(description, total=event.data.get("total"))
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
        table = Table(title=_text(title), title_justify="left")
        table.add_column("host")
        table.add_column("status")
        for column in extra_columns:
            table.add_column(_text(column))
        table.add_column("detail", overflow="fold")
        for result in results.values():
            extras = [_text(str(result.data.get(c, ""))) for c in extra_columns]
            detail = result.detail
            if result.log_path and not result.succeeded:
                detail += f"\nlog: {result.log_path}"
            table.add_row(_text(result.host), _text((result.status.value, STATUS_STYLE[result.status])), *extras, _text(detail))
        self.console.print(table)

    def checks_table(self, checks: list[CheckResult], states: Optional[dict] = None) -> None:
        """A matrix of checks x hosts, then the detail and fix of everything not passing. `states`:
        {host: health state} (issue 36), a last row beside the verdicts."""
        if self.json_mode:
            return
        from rich.table import Table

        self.stop_progress()
        hosts = list(dict.fromkeys(c.host or "cluster" for c in checks))
        cells: dict[tuple[str, str], CheckResult] = {(c.check, c.host or "cluster"): c for c in checks}
        table = Table(title="preflight checks", title_justify="left")
        table.add_column("check")
        for host in hosts:
            table.add_column(_text(host), justify="center")
        for check in dict.fromkeys(c.check for c in checks):
            row = []
            for host in hosts:
                cell = cells.get((check, host))
                row.append(_text((cell.status.value, CHECK_STYLE[cell.status])) if cell else _text(("-", "dim")))
            table.add_row(_text(check), *row)
        if states:
            styles = {"healthy": "green", "suspect": "yellow", "quarantined": "bold red"}
            table.add_row(_text(("health", "bold")), *(_text((states.get(h, "-"), styles.get(states.get(h), "dim")))
                                                        for h in hosts))
        self.console.print(table)
        for check in checks:
            if check.status is not CheckStatus.PASS or self.verbose:
                self.console.print(_text((check.status.value, CHECK_STYLE[check.status]),
                                         f" {check.host or 'cluster'} {check.check}: {check.detail}"))
                if check.fix:
                    self.console.print(_text("    ", ("fix:", "bold"), f" {check.fix}"))

    def findings(self, findings: list[Finding], title: str = "diagnosis", similar=()) -> None:
        """The ranked causes (with their confidence), then the nearest known public cases (`similar`)."""
        if self.json_mode:
            return
        if not findings:
            self.console.print(_text((f"{title}: no failure found", "green")))
            return
        from rich.table import Table

        table = Table(title=_text(title), title_justify="left")
        for column in ("#", "cause", "conf", "host", "rank", "evidence", "fix"):
            table.add_column(column, overflow="fold")
        for index, finding in enumerate(findings, 1):
            style = "bold red" if index == 1 else ""
            table.add_row(str(index), _text((finding.cause, style)), f"{finding.confidence:.2f}",
                          _text(finding.host or "-"), "-" if finding.rank is None else str(finding.rank),
                          _text(finding.evidence), _text(finding.fix))
        self.console.print(table)
        for case in similar:
            self.console.print(_text((f"similar: {case.source} ({case.cause}, score {case.score:.2f})", "bold")))
            self.console.print(_text(f"    fix there: {case.fix}"))

    def plan(self, topology, commands: Mapping[str, dict]) -> None:
        """`run --plan`: the topology and the exact per-node command lines."""
        if self.json_mode:
            return
        from rich.table import Table

        table = Table(title=_text(f"plan: {topology.nnodes} nodes x {topology.nproc_per_node} = world size "
                                  f"{topology.world_size}, master {topology.master_addr}:{topology.port}"), title_justify="left")
        for column in ("node", "host", "ranks", "gpus", "nic", "local addr"):
            table.add_column(column)
        for node in topology.nodes:
            gpus = "cpu" if node.gpu_ids is None else ",".join(map(str, node.gpu_ids))
            table.add_row(str(node.node_rank), _text(node.host.name), f"{node.ranks.start}..{node.ranks.stop - 1}", gpus,
                          _text(node.nic or "-"), _text(node.local_addr))
        self.console.print(table)
        for note in topology.notes:
            self.console.print(_text(("note:", "yellow"), f" {note}"))
        for host, command in commands.items():
            env = " ".join(f"{k}={v}" for k, v in command["env"].items())
            self.console.print(_text((host, "bold"), f" (env: {env})"))
            self.console.print(_text("  " + command["command"]))

    def run_summary(self, record: Mapping) -> None:
        self.stop_live()
        if self.json_mode:
            return
        from rich.table import Table

        table = Table(title=_text(f"run {record['run_id']}"), title_justify="left")
        for column in ("host", "ranks", "exit", "run dir (on the node)"):
            table.add_column(column, overflow="fold")
        ranks = {n["host"]: n["ranks"] for n in record["topology"]}
        for host, node in record["nodes"].items():
            code = "lost" if node["lost"] else ("-" if node["exit_code"] is None else str(node["exit_code"]))
            style = "green" if code == "0" else "bold red"
            table.add_row(_text(host), f"{ranks[host][0]}..{ranks[host][1]}", _text((code, style)), _text(node["run_dir"]))
        self.console.print(table)
        failure = record.get("first_failure")
        if record.get("state") == "stopped":
            self.console.print(_text((f"run {record['run_id']} was stopped (clusterctl stop) after "
                                      f"{record['duration_s']:.1f}s", "bold yellow")))
        elif failure:
            where = f"{failure.get('host')}" + (f" rank {failure['rank']}" if failure.get("rank") is not None else "")
            self.console.print(_text(("first failure:", "bold red"), f" {where}"))
            for line in failure.get("log_tail", [])[-10:]:
                self.console.print(_text("  ", (line, "dim")))
            for finding in failure.get("diagnosis", [])[:1]:
                self.console.print(_text("  ", ("cause:", "bold"), f" {finding['cause']}  ", ("evidence:", "bold"),
                                         f" {finding['evidence']}"))
                self.console.print(_text("  ", ("fix:", "bold"), f" {finding['fix']}"))
            self.console.print("  more: clusterctl collect-logs")
        elif record["exit_code"] == 0:
            self.console.print(_text((f"run {record['run_id']} succeeded in {record['duration_s']:.1f}s", "green"),
                                     f"; outputs under {record['outputs']} on the nodes (clusterctl collect-logs)"))

    def runs_table(self, runs: list, shown: int = 5) -> None:
        """`status`: the latest runs of this directory's records (`--json` has more)."""
        if self.json_mode or not runs:
            return
        import time
        from rich.table import Table

        table = Table(title="runs", title_justify="left")
        for column in ("run", "state", "started", "ranks", "exit", "first failure"):
            table.add_column(column, overflow="fold")
        styles = {"succeeded": "green", "running": "cyan", "failed": "bold red", "unknown": "yellow"}
        for run in runs[:shown]:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started)) if run.started else "-"
            failure = run.first_failure or {}
            where = " ".join(str(x) for x in (failure.get("host"), failure.get("rank") is not None and
                                              f"rank {failure['rank']}", failure.get("cause")) if x)
            state = f"{run.state}, stalled {run.stalled_s:.0f}s" if getattr(run, "stalled_s", None) else run.state
            table.add_row(_text(run.run_id), _text((state, styles.get(run.state, "yellow"))), started,
                          "-" if run.world_size is None else str(run.world_size),
                          "-" if run.exit_code is None else str(run.exit_code), _text(where or "-"))
        self.console.print(table)

    def health_table(self, title: str, nodes: list, history: bool = False) -> None:
        """`clusterctl health`: a row per node (state, since, reason, last events), or with
        `history` a row per event of one node. `nodes`: health.record.NodeHealth."""
        if self.json_mode:
            return
        import time
        from rich.table import Table

        def when(at):
            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"

        table = Table(title=_text(title), title_justify="left")
        styles = {"healthy": "green", "suspect": "yellow", "quarantined": "bold red"}
        if history:
            for column in ("seq", "time", "source", "kind", "severity", "gpu", "evidence"):
                table.add_column(column, overflow="fold")
            for event in nodes[0].events:
                table.add_row(str(event.seq), when(event.at), event.source, event.kind, event.severity,
                              _text(event.gpu or "-"), _text(event.evidence or event.cause or "-"))
        else:
            for column in ("host", "state", "since", "reason", "last events"):
                table.add_column(column, overflow="fold")
            for node in nodes:
                last = ", ".join(f"{e.kind} ({e.source})" for e in node.events[-3:]) or "-"
                table.add_row(_text(node.host), _text((node.state, styles.get(node.state, ""))),
                              when(node.verdict.since), _text(node.verdict.reason or "-"), _text(last))
        self.console.print(table)

    def live_table(self, title: str, columns: Iterable[str], rows: Iterable[tuple], live: bool = False) -> None:
        """A table of plain cells (`top`); with `live`, redrawn in place on a terminal at each call."""
        if self.json_mode:
            return
        from rich.live import Live
        from rich.table import Table

        table = Table(title=_text(title), title_justify="left")
        for column in columns:
            table.add_column(_text(column), overflow="fold")
        for row in rows:
            table.add_row(*(_text(str(cell)) for cell in row))
        if not (live and self.console.is_terminal):
            self.console.print(table)
            return
        if self._live is None:
            self._live = Live(table, console=self.console, auto_refresh=False)
            self._live.start()
        self._live.update(table, refresh=True)

    def raw(self, text: str) -> None:
        """A document for programs (e.g. Prometheus metrics) on stdout, as it is."""
        if not self.json_mode:
            sys.stdout.write(OUTBOUND(text))

    def log_line(self, prefix: str, text: str, stream: str = "stdout") -> None:
        """`clusterctl logs`: a rank's line on stdout (the command's output, for pipes and grep),
        terminal-safe like every remote text here."""
        if self.json_mode:
            return
        from rich.console import Console

        with self._lock:
            if self._out is None:
                self._out = Console(file=Masked(sys.stdout), highlight=False, soft_wrap=True)
            self._out.print(_text((prefix, "red" if stream == "stderr" else "cyan"), " ", text))

    def message(self, text: str, style: str = "") -> None:
        if self.json_mode:
            return
        self.console.print(_text((text, style)))

    def error(self, text: str) -> None:
        self.stop_progress()
        self.stop_live()
        self.console.print(_text(("error:", "bold red"), " ", text))


def emit_json(document: dict, stream=None) -> None:
    """One JSON document. Control characters are escaped by json itself (and the output is
    ASCII); NaN and infinities, which a node's numbers may carry, are not JSON: null instead."""
    try:
        text = json.dumps(document, indent=2, default=str, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(document), indent=2, default=str, allow_nan=False)
    (stream or sys.stdout).write(OUTBOUND.json_text(text) + "\n")  # masked as the final text (ground/masking.py)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
