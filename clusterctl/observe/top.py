"""`clusterctl top`: what one look at a running run's nodes reads, and the rows it shows (pure but the
command's argv).

One round trip per node (`probe_command`): the last line of its metrics.jsonl (node/node_metrics.py)
and, for each local rank of torchrun's latest attempt, the last line of whichever of its stdout and
stderr was written last; agent.exit once torchrun ended. `parse_probe` reads it back into a NodeView;
`rows` lays the views out: a row per node (CPU, memory, network), then one per GPU with the rank
torchrun gave it (local rank i on GPU i, torchrun's default) and that rank's last line.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from clusterctl.documents.commands import NodeLook
from clusterctl.documents.convert import as_document
from clusterctl.models import Command, Inventory

COLUMNS = ("node", "gpu", "rank", "util %", "mem MiB", "power W", "temp C", "sm MHz", "throttle", "last line")


@dataclass(frozen=True)
class NodeView:
    """One node as `top` saw it: its latest sample (None before the first), each local rank's last
    (stream, line), torchrun's exit code once it ended, or why the node could not be read."""
    host: str
    sample: Optional[dict] = None
    lines: dict = field(default_factory=dict)
    exit_code: Optional[int] = None
    error: Optional[str] = None
    first_rank: int = 0

    @property
    def ranks(self) -> dict:
        """global rank (as text) -> {stream, line}"""
        return {str(self.first_rank + local): {"stream": s, "line": t} for local, (s, t) in sorted(self.lines.items())}

    def to_json(self) -> dict:
        return as_document(NodeLook, self)


def probe_command(inventory: Inventory, run_dir: str) -> Command:
    """node/run_files.py `probe`, through the no-follow layer. Markers start each part; a rank's line is
    cut at 300 bytes."""
    from clusterctl.plan import node_files

    return node_files.command(inventory, run_dir, "probe", timeout=20)


def parse_probe(host: str, stdout: str, first_rank: int = 0, mask: Callable[[str], str] = lambda t: t) -> NodeView:
    sample, lines, exit_code, part = None, {}, None, ""
    for line in stdout.split("\n"):  # not splitlines(): a rank's `\r`-redrawn line is one line
        if line.startswith("clusterctl-top: "):
            return NodeView(host, error=line.partition(": ")[2], first_rank=first_rank)
        if line == "clusterctl-top-sample":
            part = "sample"
        elif line.startswith("clusterctl-top-rank "):
            local, stream, text = (line.split(" ", 3)[1:] + ["", ""])[:3]
            if local.isascii() and local.isdigit():
                lines[int(local)] = (stream, mask(text.rsplit("\r", 1)[-1]))
            part = ""
        elif line.startswith("clusterctl-top-exit "):
            exit_code = _int(line.split(" ", 1)[1])
        elif part == "sample" and line.strip():
            sample, part = _sample(line), ""
    return NodeView(host, sample, lines, exit_code, first_rank=first_rank)


def _int(text: str) -> Optional[int]:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _sample(line: str) -> Optional[dict]:
    try:
        found = json.loads(line)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _num(value, digits: int = 0) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    return f"{value:.{digits}f}"


def _node_row(view: NodeView, now: float) -> tuple:
    state = view.error or ("exited %s" % view.exit_code if view.exit_code is not None else "running")
    s = view.sample
    if s is None:
        return (view.host, "-", "-", "-", "-", "-", "-", "-", "-", f"{state}; no sample yet")
    age = now - float(s.get("t") or now)
    net = f"net rx {_num((s.get('net_rx_bytes') or 0) / 1e6)} MB tx {_num((s.get('net_tx_bytes') or 0) / 1e6)} MB"
    return (view.host, "cpu", "-", _num(s.get("cpu_pct"), 1), f"{_num(s.get('mem_used_mb'))}/{_num(s.get('mem_total_mb'))}",
            "-", "-", "-", "-", f"{state}; {net}; sample {max(0, age):.0f}s old")


def rows(views: list[NodeView], now: Optional[float] = None) -> list[tuple]:
    """The table's rows (COLUMNS): a node row, then its GPUs (or its ranks, on a node without GPUs)."""
    now = time.time() if now is None else now
    out = []
    for view in views:
        out.append(_node_row(view, now))
        gpus = [g for g in ((view.sample or {}).get("gpus") or []) if isinstance(g, dict)]
        for position, gpu in enumerate(gpus):
            local = gpu.get("index") if isinstance(gpu.get("index"), int) else position
            stream, text = view.lines.get(local, ("", ""))
            rank = str(view.first_rank + local) if local in view.lines else "-"
            out.append(("", str(local), rank, _num(gpu.get("util_pct")),
                        f"{_num(gpu.get('mem_used_mb'))}/{_num(gpu.get('mem_total_mb'))}", _num(gpu.get("power_w")),
                        _num(gpu.get("temp_c")), _num(gpu.get("sm_clock_mhz")),
                        ",".join(gpu.get("throttle") or []) or "-", text))
        if not gpus:
            for local, (stream, text) in sorted(view.lines.items()):
                out.append(("", "-", str(view.first_rank + local), "-", "-", "-", "-", "-", "-", text))
    return out
