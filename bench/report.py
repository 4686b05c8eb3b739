"""bench/results.json -> verdicts (printed), docs/benchmarks.md (from bench/benchmarks.md.in) and the plot."""
from __future__ import annotations

import re
import subprocess
import sys
from typing import Optional

import cpu_report
import launch_report
from common import BENCH, REPO, VENV, summary

TEMPLATE = BENCH / "benchmarks.md.in"
DOC = REPO / "docs" / "benchmarks.md"
PLOT = REPO / "docs" / "benchmarks.png"
DISTRIBUTE_PLOT = REPO / "docs" / "distribute.png"
SCALE_PLOT = REPO / "docs" / "scale.png"
NOTES = BENCH / "notes.md"
PASS, FAIL, NA = "PASS", "FAIL", "n/a"


def _s(x: Optional[float], digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _summaries(block: Optional[dict]) -> dict:
    return {tool: summary(samples) for tool, samples in (block or {}).get("samples", {}).items()}


def _cell(stat: dict) -> str:
    if stat["median"] is None:
        return "–"
    text = f"**{stat['median']:.2f}** ({stat['min']:.2f}–{stat['max']:.2f})"
    return text + (f" ⚠ {stat['failed']} failed" if stat["failed"] else "")


# --------------------------------------------------------------------------- tables


def machine_table(m: dict) -> str:
    rows = [("CPU", f"{m.get('nproc')} × {m.get('cpu_model')} (`nproc`, `lscpu`)"), ("memory", f"{m.get('memory_gib')} GiB"),
            ("kernel", m.get("kernel")), ("OS", m.get("os")), ("Python", m.get("python")),
            ("OpenSSH", m.get("openssh")), ("ansible-core", m.get("ansible_core")), ("pdsh", m.get("pdsh")),
            ("paramiko", m.get("paramiko")), ("Docker", m.get("docker")), ("measured", m.get("date"))]
    return "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def fanout_table(results: dict) -> str:
    fanout = results.get("fanout") or {}
    sizes = sorted(fanout, key=int)
    if not sizes:
        return "_not measured_"
    tools = list(next(iter(fanout.values()))["samples"])
    head = "| tool | " + " | ".join(f"{n} nodes: wall s" for n in sizes) + " | " + \
        " | ".join(f"CPU ms/host @{n}" for n in sizes) + " |"
    lines = [head, "|---" * (1 + 2 * len(sizes)) + "|"]
    for tool in tools:
        stats = [summary(fanout[n]["samples"][tool]) for n in sizes]
        cpu = [_s(s["cpu"] / int(n) * 1000, 0) if s["cpu"] is not None else "–" for s, n in zip(stats, sizes)]
        lines.append(f"| {tool} | " + " | ".join(_cell(s) for s in stats) + " | " + " | ".join(cpu) + " |")
    return "\n".join(lines)


def simple_table(block: Optional[dict], per: int = 1, per_label: str = "") -> str:
    if not block:
        return "_not measured_"
    n = block.get("nodes")
    lines = ["| tool | wall s, median (min–max) | rounds | CPU s (median) |"
             + (f" CPU ms per host {per_label} |" if n else ""), "|---|---|---|---|" + ("---|" if n else "")]
    for tool, stat in _summaries(block).items():
        row = f"| {tool} | {_cell(stat)} | {stat['n']} | {_s(stat['cpu'])} |"
        if n:
            row += f" {_s(stat['cpu'] / (n * per) * 1000, 1) if stat['cpu'] is not None else '–'} |"
        lines.append(row)
    return "\n".join(lines)


def playbook_tables(results: dict) -> str:
    books = results.get("playbook") or {}
    if not books:
        return "_not measured_"
    parts = []
    for n in sorted(books, key=int):
        parts.append(f"**{n} nodes, {books[n]['tasks']} tasks**\n\n" +
                     simple_table(books[n], per=books[n]["tasks"], per_label="per task"))
    return "\n\n".join(parts)


def up_tables(results: dict) -> str:
    parts = []
    warm = results.get("up_warm")
    if warm:
        first = warm.get("first", {})
        parts.append(f"**warm, {warm['nodes']} Docker nodes** (the converging run before it: "
                     f"{_s(first.get('wall'))} s, exit {first.get('rc')})\n\n" + simple_table(warm))
    cold = results.get("up_cold")
    if cold:
        parts.append(f"**cold, {cold['nodes']} Docker nodes** (image removed from every engine first)\n\n"
                     + simple_table(cold))
    return "\n\n".join(parts) or "_not measured_"


def launch_table(results: dict) -> str:
    block = results.get("launch")
    if not block:
        return "_not measured_"
    import statistics

    good = [s for s in block["samples"]["clusterctl run"] if s["rc"] == 0]
    lines = ["| stage (seconds after `clusterctl run` started) | first rank, median | last rank, median |",
             "|---|---|---|"]
    names = {"t_start": "rank process started (before `import torch`)", "t_init": "past init_process_group",
             "t_first_collective": "past the first collective", "t_end": "done (generation, GIF, barrier)"}
    for stage, name in names.items():
        values = [s[stage] for s in good if stage in s]
        if values:
            lines.append(f"| {name} | {statistics.median(v['min'] for v in values):.2f} | "
                         f"**{statistics.median(v['max'] for v in values):.2f}** |")
    walls = [s["wall"] for s in good]
    if walls:
        lines.append(f"| `clusterctl run` returned | | {statistics.median(walls):.2f} |")
    floors = [s["wall"] for s in block["samples"].get("floor", []) if s.get("rc") == 0]
    starts = [s["t_start"]["min"] for s in good if "t_start" in s]
    if floors:
        floor = statistics.median(floors)
        ratio = f" (first rank started at {statistics.median(starts) / floor:.2f}x)" if starts else ""
        lines.append(f"| floor: parallel `ssh NODE docker exec ... python3 -c 'import torch.distributed.run'`{ratio} "
                     f"| {floor:.2f} | |")
    failed = len(block["samples"]["clusterctl run"]) - len(good)
    return "\n".join(lines) + f"\n\n{block['nodes']} nodes × {block['ranks_per_node']} CPU ranks (gloo), " \
        f"{len(good)} runs" + (f", {failed} failed" if failed else "") + "." + launch_by_nodes_table(results)


def launch_by_nodes_table(results: dict) -> str:
    """The same launch on more nodes (bench/launch.py --nodes N), one row per node count (medians)."""
    import statistics

    blocks = {"4": results.get("launch"), **(results.get("launch_by_nodes") or {})}
    rows = []
    for n in sorted((k for k, v in blocks.items() if v), key=int):
        block = blocks[n]
        good = [s for s in block["samples"]["clusterctl run"] if s["rc"] == 0]
        floors = [s["wall"] for s in block["samples"].get("floor", []) if s.get("rc") == 0]
        starts = [s["t_start"]["min"] for s in good if "t_start" in s]
        firsts = [s["t_first_collective"]["max"] for s in good if "t_first_collective" in s]
        if not (good and floors and starts):
            continue
        floor, start = statistics.median(floors), statistics.median(starts)
        rows.append(f"| {n} | {start:.2f} | {floor:.2f} | {start / floor:.2f}x | "
                    f"{statistics.median(firsts):.2f} | {statistics.median(s['wall'] for s in good):.2f} | {len(good)} |")
    if len(rows) < 2:
        return ""
    return ("\n\nBy node count (each row its own sandbox; medians):\n\n| nodes | first rank started, s | floor, s | "
            "first rank / floor | last rank past the first collective, s | `run` returned, s | runs |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def distribute_table(results: dict) -> str:
    """Issue 22: a cold `up` with every node pulling from the registry vs peers (bench/distribute.py);
    then the same on a sandbox kept in memory (--in-memory: no disk shared by every node's engine)."""
    text = _distribute_rows(results.get("distribute"))
    memory = results.get("distribute_in_memory")
    if memory:
        text += ("\n\nThe same with the whole sandbox on a tmpfs (`bench/distribute.py --in-memory`): every "
                 "engine's data root in memory, so the nodes' loads no longer queue on this machine's one disk "
                 "(they still share its 2 cores):\n\n" + _distribute_rows(memory))
    return text


def _distribute_rows(block: Optional[dict]) -> str:
    if not block:
        return "_not measured_"
    import statistics

    lines = ["| nodes | image | registry link | one node's pull | registry: time | registry: bytes sent | "
             "peers: time | peers: bytes sent | peers vs one node | image update (peers) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n in sorted(block, key=int):
        b = block[n]

        def median(mode: str, key: str):
            values = [s[key] for s in b.get(mode, []) if s.get("rc") == 0]
            return statistics.median(values) if values else None

        one, reg, peer = median("one_node", "wall"), median("registry", "wall"), median("peers", "wall")
        reg_b, peer_b = median("registry", "control_bytes"), median("peers", "control_bytes")
        size = b["size_mb"] * 1e6
        cell = lambda v, fmt: "-" if v is None else fmt.format(v)  # noqa: E731
        lines.append(f"| {n} | {b['size_mb']} MB | {b['rate'] or 'unlimited'} | {cell(one, '{:.1f} s')} | "
                     f"{cell(reg, '{:.1f} s')} | {cell(reg_b and reg_b / size, '{:.1f}x the image')} | "
                     f"{cell(peer, '{:.1f} s')} | {cell(peer_b and peer_b / size, '{:.1f}x the image')} | "
                     f"{cell(peer and one and peer / one, '{:.1f}x')} | {update_cell(b.get('update'), int(n))} |")
    return "\n".join(lines)


def update_cell(sample: Optional[dict], nodes: int) -> str:
    """The update's bytes node to node, per receiving node, against the new layer's size."""
    if not sample or sample.get("rc") != 0:
        return "-"
    per_node = sample.get("peer_bytes", 0) / max(1, nodes - 1) / 1e6
    return f"+{sample['update_mb']} MB layer: {per_node:.1f} MB to each node, {sample['wall']:.1f} s"


def scale_table(results: dict) -> str:
    """Issue 21: the controller at 64-240 SSH-only nodes (bench/scale.py): best of the rounds."""
    block = results.get("scale")
    if not block:
        return "_not measured_"
    lines = ["| nodes | command | wall s (best) | vs parallel ssh | peak RSS MB | peak threads | peak fds | rc |",
             "|---|---|---|---|---|---|---|---|"]
    costs = []
    for n in sorted(block, key=int):
        b = block[n]
        floor = min((s["wall"] for s in b.get("parallel ssh", []) if s.get("rc") == 0), default=None)
        for label in ("exec true", "check", "run --plan", "up", "run --plan (facts from up)"):
            samples = b.get(label) or []
            if not samples:
                continue
            best = min(samples, key=lambda s: s["wall"])
            ratio = f"{best['wall'] / floor:.2f}x" if floor and label == "exec true" else ""
            lines.append(f"| {n} | `{label}` | {best['wall']:.2f} | {ratio} | {best['rss_mb']:.0f} | "
                         f"{best['threads']} | {best['fds']} | {best['rc']} |")
        if floor:
            lines.append(f"| {n} | {b.get('parallel ssh nodes', n)} parallel `ssh` clients | {floor:.2f} | 1.00x | | | | |")
        for label, title in (("ansible raw", "`ansible -m raw -f 50`"), ("pdsh", "`pdsh -f 256`")):
            samples = [s for s in b.get(label) or [] if s.get("rc") == 0] or b.get(label) or []
            if samples:
                best = min(samples, key=lambda s: s["wall"])
                ratio = f"{best['wall'] / floor:.2f}x" if floor else ""
                lines.append(f"| {n} | {title} | {best['wall']:.2f} | {ratio} | | | | {best['rc']} |")
        cost = b.get("node_cost") or {}
        cpu = cost.get("cpu_millicores_per_node")
        costs.append(f"{n} nodes: {cost.get('mem_mb_per_node')} MB of the machine's memory per node at rest "
                     f"(sshd {cost.get('sshd_rss_mb')} MB RSS)"
                     + (f", {cpu} millicores of CPU per node at rest" if cpu is not None else ""))
    text = "\n".join(lines) + "\n\n" + "; ".join(costs) + "."
    docker = results.get("scale_docker") or {}
    if docker:
        rows = ["| Docker nodes | step | wall s | controller CPU s | CPU ms per node | peak RSS MB | peak threads | "
                "peak fds | rc |", "|---|---|---|---|---|---|---|---|---|"]
        for n in sorted(docker, key=int):
            for label in ("up (cold)", "up (warm)", "run", "collect-logs", "down"):
                for sample in docker[n].get(label) or []:
                    cpu = sample.get("cpu_s")
                    cpu_cells = f"{cpu:.2f} | {cpu / int(n) * 1000:.0f}" if cpu is not None else " | "
                    rows.append(f"| {n} | `{label}` | {sample['wall']:.2f} | {cpu_cells} | {sample['rss_mb']:.0f} | "
                                f"{sample['threads']} | {sample['fds']} | {sample['rc']} |")
        text += "\n\nThe journey at many Docker nodes (`bench/scale.py --docker N`):\n\n" + "\n".join(rows)
    return text


def collect_tables(results: dict) -> str:
    block = results.get("collect")
    if not block:
        return "_not measured_"
    total = block["bytes"]
    parts = []
    for key, title in (("shared", "shared outputs (clusterctl fetches them once, through the first node)"),
                       ("per_node", "per-node directories (one stream per node for every tool)")):
        if key not in block:
            continue
        lines = [f"**{title}**", "", "| tool | wall s, median (min–max) | MB/s (median) | CPU s |", "|---|---|---|---|"]
        for tool, stat in _summaries(block[key]).items():
            mbps = total / stat["median"] / 1e6 if stat["median"] else None
            lines.append(f"| {tool} | {_cell(stat)} | {_s(mbps, 0)} | {_s(stat['cpu'])} |")
        parts.append("\n".join(lines))
    return f"{block['nodes']} nodes × {block['blob_mb']} MiB of random data ({total / 1e6:.0f} MB).\n\n" + "\n\n".join(parts)


def phases_table(results: dict) -> str:
    phases = results.get("phases") or {}
    return ", ".join(f"{k} {v:.0f} s" for k, v in phases.items()) or "–"


# --------------------------------------------------------------------------- verdicts


def _median(block: Optional[dict], tool: str) -> Optional[float]:
    if not block or tool not in block.get("samples", {}):
        return None
    return summary(block["samples"][tool])["median"]


def verdicts(results: dict) -> list[tuple[str, str, str]]:
    out = []
    fanout = results.get("fanout") or {}
    for n in ("16", "32"):
        cc = _median(fanout.get(n), "clusterctl")
        ans = _median(fanout.get(n), "ansible (forks 5)")
        floor = _median(fanout.get(n), "parallel ssh")
        if cc and ans:
            out.append((f"fan-out @{n}: ≥ 1.5× faster than Ansible (default forks)", f"{ans / cc:.1f}× "
                        f"({cc:.2f} s vs {ans:.2f} s)", PASS if ans / cc >= 1.5 else FAIL))
        else:
            out.append((f"fan-out @{n}: ≥ 1.5× faster than Ansible (default forks)", "not measured", NA))
        if cc and floor:
            out.append((f"fan-out @{n}: within 1.3× of parallel OpenSSH", f"{cc / floor:.2f}× "
                        f"({cc:.2f} s vs {floor:.2f} s)", PASS if cc / floor <= 1.3 else FAIL))
    small, big = _median(fanout.get("4"), "clusterctl"), _median(fanout.get("32"), "clusterctl")
    out.append(("fan-out 4 → 32 nodes grows ≤ 2.5×", f"{big / small:.2f}× ({small:.2f} → {big:.2f} s)"
                if small and big else "not measured", (PASS if big / small <= 2.5 else FAIL) if small and big else NA))
    book = (results.get("playbook") or {}).get("16")
    cc, ans = _median(book, "clusterctl play"), _median(book, "ansible-playbook (forks 5)")
    out.append(("6-task playbook @16: ≥ 3× faster than ansible-playbook",
                f"{ans / cc:.1f}× ({cc:.2f} s vs {ans:.2f} s)" if cc and ans else "not measured",
                (PASS if ans / cc >= 3 else FAIL) if cc and ans else NA))
    warm = results.get("up_warm")
    w = _median(warm, "clusterctl up (warm)")
    nodes = warm["nodes"] if warm else 16
    out.append(("`up` warm on 16 nodes < 3 s", f"{w:.2f} s on {nodes} nodes" if w else "not measured",
                (PASS if w < 3 and nodes >= 16 else (FAIL if w >= 3 else f"{PASS} ({nodes} nodes)")) if w else NA))
    h = _median(results.get("help"), "clusterctl --help")
    out.append(("`clusterctl --help` < 0.3 s", f"{h:.3f} s" if h else "not measured",
                (PASS if h < 0.3 else FAIL) if h else NA))
    block = results.get("collect") or {}
    per = block.get("per_node")
    cc, scp = _median(per, "clusterctl collect-logs"), _median(per, "scp -r, parallel")
    out.append(("collect-logs ≥ 80 % of parallel scp throughput (per-node dirs)",
                f"{scp / cc * 100:.0f} % ({cc:.2f} s vs {scp:.2f} s)" if cc and scp else "not measured",
                (PASS if scp / cc >= 0.8 else FAIL) if cc and scp else NA))
    one = _median(per, "scp -r, one command")
    if cc and one:
        out.append(("collect-logs (per-node dirs) vs one `scp -r` of the same three directories",
                    f"{one / cc * 100:.0f} % ({cc:.2f} s vs {one:.2f} s)", "info"))
    out += scale_verdicts(results)
    shared = block.get("shared")
    cc, scp1, scpn = (_median(shared, t) for t in ("clusterctl collect-logs", "scp, 1 stream", "scp, parallel"))
    if cc and scp1 and scpn:
        out.append(("collect-logs, shared outputs (fetched once): vs 1 scp stream / vs 3 parallel scps",
                    f"{scp1 / cc * 100:.0f} % / {scpn / cc * 100:.0f} %", "info"))
    return out


def scale_verdicts(results: dict) -> list[tuple[str, str, str]]:
    """Issue 21 (exec at 240 nodes against the parallel-ssh floor) and issue 22 (16 nodes)."""
    import statistics

    out = []
    big = (results.get("scale") or {}).get("240") or {}
    cc = min((s["wall"] for s in big.get("exec true", []) if s.get("rc") == 0), default=None)
    floor = min((s["wall"] for s in big.get("parallel ssh", []) if s.get("rc") == 0), default=None)
    out.append(("`exec true` @240: within 1.0× of parallel OpenSSH",
                f"{cc / floor:.2f}× ({cc:.2f} s vs {floor:.2f} s)" if cc and floor else "not measured",
                (PASS if cc / floor <= 1.0 else FAIL) if cc and floor else NA))
    ansible = min((s["wall"] for s in big.get("ansible raw", []) if s.get("rc") == 0), default=None)
    out.append(("`exec true` @240: ≥ 3× faster than `ansible -m raw -f 50`",
                f"{ansible / cc:.1f}× ({cc:.2f} s vs {ansible:.2f} s)" if cc and ansible else "not measured",
                (PASS if ansible / cc >= 3 else FAIL) if cc and ansible else NA))
    block = (results.get("distribute") or {}).get("16") or {}

    def median(mode: str, key: str):
        values = [s[key] for s in block.get(mode, []) if s.get("rc") == 0]
        return statistics.median(values) if values else None

    sent, peers, one = median("peers", "control_bytes"), median("peers", "wall"), median("one_node", "wall")
    size = block.get("size_mb", 0) * 1e6
    out.append(("image to 16 nodes (peers): ≤ 2× the image from the registry's machine",
                f"{sent / size:.2f}×" if sent and size else "not measured",
                (PASS if sent / size <= 2 else FAIL) if sent and size else NA))
    out.append(("cold `up` of 16 nodes (peers) ≤ 3× one node's pull",
                f"{peers / one:.1f}× ({peers:.1f} s vs {one:.1f} s)" if peers and one else "not measured",
                (PASS if peers / one <= 3 else FAIL) if peers and one else NA))
    block = (results.get("distribute_in_memory") or {}).get("16") or {}
    peers, one = median("peers", "wall"), median("one_node", "wall")
    if peers and one:
        out.append(("the same, the sandbox on a tmpfs (no disk shared by the 16 engines)",
                    f"{peers / one:.1f}× ({peers:.1f} s vs {one:.1f} s)", PASS if peers / one <= 3 else FAIL))
    return out


def verdict_table(rows) -> str:
    return "| goal | measured | verdict |\n|---|---|---|\n" + "\n".join(f"| {g} | {m} | **{v}** |" for g, m, v in rows)


# --------------------------------------------------------------------------- publish


def heal_table(heal) -> str:
    """bench/heal.py: each phase of a node cut mid-run, alone and since the cut (goal: relaunch < 60 s)."""
    if not heal:
        return "_not measured yet: `make bench BENCH_ARGS=--only=heal`_"
    rows = ["| phase | this phase (s) | since the cut (s) |", "|---|---|---|"]
    for name in ("detection", "stop", "replan", "relaunch", "resume"):
        rows.append(f"| {name} | {heal.get(name + '_s', '-')} | {heal.get(name + '_since_cut_s', '-')} |")
    done = heal.get("done") or {}
    rows.append(f"\nexit {heal.get('rc')}; attempt {done.get('attempt')} resumed from {done.get('resumed_from')}, "
                f"ran steps {(done.get('ran') or ['-'])[0]}..{(done.get('ran') or ['-'])[-1]} ({heal.get('measured')})")
    return "\n".join(rows)


def heal_replicas_table(heal) -> str:
    """bench/heal.py measure_replicas: the engine's split of each relaunch on node-local checkpoints, and goodput
    (launch and first step are both counted from the launch order)."""
    if not heal:
        return "_not measured yet: `make bench BENCH_ARGS=--only=heal`_"
    keys = ("detection_s", "stop_s", "replan_s", "backoff_s", "transfer_s", "launch_s", "first_step_s")
    rows = ["| relaunch | resumed from | " + " | ".join(k[:-2] + " (s)" for k in keys) + " |",
            "|---|---|" + "---|" * len(keys)]
    for number, relaunch in enumerate(heal.get("relaunches") or [], 2):
        step = (relaunch.get("resumed_from") or "-").rsplit("/", 1)[-1]
        rows.append(f"| attempt {number} | {step} | " + " | ".join(str(relaunch.get(k, "-")) for k in keys) + " |")
    rows.append(f"\nexit {heal.get('exit_code')}; {heal.get('cuts')} node(s) cut, one every {heal.get('every_s')} s; goodput "
                f"{heal.get('goodput')} (the steps' own time over {heal.get('wall_s')} s of wall time) "
                f"({heal.get('measured')})")
    return "\n".join(rows)


def heal_gib_table(heal) -> str:
    """bench/heal.py measure_gib: each run's split of a relaunch with a 1 GiB checkpoint per node, and the medians."""
    if not heal:
        return "_not measured yet: `make bench BENCH_ARGS=--only=heal_gib`_"
    keys = ("detection_s", "stop_s", "replan_s", "backoff_s", "transfer_s", "launch_s", "first_step_s", "resumed_s",
            "lost_steps")
    rows = ["| run | cut at | resumed from | " + " | ".join(k.removesuffix("_s") + (" (s)" if k.endswith("_s") else "")
                                                       for k in keys) + " |", "|---|---|---|" + "---|" * len(keys)]
    for number, run in enumerate(heal.get("runs") or [], 1):
        step = (run.get("resumed_from") or "-").rsplit("/", 1)[-1]
        rows.append(f"| {number} | step {run.get('cut_at_step')} | {step} | "
                    + " | ".join(str(run.get(k, "-")) for k in keys) + " |")
    median = heal.get("median") or {}
    rows.append("| **median** | | | " + " | ".join(f"**{median[k]}**" if k in median else "-" for k in keys) + " |")
    rows.append(f"\n{heal.get('pad_mb')} MiB a shard, one shard a node ({heal.get('measured')})")
    return "\n".join(rows)


def replica_cost_table(cost) -> str:
    """bench/heal.py measure_replica_cost: the DDP loop's step with and without replicas, bytes moved per step."""
    if not cost:
        return "_not measured yet: `make bench BENCH_ARGS=--only=heal_gib`_"
    rows = ["| replicas | run | step median (s) | step mean (s) | save median (s) | bytes moved per step |",
            "|---|---|---|---|---|---|"]
    for replicas in ("0", "1"):
        for number, run in enumerate(cost.get(replicas) or [], 1):
            rows.append(f"| {replicas} | {number} | {run['step_median_s']} | {run['step_mean_s']} | "
                        f"{run['save_median_s']} | {run['bytes_per_step']} |")
    rows.append(f"\n{cost.get('steps')} steps, a {cost.get('pad_mb')} MiB checkpoint every {cost.get('every')} steps "
                f"({cost.get('measured')})")
    return "\n".join(rows)


def render(results: dict) -> str:
    text = TEMPLATE.read_text()
    values = {
        "machine": machine_table(results.get("machine", {})),
        "verdicts": verdict_table(verdicts(results)),
        "fanout": fanout_table(results),
        "help": simple_table(results.get("help")),
        "playbook": playbook_tables(results),
        "up": up_tables(results),
        "launch": launch_table(results),
        "launch_vs_hand": launch_report.table(results),
        "cpu_account": cpu_report.table(results),
        "collect": collect_tables(results),
        "heal": heal_table(results.get("heal")),
        "heal_replicas": heal_replicas_table(results.get("heal_replicas")),
        "heal_gib": heal_gib_table(results.get("heal_gib")),
        "replica_cost": replica_cost_table(results.get("replica_cost")),
        "distribute": distribute_table(results),
        "scale": scale_table(results),
        "phases": phases_table(results),
        "config": ", ".join(f"{k} {v}" for k, v in (results.get("config") or {}).items()),
        "notes": NOTES.read_text().strip() if NOTES.exists() else "",  # hand-written: what remains and why
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values.get(m.group(1), m.group(0)), text)


def _has_matplotlib(python: str) -> bool:
    return subprocess.run([python, "-c", "import matplotlib"], capture_output=True).returncode == 0


def publish(results: dict) -> int:
    rows = verdicts(results)
    DOC.write_text(render(results))
    python = VENV / "bin" / "python"
    if python.exists() and results.get("fanout"):
        subprocess.run([str(python), str(BENCH / "plot.py"), str(BENCH / "results.json"), str(PLOT)], check=False)
    if python.exists() and results.get("distribute"):
        subprocess.run([str(python), str(BENCH / "plot.py"), "--distribute", str(BENCH / "results.json"),
                        str(DISTRIBUTE_PLOT)], check=False)
    if python.exists() and len(results.get("scale_docker") or {}) > 1:
        subprocess.run([str(python), str(BENCH / "plot.py"), "--scale", str(BENCH / "results.json"),
                        str(SCALE_PLOT)], check=False)
    if python.exists() and results.get("cpu_account"):
        subprocess.run([str(python), str(BENCH / "plot.py"), "--cpu", str(BENCH / "results.json"),
                        str(REPO / "docs" / "cpu_account.png")], check=False)
    if results.get("launch_vs_hand"):
        plotter = sys.executable if _has_matplotlib(sys.executable) else str(python) if python.exists() else None
        if plotter:  # no matplotlib anywhere: the page without its plot
            subprocess.run([plotter, str(BENCH / "launch_report.py"), str(BENCH / "results.json"),
                            str(REPO / "docs" / "launch_vs_hand.png")], check=False)
    width = max(len(g) for g, _, _ in rows)
    print("\nverdicts:")
    for goal, measured, verdict in rows:
        print(f"  {verdict:5s} {goal:{width}s}  {measured}")
    print(f"\nwritten: {DOC.relative_to(REPO)}, {PLOT.relative_to(REPO)}, bench/results.json")
    return 0


if __name__ == "__main__":
    import json

    from common import RESULTS

    sys.exit(publish(json.loads(RESULTS.read_text())))
