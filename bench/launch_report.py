"""§4a of docs/benchmarks.md: `clusterctl run` beside torchrun typed by hand (bench/launch_vs_hand.py,
issue 40): the table, the node-side CPU, and the plot docs/launch_vs_hand.png.

    python3 bench/launch_report.py bench/results.json docs/launch_vs_hand.png   # the plot (matplotlib)
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Optional

GOALS = {2: (1.1, 1.05), 8: (1.3, 1.2)}  # first rank, returned: at most this many times the hand way's
WAYS = (("hand", "by hand"), ("before", "`clusterctl run` before issue 40"), ("clusterctl", "`clusterctl run`"))
PARTS = ("sshd", "docker", "wrapper", "torchrun")


def _blocks(results: dict) -> dict:
    """{nodes: block} of the latest measurement (launch_vs_hand.LABEL.N; "after" wins)."""
    labels = results.get("launch_vs_hand") or {}
    chosen = labels.get("after") or labels.get("latest") or next(iter(labels.values()), {})
    return {int(n): block for n, block in chosen.items()}


def _series(results: dict) -> list[tuple[int, str, str, dict]]:
    """(nodes, way, its label, block) of every way measured: issue 40's (`after`, with the tree from
    before it) first, then each later measurement (any other label) with its date."""
    labels = results.get("launch_vs_hand") or {}
    out = []
    for n, block in _blocks(results).items():
        out += [(n, way, _label(block, way, label), block) for way, label in WAYS if block.get(way)]
    by_date = sorted(labels.items(), key=lambda kv: min(str(b.get("measured", "")) for b in kv[1].values()))
    for name, blocks in by_date:
        if name == "after" or not labels.get("after"):
            continue
        for n, block in blocks.items():
            out += [(int(n), way, f"{_label(block, way, label)}, {block.get('measured')}", block)
                    for way, label in WAYS if block.get(way)]
    return sorted(out, key=lambda row: row[0])


def _label(block: dict, way: str, label: str) -> str:
    """A way's name in the tables: the tree a measurement's `before` way ran says what it is before."""
    return f"`clusterctl run` {block['before_label']}" if way == "before" and block.get("before_label") else label


def _f(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table(results: dict) -> str:
    series = _series(results)
    if not series:
        return "_not measured yet: `python3 bench/launch_vs_hand.py --nodes 2,8`_"
    rows = ["| nodes | way | first rank starts after, s | returns after, s | first rank / by hand | returns / by hand "
            "| goal | node-side CPU per node, % of a core | runs |", "|---|---|---|---|---|---|---|---|---|"]
    for n, way, label, block in series:
        ours = block[way]
        ratio = (block.get("ratio") or {}).get(way) or {}
        goal = GOALS.get(n)
        rows.append(f"| {n} | {label} | {_f(ours.get('first_rank'))} | {_f(ours.get('returned'))} | "
                    f"{_f(ratio.get('first_rank')) + 'x' if ratio else ''} | "
                    f"{_f(ratio.get('returned')) + 'x' if ratio else ''} | "
                    f"{f'<= {goal[0]}x, <= {goal[1]}x' if goal and way == 'clusterctl' else ''} | "
                    f"{cpu_cell(block, way)} | {ours.get('runs', '-')} |")
    return "\n".join(rows) + "\n\n" + phases_table(series) + "\n\n" + cpu_table(series) + launch_cpu_table(series)


def node_cpu(block: dict, way: str) -> Optional[dict]:
    """{part: CPU seconds per minute, the median node}, and "total" (what is not the idle engine's)."""
    nodes = ((block.get("node_cpu") or {}).get(way) or {}).get("per_minute") or {}
    if not nodes:
        return None
    out = {part: statistics.median(v.get(part, 0.0) for v in nodes.values()) for part in PARTS}
    return out


def cpu_cell(block: dict, way: str) -> str:
    """The machinery beyond the hand way's: sshd + wrapper + torchrun over the hand way's torchrun (its
    monitor loop is the same both ways); the engines' idle CPU is the same both ways and left out."""
    ours, hand = node_cpu(block, way), node_cpu(block, "hand")
    if ours is None:
        return "-"
    if way == "hand":
        return f"{(ours['sshd'] + ours['torchrun']) / 60 * 100:.2f} (ssh + torchrun)"
    extra = ours["sshd"] + ours["wrapper"] + ours["torchrun"] - (hand["torchrun"] if hand else 0.0)
    return f"{extra / 60 * 100:.2f}"


def phases_table(series: list) -> str:
    rows = ["| nodes | run | probe | launch | first_rank | last_rank_done | torchrun_exits | returned |",
            "|---|---|---|---|---|---|---|---|"]
    for n, way, label, block in series:
        if way != "clusterctl":
            continue
        phases = (block.get("clusterctl") or {}).get("phases") or {}
        rows.append(f"| {n} | {label} | " + " | ".join(_f(phases.get(k)) for k in
                                                      ("probe", "launch", "first_rank", "last_rank_done",
                                                       "torchrun_exits", "returned")) + " |")
    return "`clusterctl run --json`'s `phases` (medians, seconds since the command started):\n\n" + "\n".join(rows)


def cpu_table(series: list) -> str:
    rows = ["| nodes | way | sshd tree | node's engine (dockerd, containerd, shim) | wrapper | torchrun itself |",
            "|---|---|---|---|---|---|"]
    for n, way, label, block in series:
        cpu = node_cpu(block, way)
        if cpu:
            rows.append(f"| {n} | {label} | " + " | ".join(_f(cpu[p], 3) for p in PARTS) + " |")
    return ("Node-side CPU seconds per minute while the ranks hold 20 s after the barrier (median node; "
            "bench/nodecpu.py says how each is read):\n\n" + "\n".join(rows))


def launch_cpu_table(series: list) -> str:
    """What each way cost a node during the launch, beside its ranks (node_cpu.WAY.launch, issue 52)."""
    rows = []
    for n, way, label, block in series:
        spent = ((block.get("node_cpu") or {}).get(way) or {}).get("launch") or {}
        if spent:
            rows.append(f"| {n} | {label} | {_f(spent.get('seconds'), 1)} | " + " | ".join(
                _f(spent.get(p), 3) for p in ("sshd", "docker", "wrapper", "per_node")) + " |")
    if not rows:
        return ""
    return ("\n\nNode-side CPU seconds during the launch (the command's start to the last rank's first collective; "
            "the same runs, median node; the ranks not counted):\n\n| nodes | way | launch, s | sshd tree | node's "
            "engine (dockerd, containerd, shim) | wrapper | per node |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def plot(results: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = _series(results)
    sizes = sorted({n for n, *_rest in series})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), dpi=120)
    for ax, key, title in ((axes[0], "first_rank", "first rank starts after"), (axes[1], "returned", "command returns after")):
        for label in dict.fromkeys(label.split(", 20")[0] + (", now" if ", 20" in label else "")
                                   for _n, _way, label, _b in series):
            points = [(n, block[way][key]) for n, way, full, block in series
                      if (full.split(", 20")[0] + (", now" if ", 20" in full else "")) == label
                      and block[way].get(key) is not None]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label.replace("`", ""))
        ax.set_title(title)
        ax.set_xlabel("Docker nodes (rehearsal cluster, 2 ranks each)")
        ax.set_ylabel("seconds")
        ax.set_xticks(sizes)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("clusterctl run vs torchrun typed by hand (import torch, init, all_reduce, barrier)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


if __name__ == "__main__":
    import json

    plot(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
