"""The run report (issue 41) as one self-contained HTML file: no script, no external font, style or
image; charts are inline SVG (observe/svg.py). Every text from the record, the logs or the nodes is
escaped. Pure: a ReportInput -> the HTML text."""
from __future__ import annotations

import time
from html import escape
from typing import Iterable, Optional

from clusterctl.observe.messages import diagnosis_of, duration_of, started_of, state_of
from clusterctl.observe.metrics_file import NodeMetrics
from clusterctl.observe.report_data import ReportInput
from clusterctl.observe.svg import Marker, Row, Series, Span, line_chart, seconds_label, timeline

OK, FAILED, LATE, NEUTRAL, EVENT = "#2ca02c", "#d62728", "#ff7f0e", "#7f7f7f", "#9467bd"
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:960px;color:#222}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:6px 0} td,th{padding:3px 10px 3px 0;text-align:left;vertical-align:top}
th{color:#555;font-weight:600} .state{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff}
.failure{border-left:4px solid #d62728;background:#fdf0f0;padding:8px 14px;margin:8px 0}
pre{white-space:pre-wrap;background:#f6f6f6;padding:6px 8px;margin:4px 0;font-size:12px}
.muted{color:#888} svg text{font-family:system-ui,sans-serif} .title{font-size:13px;font-weight:600}
.tick{font-size:10px;fill:#666} .legend,.label{font-size:11px} .onbar{font-size:10px;fill:#fff}
.grid{stroke:#e4e4e4;stroke-width:1} .node{display:flex;flex-wrap:wrap;gap:4px 16px}
"""
WIDTH = 460  # two charts a line
COLORS = {"succeeded": OK, "failed": FAILED, "stopped": NEUTRAL, "running": "#1f77b4"}


def render(data: ReportInput, now: Optional[float] = None) -> str:
    record, now = data.record, time.time() if now is None else now
    origin = _origin(record)
    sections = [_header(record, now), _failure(record), _timeline(record, origin, now, data.events), _ranks(data),
                _stragglers(record, origin), _metrics(data.metrics, origin), _notifications(data.notify_log)]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>clusterctl run {escape(data.run_id)}</title><style>{STYLE}</style></head><body>"
            + "".join(sections)
            + f"<p class=\"muted\">made by clusterctl report at {stamp}; it needs no network and runs no script.</p>"
            + "</body></html>\n")


def _origin(record: dict) -> float:
    return started_of(record) or 0.0


def _when(seconds) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds)) if isinstance(seconds, (int, float)) else "-"


def _table(rows: Iterable[tuple], head: Optional[tuple] = None) -> str:
    top = "<tr>" + "".join(f"<th>{escape(str(h))}</th>" for h in head) + "</tr>" if head else ""
    body = "".join("<tr>" + "".join(f"<td>{cell if isinstance(cell, _Html) else escape(str(cell))}</td>"
                                    for cell in row) + "</tr>" for row in rows)
    return f"<table>{top}{body}</table>"


class _Html(str):
    """Text already escaped (a link, a span)."""


def _header(record: dict, now: float) -> str:
    state = state_of(record)
    duration = duration_of(record, now)
    rows = [("cluster", record.get("cluster", "-")), ("backend", record.get("backend", "-")),
            ("started", _when(started_of(record))), ("duration", seconds_label(duration) if duration else "-"),
            ("exit code", record.get("exit_code")), ("world size", f"{record.get('world_size', '-')} "
                                                                   f"({record.get('nnodes', '-')} node(s) x {record.get('nproc_per_node', '-')})"),
            ("attempts", len(record.get("attempts") or []) or 1)]
    badge = f'<span class="state" style="background:{COLORS.get(state, NEUTRAL)}">{escape(state)}</span>'
    return f"<h1>Run {escape(str(record.get('run_id')))} {badge}</h1>" + _table(rows)


def _failure(record: dict) -> str:
    """The run's first failure; a run that healed itself: each attempt's that was relaunched, too."""
    attempts = _attempts(record)
    failures = [(a, a["first_failure"], True) for a in attempts[:-1] if isinstance(a.get("first_failure"), dict)]
    if isinstance(record.get("first_failure"), dict):
        failures.append((attempts[-1] if len(attempts) > 1 else None, record["first_failure"], False))
    if not failures:
        return "<h2>First failure</h2><p>none: " + ("the run succeeded" if record.get("exit_code") == 0
                                                     else "no rank was named") + "</p>"
    parts = ["<h2>First failure</h2>"] + [_one_failure(first, attempt, relaunched)
                                          for attempt, first, relaunched in failures]
    if record.get("heal_refused"):
        parts.append(f"<p>not relaunched: {escape(str(record['heal_refused']))}</p>")
    return "".join(parts)


def _one_failure(first: dict, attempt: Optional[dict], relaunched: bool) -> str:
    """One first failure: of the run, or of `attempt` (`relaunched`: the run went on after it)."""
    top = diagnosis_of(first)
    rank = f", rank {first.get('rank')}" if first.get("rank") is not None else ""
    which = f"attempt {attempt.get('attempt')}: " if attempt is not None else ""
    left_out = [f"{e.get('host')} left out" for e in (attempt or {}).get("excluded") or [] if isinstance(e, dict)]
    then = f" (relaunched{''.join('; ' + x for x in left_out)})" if relaunched else ""
    parts = [f"<div class=\"failure\"><p>{escape(which)}<b>{escape(top.cause)}</b> on "
             f"<b>{escape(str(first.get('host')))}</b>{escape(rank)} (exit code {escape(str(first.get('exit_code')))})"
             f"{escape(then)}</p>"]
    shown = set()
    for entry in (first.get("diagnosis") or [])[:3]:
        if not isinstance(entry, dict) or (entry.get("cause"), entry.get("fix")) in shown:
            continue  # the same cause and fix from another line: once is enough
        shown.add((entry.get("cause"), entry.get("fix")))
        confidence = entry.get("confidence")
        sure = f" ({confidence:.0%})" if isinstance(confidence, (int, float)) else ""
        parts.append(f"<p>cause: <b>{escape(str(entry.get('cause')))}</b>{sure}</p>"
                     f"<pre>{escape(str(entry.get('evidence') or ''))}</pre>"
                     f"<p>fix: {escape(str(entry.get('fix') or '-'))}</p>")
    return "".join(parts) + "</div>"


def _attempts(record: dict) -> list[dict]:
    attempts = [a for a in record.get("attempts") or [] if isinstance(a, dict)]
    if attempts:
        return attempts
    hosts = [n.get("host") for n in record.get("topology") or [] if isinstance(n, dict)]
    return [{"attempt": 1, "started": record.get("started"), "ended": record.get("ended"), "hosts": hosts,
             "exit_code": record.get("exit_code"), "first_failure": record.get("first_failure"), "excluded": []}]


def _timeline(record: dict, origin: float, now: float, events=()) -> str:
    attempts, rows, by_host = _attempts(record), [], {}
    end_of_run = max([a.get("ended") or now for a in attempts] + [record.get("ended") or 0]) - origin
    for a in attempts:
        start, end = (a.get("started") or origin) - origin, (a.get("ended") or now) - origin
        code = a.get("exit_code")
        color = OK if code == 0 else (NEUTRAL if code is None else FAILED)
        rows.append(Row(f"attempt {a.get('attempt')}", (Span(start, end, color, f"attempt {a.get('attempt')}: exit "
                                                                                 f"code {code}", f"exit {code}"),)))
        for host in a.get("hosts") or []:
            by_host.setdefault(host, {"spans": [], "markers": []})["spans"].append(
                Span(start, end, "#9ecae1", f"{host} in attempt {a.get('attempt')}"))
        failure = a.get("first_failure")
        if isinstance(failure, dict) and failure.get("host") in by_host:
            cause = diagnosis_of(failure).cause
            by_host[failure["host"]]["markers"].append(Marker(end, FAILED, f"first failure: {cause}, rank {failure.get('rank')}"))
    for s in record.get("stragglers") or []:
        if isinstance(s, dict) and s.get("host") in by_host and isinstance(s.get("since"), (int, float)):
            until = s.get("until") if isinstance(s.get("until"), (int, float)) else origin + end_of_run
            by_host[s["host"]]["spans"].append(Span(s["since"] - origin, until - origin, LATE,
                                                    f"straggler rank {s.get('rank')}: {s.get('evidence', '')}", "late"))
    for event in events:
        if event.host in by_host and event.kind != "straggler":  # a straggler is its orange span
            by_host[event.host]["markers"].append(Marker(event.at - origin, EVENT, f"{event.kind}: {event.evidence}"))
    rows += [Row(host, tuple(v["spans"]), tuple(v["markers"])) for host, v in by_host.items()]
    chart = timeline("attempts and nodes over the run (red tick: the first failure; purple: an event of the "
                     "health record; orange: a straggler)", rows, (0.0, max(end_of_run, 1.0)))
    listed = _table(((e.host, seconds_label(max(e.at - origin, 0.0)), e.kind, e.evidence) for e in events),
                    ("host", "at", "event", "evidence")) if events else ""
    return f"<h2>Timeline</h2>{chart}{listed}"


def _ranks(data: ReportInput) -> str:
    links: dict = {}
    for link in data.logs:
        cell = (f'<a href="{escape(link.href)}">{escape(link.name)}</a>' if link.href
                else f'<span class="muted">{escape(link.name)}</span>')
        links.setdefault(link.host, []).append(cell)
    nodes = data.record.get("nodes") if isinstance(data.record.get("nodes"), dict) else {}
    rows = []
    for node in data.record.get("topology") or []:
        if not isinstance(node, dict):
            continue
        host, ranks = node.get("host"), node.get("ranks") or ["-", "-"]
        state = nodes.get(host) or {}
        rows.append((host, node.get("node_rank"), f"{ranks[0]}-{ranks[-1]}", node.get("gpus") or "-",
                     state.get("exit_code", "-"), "lost" if state.get("lost") else "",
                     _Html(" ".join(links.get(host, [])) or "-")))
    where = (f"logs: the collected bundle {escape(str(data.bundle))}" if data.bundle
             else "no collected bundle: run <code>clusterctl collect-logs</code> for the logs and metrics")
    return ("<h2>Nodes and ranks</h2>" + _table(rows, ("host", "node rank", "ranks", "GPUs", "exit code", "", "logs"))
            + f"<p class=\"muted\">{where}</p>")


def _stragglers(record: dict, origin: float) -> str:
    found = [s for s in record.get("stragglers") or [] if isinstance(s, dict)]
    if not found:
        return "<h2>Stragglers</h2><p>none named</p>"
    rows = [(s.get("host"), s.get("rank"), s.get("gpu") if s.get("gpu") is not None else "-",
             f"+{s['lag_s']} s/step" if s.get("lag_s") is not None else f"+{s.get('lag_share', 0):.0%} of a step",
             seconds_label(s["since"] - origin) if isinstance(s.get("since"), (int, float)) else "-",
             s.get("evidence", "")) for s in found]
    return "<h2>Stragglers</h2>" + _table(rows, ("host", "rank", "GPU", "late by", "named at", "evidence"))


def _metrics(metrics: tuple[NodeMetrics, ...], origin: float) -> str:
    if not metrics:
        return ("<h2>Metrics</h2><p class=\"muted\">no metrics.jsonl in the collected bundle (the nodes' samples "
                "arrive with <code>clusterctl collect-logs</code>)</p>")
    parts = ["<h2>Metrics</h2>"]
    for node in metrics:
        if not node.samples:
            continue
        span = (min(0.0, node.samples[0].t - origin), node.samples[-1].t - origin)
        charts = [line_chart(f"{node.host}: utilisation (%)", _util(node, origin), span, "%", 100.0, WIDTH),
                  line_chart(f"{node.host}: memory used (%)", _memory(node, origin), span, "%", 100.0, WIDTH)]
        for key, title, unit in (("power_w", "GPU power (W)", " W"), ("temp_c", "GPU temperature (C)", " C")):
            series = _gpu_series(node, origin, key)
            if series:
                charts.append(line_chart(f"{node.host}: {title}", series, span, unit, width=WIDTH))
        parts.append(f'<div class="node">{"".join(charts)}</div>')
        if node.skipped_lines:
            parts.append(f"<p class=\"muted\">{node.skipped_lines} line(s) of {escape(node.source)} were not samples</p>")
    return "".join(parts)


def _points(node: NodeMetrics, origin: float, value) -> tuple:
    return tuple((s.t - origin, v) for s in node.samples if (v := value(s)) is not None)


def _gpu_value(sample, index: int, key: str):
    gpu = next((g for g in sample.gpus if g.index == index), None)
    return getattr(gpu, key) if gpu is not None else None


def _util(node: NodeMetrics, origin: float) -> list[Series]:
    series = [Series("CPU", _points(node, origin, lambda s: s.cpu_pct))]
    series += [Series(f"GPU {i}", _points(node, origin, lambda s, i=i: _gpu_value(s, i, "util_pct")))
               for i in node.gpu_indices()]
    return [s for s in series if s.points]


def _memory(node: NodeMetrics, origin: float) -> list[Series]:
    def gpu_pct(sample, index):
        used, total = _gpu_value(sample, index, "mem_used_mb"), _gpu_value(sample, index, "mem_total_mb")
        return 100.0 * used / total if used is not None and total else None

    series = [Series("host", _points(node, origin, lambda s: s.mem_pct))]
    series += [Series(f"GPU {i}", _points(node, origin, lambda s, i=i: gpu_pct(s, i))) for i in node.gpu_indices()]
    return [s for s in series if s.points]


def _gpu_series(node: NodeMetrics, origin: float, key: str) -> list[Series]:
    series = [Series(f"GPU {i}", _points(node, origin, lambda s, i=i: _gpu_value(s, i, key))) for i in node.gpu_indices()]
    return [s for s in series if s.points]


def _notifications(lines: tuple[str, ...]) -> str:
    if not lines:
        return ""
    return "<h2>Notifications</h2><pre>" + escape("\n".join(lines)) + "</pre>"
