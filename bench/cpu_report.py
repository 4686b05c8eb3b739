"""docs/benchmarks.md's account of every CPU second of a run (bench/cpu_account.py, issue 52): the
node-side kinds per node per minute, the controller's CPU per phase, and the end of a run."""
from __future__ import annotations

from launch_report import _f

# the kinds in the order a reader meets them; a kind measured and not named here follows, by name
ORDER = ("job", "wrapper", "metrics sampler", "follow", "poll", "stacks", "straggler py-spy", "keeper", "sshd",
         "sshd:poll", "sshd:follow", "sshd:stacks", "sshd:wrapper", "shim", "engine")
STRETCHES = ("probe and launch", "ranks start, import torch, init", "ranks run", "end of the run")
PHASES = ("probe", "launch", "first_rank", "last_rank_done", "torchrun_exits", "watch_ended", "streams_ended",
          "recorded", "returned")


def _runs(results: dict) -> list[tuple[str, dict]]:
    runs = results.get("cpu_account") or {}
    order = sorted(runs, key=lambda k: (k != "local", int(k) if k.isdigit() else 0))
    return [(k, runs[k]) for k in order if runs[k].get("rc") == 0]


def _label(key: str) -> str:
    return "local" if key == "local" else f"{key} nodes"


def _node_side(kind: str) -> bool:
    """clusterctl's, on a node: neither the job nor the controller (reported apart)."""
    return kind != "job" and not kind.startswith("controller")


def kinds_table(results: dict) -> str:
    runs = _runs(results)
    if not runs:
        return "_(not measured yet: `python3 bench/cpu_account.py --nodes 2,8 --local`)_"
    kinds = {k for _, r in runs for part in ("steady_per_node_minute", "whole_per_node_minute", "launch_per_node")
             for k in r.get(part, {})}
    kinds = [k for k in ORDER if k in kinds] + sorted(kinds - set(ORDER))
    head = ["process kind"] + [f"{_label(k)}: {what}" for k, _ in runs
                               for what in ("steady", "whole run", "launch (s)")]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kind in kinds:
        cells = [kind]
        for _, r in runs:
            cells += [_f(r.get("steady_per_node_minute", {}).get(kind), 3),
                      _f(r.get("whole_per_node_minute", {}).get(kind), 3),
                      _f(r.get("launch_per_node", {}).get(kind), 2)]
        rows.append("| " + " | ".join(cells) + " |")
    ours = []
    for key, r in runs:
        steady = r.get("steady_per_node_minute", {})
        mine = sum(v for k, v in steady.items() if _node_side(k))
        straggler = sum(v for k, v in steady.items() if k.split(":")[-1] == "stacks")
        share = _launch_share(r)
        ours.append(f"{_label(key)}: {mine:.3f} CPU s/min per node in steady state ({mine / 60 * 100:.2f}% of a core; "
                    f"the straggler watch's py-spy rounds {straggler:.3f} of it, beside their share of `sshd`), "
                    f"{_f(share, 1)}% of the job's CPU during launch (over {r.get('launch_s')} s); the controller "
                    f"{_f(steady.get('controller'), 3)} CPU s/min in steady state; "
                    f"steady window {r.get('steady_s')} s, run {r.get('wall', 0):.1f} s wall, measured {r.get('measured')}"
                    + (f"; ranks holding {r['hold_s']:g} s" if r.get("hold_s") else "") + _late(r))
    return "\n".join(rows) + "\n\nclusterctl's node side (every kind but `job` and `controller`), per node:\n\n" + \
        "\n".join(f"- {line}" for line in ours)


def _late(run: dict) -> str:
    """The last 30 s of a long hold: the straggler watch at its steady pace."""
    late = run.get("late_per_node_minute")
    if not late:
        return ""
    mine = sum(v for k, v in late.items() if _node_side(k))
    largest = ", ".join(f"{k} {v:.3f}" for k, v in sorted(late.items(), key=lambda kv: -kv[1]) if _node_side(k))
    return f"; its last 30 s {mine:.3f} CPU s/min per node ({mine / 60 * 100:.2f}% of a core: {largest})"


def _steady_node_side(run: dict) -> tuple[float, float]:
    """(clusterctl's node side, the straggler rounds' part) in steady state, CPU s per node per minute."""
    steady = run.get("steady_per_node_minute", {})
    return (sum(v for k, v in steady.items() if _node_side(k)),
            sum(v for k, v in steady.items() if k.split(":")[-1] == "stacks"))


def _launch_share(run: dict):
    """clusterctl's node side during launch as a % of the job's CPU then, or None where not kept."""
    launch = run.get("launch_per_node", {})
    return sum(v for k, v in launch.items() if _node_side(k)) / launch["job"] * 100 if launch.get("job") else None


# earlier accounts kept in bench/results.json, oldest first: {"commit": what ran, "runs": {size: run}}
HISTORY = ("cpu_account_before", "cpu_account_after_cuts", "cpu_account_now1", "cpu_account_65f2f0f",
           "cpu_account_poll52_first")


