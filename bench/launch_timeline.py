"""Where `clusterctl run`'s time to its first rank goes (issue 52), on a Docker sandbox: one `run --json`
per round in a child process that times, from its own start, every command it runs on a node (each SSH
connection's open, each command's round trip, each stream's start), by what it is (`python3 -I -S -c`
node programs by program and operation, `docker exec` by what it execs, facts sections by name), beside
the run's `phases` and the ranks' own start times (examples/allreduce.py's records). The controller's
imports and parsing are what comes before the first connection. Medians over the rounds; per command the
node that ended last (what the launch waited for).

    python3 bench/launch_timeline.py --nodes 2 --reps 3 [--before DIR]   # as root; a sandbox of its own

`--before DIR`: a clusterctl from before (`git archive BASE clusterctl | tar -x -C DIR`), its rounds alternating
with this checkout's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, WORK, clusterctl_env, fresh_dir, log, timed  # noqa: E402


def _label(cmd) -> str:
    from launch_starts import label

    argv = list(cmd.argv) if hasattr(cmd, "argv") else [str(cmd)]
    if "exec" in argv[:3] and argv[0].endswith("docker"):  # docker exec [opts] CONTAINER ARGV...
        rest = [a for a in argv[2:] if not a.startswith("-")]
        return f"docker exec{' -d' if '-d' in argv else ''}: {label(rest[1:]) if len(rest) > 1 else '?'}"
    if argv[:2] == ["sudo", "-n"] or argv[:3] == ["sudo", "-n", "--"]:
        return "sudo " + _label(type(cmd)(tuple(a for a in argv if a not in ("sudo", "-n", "--"))))
    return label(argv)


def child(out: Path, tree: Path, argv: list[str]) -> int:
    """A clusterctl run (the one in `tree`) with every node command timed (the patches below), its records
    written to `out`."""
    sys.path.insert(0, str(tree))
    from clusterctl.run.phases import process_started

    t0 = process_started()
    rows, lock = [], threading.Lock()

    def add(kind, host, what, start, end):
        with lock:
            rows.append({"kind": kind, "host": host, "what": what, "start": round(start - t0, 3),
                         "end": round(end - t0, 3)})

    from clusterctl.transport import base, ssh

    run, opened, stream = base._Runs.run, ssh.SSHTransport.open, ssh.SSHTransport.open_stream

    def timed_run(self, cmd, on_line=None):
        start = time.time()
        try:
            return run(self, cmd, on_line)
        finally:
            add("command", self.host.name, _label(cmd), start, time.time())

    def timed_open(self):
        start = time.time()
        try:
            return opened(self)
        finally:
            add("connect", self.host.name, "ssh connect", start, time.time())

    def timed_stream(self, cmd):
        start = time.time()
        try:
            return stream(self, cmd)
        finally:
            add("stream", self.host.name, _label(cmd), start, time.time())

    base._Runs.run, ssh.SSHTransport.open, ssh.SSHTransport.open_stream = timed_run, timed_open, timed_stream
    add("controller", "", "interpreter started to clusterctl.cli imported", t0, t0)
    from clusterctl.cli import main

    add("controller", "", "clusterctl.cli imported", time.time(), time.time())
    code = main(argv)
    out.write_text(json.dumps({"t0": t0, "rows": rows}))
    return code


def one_round(sandbox, inventory: Path, env: dict, index: int, tree: Path = REPO) -> dict:
    from launch_vs_hand import _ranks

    out = WORK / f"launch-timeline-{index}.json"
    started = time.time()
    done = timed([sys.executable, __file__, "--child", str(out), "--tree", str(tree), "--", "run", "--json", "-i",
                  str(inventory), str(REPO / "examples" / "prompt.txt")], env=dict(env, PYTHONPATH=str(tree)),
                 timeout=600)
    document = json.loads(done.pop("_stdout", b"").decode() or "{}")
    timeline = json.loads(out.read_text())
    ranks = _ranks(sandbox, document.get("run_id") or "")
    # the child's t0 is its process's start, `started` just before it: the ranks' times from the child's t0
    first = round(min(r["t_start"] for r in ranks) - timeline["t0"], 3) if ranks else None
    return {"rc": done["rc"], "phases": document.get("phases") or {}, "rows": timeline["rows"], "first_rank": first,
            "spawn": round(timeline["t0"] - started, 3)}


def summary(rounds: list[dict]) -> list[tuple[str, float, float, int]]:
    """(what, start, end, count) medians over the rounds: per kind of command, its first start and the
    last node's end in each round."""
    per: dict[str, list[tuple[float, float, int]]] = {}
    for r in rounds:
        seen: dict[str, list] = {}
        for row in r["rows"]:
            key = f"{row['kind']}: {row['what']}"
            s = seen.setdefault(key, [row["start"], row["end"], 0])
            s[0], s[1], s[2] = min(s[0], row["start"]), max(s[1], row["end"]), s[2] + 1
        for key, (start, end, count) in seen.items():
            per.setdefault(key, []).append((start, end, count))
    rows = [(key, statistics.median(v[0] for v in vals), statistics.median(v[1] for v in vals),
             int(statistics.median(v[2] for v in vals))) for key, vals in per.items()]
    return sorted(rows, key=lambda row: row[1])


