"""docs/benchmarks.png: cold fan-out wall time vs node count, one line per tool; with --distribute,
docs/distribute.png: image distribution, a cold `up` vs node count (issue 22); with --cpu,
docs/cpu_account.png: CPU per node per minute by process kind (issue 52); with --scale,
docs/scale.png: the journey's steps vs Docker node count, wall time and controller CPU per node (issue 21).

    bench/.venv/bin/python bench/plot.py [--distribute | --scale] [bench/results.json] [docs/benchmarks.png]

Points are medians; bars span the fastest and slowest round.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STYLE = {
    "clusterctl": ("tab:blue", "o", "-"),
    "clusterctl (before fixes)": ("tab:cyan", "o", "--"),
    "ansible (forks 5)": ("tab:red", "s", "-"),
    "ansible (forks N)": ("tab:orange", "s", "--"),
    "pdsh": ("tab:green", "^", "-"),
    "parallel ssh": ("tab:gray", "v", ":"),
}


def series(fanout: dict) -> dict[str, list[tuple[int, float, float, float]]]:
    """tool -> [(nodes, median, min, max)] over successful rounds."""
    lines: dict[str, list] = {}
    for nodes, block in sorted(fanout.items(), key=lambda kv: int(kv[0])):
        for tool, samples in block["samples"].items():
            walls = [s["wall"] for s in samples if s["rc"] == 0]
            if walls:
                lines.setdefault(tool, []).append((int(nodes), statistics.median(walls), min(walls), max(walls)))
    return lines


def plot(results: dict, out: Path) -> Path:
    fanout = results.get("fanout") or {}
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    for tool, points in series(fanout).items():
        color, marker, style = STYLE.get(tool, (None, "o", "-"))
        xs = [p[0] for p in points]
        med = [p[1] for p in points]
        err = [[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]]
        label = tool.replace("forks N", "forks = nodes")
        ax.errorbar(xs, med, yerr=err, label=label, color=color, marker=marker, linestyle=style, capsize=3)
    machine = results.get("machine", {})
    ax.set_xlabel("nodes (rehearsal cluster: network namespaces with real sshd)")
    ax.set_ylabel("wall time, s (median; bars: min-max)")
    ax.set_title(f"Cold fan-out of `true`, host keys checked ({machine.get('nproc', '?')} CPU cores)")
    sizes = sorted(int(n) for n in fanout)
    if sizes:
        ax.set_xticks(sizes)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def plot_distribute(results: dict, out: Path) -> Path:
    """docs/distribute.png: a cold `up`'s time and the bytes sent from the registry's machine vs nodes."""
    block = results.get("distribute") or {}
    sizes = sorted(int(n) for n in block)
    fig, (time_ax, bytes_ax) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=120)
    for mode, color, label in (("registry", "tab:red", "every node pulls (registry)"),
                               ("peers", "tab:blue", "peers (chain, then rounds)"),
                               ("one_node", "tab:gray", "one node's pull (the floor)")):
        points = [(n, statistics.median(walls)) for n in sizes
                  if (walls := [s["wall"] for s in block[str(n)].get(mode, []) if s.get("rc") == 0])]
        if points:
            time_ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=color, label=label)
        if mode == "one_node":
            continue
        ratio = [(n, statistics.median(sent) / (block[str(n)]["size_mb"] * 1e6)) for n in sizes
                 if (sent := [s["control_bytes"] for s in block[str(n)].get(mode, []) if s.get("rc") == 0])]
        if ratio:
            bytes_ax.plot([p[0] for p in ratio], [p[1] for p in ratio], marker="o", color=color, label=label)
    bytes_ax.axhline(2, color="tab:green", linestyle=":", label="goal: <= 2x")
    for ax, ylabel in ((time_ax, "cold up, s"), (bytes_ax, "bytes from the registry's machine / image size")):
        ax.set_xlabel("Docker nodes (rehearsal cluster)")
        ax.set_ylabel(ylabel)
        ax.set_xticks(sizes)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    first = block[str(sizes[0])] if sizes else {}
    fig.suptitle(f"Image distribution: {first.get('size_mb', '?')} MB of random data, "
                 f"registry link {first.get('rate') or 'unlimited'}")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def plot_scale(results: dict, out: Path) -> Path:
    """docs/scale.png: `up` (warm), `run` and `collect-logs` at 4..64 Docker nodes: wall time, and the
    controller's CPU time per node (flat: the controller's work per node does not grow with N)."""
    block = results.get("scale_docker") or {}
    sizes = sorted(int(n) for n in block)
    fig, (time_ax, cpu_ax) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=120)
    for label, color in (("up (warm)", "tab:blue"), ("run", "tab:orange"), ("collect-logs", "tab:green"),
                         ("up (cold)", "tab:purple")):
        points = [(n, s) for n in sizes for s in (block[str(n)].get(label) or [])[:1] if s.get("rc") == 0]
        if not points:
            continue
        time_ax.plot([n for n, _ in points], [s["wall"] for _, s in points], marker="o", color=color, label=label)
        cpu = [(n, s["cpu_s"] / n * 1000) for n, s in points if s.get("cpu_s") is not None]
        cpu_ax.plot([n for n, _ in cpu], [c for _, c in cpu], marker="o", color=color, label=label)
    for ax, ylabel in ((time_ax, "wall s"), (cpu_ax, "controller CPU ms per node")):
        ax.set_xlabel("Docker nodes (rehearsal cluster, 2 cores)")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("The journey at many nodes: each step's wall time and what it costs the controller")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def plot_cpu(results: dict, out: Path) -> Path:
    """docs/cpu_account.png (issue 52): clusterctl's node-side CPU per node per minute by process kind, in
    steady state and over the whole run, beside the job's own, for each measured run (bench/cpu_account.py)."""
    runs = {k: r for k, r in (results.get("cpu_account") or {}).items() if r.get("rc") == 0}
    order = sorted(runs, key=lambda k: (k != "local", int(k) if k.isdigit() else 0))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=120, sharey=True)
    parts = ((axes[0], "steady_per_node_minute", "steady state"), (axes[1], "whole_per_node_minute", "whole run"))
    # one colour per kind in both panels (the legend is the right panel's)
    kinds = sorted({k for _ax, part, _t in parts for r in runs.values() for k in r.get(part, {})})
    for ax, part, title in parts:
        bottom = [0.0] * len(order)
        for index, kind in enumerate(kinds):
            values = [runs[k].get(part, {}).get(kind, 0.0) for k in order]
            colour = plt.cm.tab20(index) if index < 20 else plt.cm.tab20b(index % 20)  # 20+ kinds: none shared
            ax.bar(order, values, bottom=bottom, label=kind, color=colour, hatch="//" if kind == "job" else None)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_title(title)
        ax.set_xlabel("run (local, or rehearsal nodes)")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("CPU s per node per minute")
    axes[1].legend(fontsize=7, ncol=2)
    fig.suptitle("Every CPU second of a run by process kind (the job hatched; 60 = one core)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    draws = {"--distribute": (plot_distribute, "distribute.png"), "--scale": (plot_scale, "scale.png"),
             "--cpu": (plot_cpu, "cpu_account.png")}
    draw, default = draws.get(args[0], (plot, "benchmarks.png")) if args else (plot, "benchmarks.png")
    args = args[1:] if args[:1] and args[0] in draws else args
    source = Path(args[0]) if args else ROOT / "bench" / "results.json"
    target = Path(args[1]) if len(args) > 1 else ROOT / "docs" / default
    print(draw(json.loads(source.read_text()), target))