def before_after_table(results: dict) -> str:
    """The node side in steady state at each kept account (before the straggler watch's cuts, just after
    them) and now, per size measured at least twice: the total, the straggler rounds, `sshd` (the session
    process of the node's one connection), the engine and shim, and the share of the job's CPU in launch."""
    snapshots = [(results[key].get("commit", key), results[key].get("runs") or {}) for key in HISTORY
                 if results.get(key)] + [("now", dict(_runs(results)))]
    sizes = [k for k, _ in _runs(results)]
    rows = ["| steady state, per node | measured | node side CPU s/min (% of a core) | straggler rounds | `sshd` | "
            "engine + shim | the rest | launch: node side / job CPU |", "|---|---|---|---|---|---|---|---|"]
    for key in sizes:
        seen = list({runs[key].get("measured"): (label, runs[key]) for label, runs in reversed(snapshots)
                     if key in runs}.values())[::-1]  # a run kept twice (as `now` too): its first label
        if len({r.get("measured") for _, r in seen}) < 2:
            continue
        for label, r in seen:  # as the earlier runs were accounted: an ended child's tail with its parent
            r = dict(r, steady_per_node_minute=r.get("steady_parent_tails") or r.get("steady_per_node_minute", {}))
            total, stacks = _steady_node_side(r)
            steady = r.get("steady_per_node_minute", {})
            sshd, engine = steady.get("sshd", 0.0), steady.get("engine", 0.0) + steady.get("shim", 0.0)
            rows.append(f"| {_label(key)}, {label} | {r.get('measured')} | {total:.3f} ({total / 60 * 100:.2f}%) | "
                        f"{stacks:.3f} | {sshd:.3f} | {engine:.3f} | {total - stacks - sshd - engine:.3f} | "
                        f"{_f(_launch_share(r), 1)}{'%' if _launch_share(r) is not None else ''} |")
    return "\n".join(rows) if len(rows) > 2 else ""


def stretch_table(results: dict) -> str:
    """Each run's stretches between its phases (bench/cpu_account.py `by_phase`): the job's CPU and
    clusterctl's node side per node, as a share of the job's and of a core, and its largest kinds."""
    runs = [(k, r) for k, r in _runs(results) if r.get("by_phase")]
    if not runs:
        return ""
    rows = ["| run | stretch | wall s | job CPU s per node | node side CPU s per node | of the job's CPU | "
            "% of a core | the node side's largest kinds (CPU s per node) |", "|---|---|---|---|---|---|---|---|"]
    for key, r in runs:
        for name in STRETCHES:
            part = r["by_phase"].get(name)
            if part is None:
                continue
            per_node = part["per_node"]
            ours = {k: v for k, v in per_node.items() if _node_side(k)}
            mine, job = sum(ours.values()), per_node.get("job", 0.0)
            largest = ", ".join(f"{k} {v:.2f}" for k, v in sorted(ours.items(), key=lambda kv: -kv[1])[:3] if v >= 0.005)
            rows.append(f"| {_label(key)} | {name} | {part['s']:.1f} | {job:.2f} | {mine:.2f} | "
                        f"{f'{mine / job * 100:.0f}%' if job >= 0.5 else '-'} | {mine / part['s'] * 100:.2f}% | {largest} |")
    return "\n".join(rows)


def controller_table(results: dict) -> str:
    runs = [(k, r) for k, r in _runs(results) if r.get("phases_cpu")]
    if not runs:
        return ""
    head = ["phase (reached)"] + [f"{_label(k)}: wall s / CPU s" for k, _ in runs]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in PHASES:
        cells = [name]
        for _, r in runs:
            wall, cpu = r["phases"], r["phases_cpu"]
            if name not in wall:
                cells.append("-")
                continue
            before = [p for p in PHASES[:PHASES.index(name)] if p in wall]
            dw = wall[name] - (wall[before[-1]] if before else 0)
            dc = cpu.get(name, 0) - (cpu.get(before[-1], 0) if before else 0)
            cells.append(f"+{dw:.2f} / +{dc:.2f}")
        rows.append("| " + " | ".join(cells) + " |")
    rows.append("| whole command (getrusage of the child) | " + " | ".join(
        f"{r['wall']:.2f} / {r.get('controller_cpu', 0):.2f}" for _, r in runs) + " |")
    return "\n".join(rows)


def end_table(results: dict) -> str:
    runs = [(k, r) for k, r in _runs(results) if r.get("end_of_run")]
    if not runs:
        return ""
    names = ("torchrun_exits", "watch_ended", "streams_ended", "recorded", "returned")
    head = ["from the last torchrun's exit to"] + [_label(k) for k, _ in runs]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        rows.append(f"| {name} | " + " | ".join(_f(r["end_of_run"].get(name), 3) for _, r in runs) + " |")
    rows.append("| the process's exit (wall) | " + " | ".join(
        _f(r["wall"] - r["end_of_run"]["last_torchrun_exit"], 3) for _, r in runs) + " |")
    return "\n".join(rows)


def table(results: dict) -> str:
    parts = [kinds_table(results), before_after_table(results), stretch_table(results), controller_table(results),
             end_table(results)]
    return "\n\n".join(p for p in parts if p)