def main(argv=None) -> int:
    if argv is None and "--child" in sys.argv:
        at = sys.argv.index
        return child(Path(sys.argv[at("--child") + 1]), Path(sys.argv[at("--tree") + 1]), sys.argv[at("--") + 1:])
    parser = argparse.ArgumentParser(description="where clusterctl run's time to its first rank goes")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="a directory holding clusterctl/ from before")
    args = parser.parse_args(argv)
    from clusterctl.sandbox import down, up
    from launch_vs_hand import bench_inventory

    trees = {"now": REPO, **({"before": args.before.resolve()} if args.before else {})}
    if args.before:
        import compileall

        compileall.compile_dir(str(args.before / "clusterctl"), quiet=1)
    sandbox = up(args.nodes, docker=True)
    rounds: dict[str, list] = {way: [] for way in trees}
    try:
        state = fresh_dir(WORK / f"launch-timeline-{args.nodes}-state")
        env = clusterctl_env(state)
        converged = timed([sys.executable, "-m", "clusterctl", "up", sandbox.inventory_path], env=env, timeout=900)
        if converged["rc"] != 0:
            raise RuntimeError(f"`clusterctl up` failed: {converged.get('err', '')[-300:]}")
        inventory = bench_inventory(sandbox)
        for index in range(args.reps):
            for way, tree in trees.items():
                rounds[way].append(one_round(sandbox, inventory, env, index, tree))
                log(f"{way} round {index + 1}: rc {rounds[way][-1]['rc']}, first rank {rounds[way][-1]['first_rank']}s, "
                    f"phases {rounds[way][-1]['phases']}")
    finally:
        down(sandbox.state_dir)
    for way, runs in rounds.items():
        good = [r for r in runs if r["rc"] == 0 and r["first_rank"] is not None]
        if not good:
            continue
        print(f"\n{way}: {args.nodes} nodes, {len(good)} rounds; seconds from the controller's start (medians)")
        print("| what | starts | ends (last node) | count |\n|---|---|---|---|")
        for what, start, end, count in summary(good):
            print(f"| {what} | {start:.3f} | {end:.3f} | {count} |")
        for name in ("probe", "launch", "first_rank"):
            print(f"| phase {name} | | {statistics.median(r['phases'].get(name, 0) for r in good):.3f} | |")
        print(f"| the first rank's own start | | {statistics.median(r['first_rank'] for r in good):.3f} | |")
        print(f"| the interpreter's start after Popen | | {statistics.median(r['spawn'] for r in good):.3f} | |")
    (WORK / f"launch-timeline-{args.nodes}.json").write_text(json.dumps(rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
