"""docs/benchmarks.png: cold fan-out wall time vs node count, one line per tool.

    bench/.venv/bin/python bench/plot.py [bench/results.json] [docs/benchmarks.png]

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


if __name__ == "__main__":
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "bench" / "results.json"
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs" / "benchmarks.png"
    print(plot(json.loads(source.read_text()), target))
