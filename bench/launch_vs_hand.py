"""`clusterctl run` beside torchrun typed by hand on every node, in the same invocation (issue 40).

The hand-typed way, as a careful user does it: one `ssh NODE docker exec -w /workspace -e
GLOO_SOCKET_IFNAME=NIC CONTAINER python3 -m torch.distributed.run --rdzv-backend=static
--rdzv-endpoint=MASTER:PORT --node-rank=R --local-addr=ADDR ...` per node, all at once, in the
container `clusterctl up` started. The job is examples/allreduce.py on 2 ranks per node (import
torch, init, one all_reduce, a barrier); it writes each rank's timestamps. Both ways alternate,
`reps` rounds each. Reported, from the wall time just before the command was started:
- "first rank starts after": the earliest rank's process start (before `import torch`);
- "returns after": the command's wall time (for the hand way: the last ssh returned);
- node-side CPU: a run whose ranks hold 20 s after the barrier, sampled from /proc (bench/nodecpu.py)
  from 3 s after the last rank's first collective to 2 s before the first rank's end; and in the same
  run, during the launch (the command's start to the last rank's first collective), the CPU seconds of
  each node's machinery beside its ranks (`node_cpu.WAY.launch`, the median node);
- clusterctl's `phases` (run --json).

    python3 bench/launch_vs_hand.py --nodes 2,8 --reps 3     # as root; its own sandbox per size
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodecpu  # noqa: E402
from common import (REPO, WORK, clusterctl_argv, clusterctl_env, fresh_dir, load, log, save, timed,  # noqa: E402
                    timed_parallel, write_ssh_config)

JOB = "examples/allreduce.py"
HOLD_S = 20.0


def bench_inventory(sandbox, hold_s: float = 0.0) -> Path:
    """The sandbox's inventory running the bench's job instead of the example generator."""
    doc = yaml.safe_load(Path(sandbox.inventory_path).read_text())
    doc["job"].pop("world_size_divides", None)
    doc["job"].update(command=[JOB], args=["{outputs}/bench-ranks/{run_id}", *([str(hold_s)] if hold_s else [])])
    path = WORK / f"launch-vs-hand-{len(sandbox.nodes)}-{int(hold_s)}.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def hand_argvs(sandbox, plan: dict, tag: str, hold_s: float) -> list[list[str]]:
    """What a careful user types on every node (see the module's doc)."""
    config = write_ssh_config(sandbox, WORK / "launch-vs-hand-ssh-config")
    container = plan["container"]
    master = plan["master"]
    argvs = []
    for node in plan["topology"]:
        remote = ["docker", "exec", "-w", "/workspace", "-e", f"GLOO_SOCKET_IFNAME={node['nic']}", "-e",
                  "OMP_NUM_THREADS=1", container, "python3", "-m", "torch.distributed.run",
                  f"--nnodes={plan['nnodes']}", f"--nproc-per-node={plan['nproc_per_node']}",
                  "--rdzv-backend=static", f"--rdzv-endpoint={master['address']}:{master['port']}",
                  f"--node-rank={node['node_rank']}", f"--local-addr={node['local_addr']}", JOB,
                  f"{plan['outputs']}/bench-ranks/{tag}", *([str(hold_s)] if hold_s else [])]
        argvs.append(["ssh", "-F", str(config), node["host"], shlex.join(remote)])
    return argvs


def the_plan(sandbox, inventory: Path, env: dict) -> dict:
    done = timed(clusterctl_argv("run", "--plan", "--json", "-i", inventory, REPO / "examples" / "prompt.txt"),
                 env=env, timeout=300)
    plan = json.loads(done.pop("_stdout").decode())
    plan["container"] = yaml.safe_load(inventory.read_text())["container"]["name"]
    return plan


def _ranks(sandbox, tag: str) -> list[dict]:
    records = []
    for path in sorted((Path(sandbox.shared_outputs) / "bench-ranks" / tag).glob("rank*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def _one(sandbox, way: str, argv_of, env: dict, ranks: int) -> dict:
    tag = f"hand-{time.time_ns()}" if way == "hand" else None
    started = time.time()
    if way == "hand":
        sample = timed_parallel(argv_of(tag), timeout=600)
    else:
        sample = timed(argv_of(tag), env=env, timeout=600)
        document = json.loads(sample.pop("_stdout", b"").decode() or "{}")
        tag, sample["phases"] = document.get("run_id"), document.get("phases")
    sample.pop("_stdout", None)
    records = _ranks(sandbox, tag) if tag else []
    sample["ranks"] = len(records)
    if len(records) == ranks:
        sample["first_rank"] = round(min(r["t_start"] for r in records) - started, 3)
        sample["last_rank"] = round(max(r["t_start"] for r in records) - started, 3)
        sample["last_init"] = round(max(r["t_init"] for r in records) - started, 3)
        sample["last_collective"] = round(max(r["t_first_collective"] for r in records) - started, 3)
        sample["last_end"] = round(max(r["t_end"] for r in records) - started, 3)
        sample["window"] = (max(r["t_first_collective"] for r in records) + 3, min(r["t_end"] for r in records) - 2)
        # the launch: from the last sample before the command to the last rank's first collective
        sample["launch_window"] = (started - 1.2, max(r["t_first_collective"] for r in records))
    elif sample["rc"] == 0:
        sample["rc"], sample["err"] = 1, f"{len(records)} of {ranks} rank records"
    return sample


class Sampler:
    """bench/nodecpu.py's sample every second, in a thread, while a run goes."""

    def __init__(self, sandbox):
        self.sandbox, self.samples, self._stop = sandbox, [], threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            self.samples.append((time.time(), nodecpu.sample(self.sandbox)))
            self._stop.wait(1.0)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def rate(self, window) -> dict:
        inside = [s for s in self.samples if window[0] <= s[0] <= window[1]]
        if len(inside) < 2:
            return {}
        (t0, first), (t1, last) = inside[0], inside[-1]
        return {"seconds": round(t1 - t0, 1), "per_minute": nodecpu.per_minute(first, last, t1 - t0)}

    def spent(self, window) -> dict:
        """CPU seconds each node's machinery spent in `window` (its sshd tree, Docker Engine and shim, the
        wrapper: what a way costs a node to start the job, its ranks not counted), the median node's."""
        rate = self.rate(window)
        if not rate:
            return {}
        seconds = rate["seconds"]
        nodes = [{part: value * seconds / 60 for part, value in parts.items() if part != "torchrun"}
                 for parts in rate["per_minute"].values()]
        parts = {part: round(statistics.median(n[part] for n in nodes), 3) for part in nodes[0]}
        return {"seconds": seconds, "per_node": round(statistics.median(sum(n.values()) for n in nodes), 3), **parts}


def measure(sandbox, state: Path, reps: int, before: Optional[Path] = None) -> dict:
    """`before`: a directory holding clusterctl/ as it was (`git archive BASE clusterctl | tar -x -C DIR`),
    measured alongside as a third way."""
    env = clusterctl_env(state)
    if before:  # compiled as this checkout's is (common.clusterctl_env): neither way pays for compiling
        import compileall

        compileall.compile_dir(str(before / "clusterctl"), quiet=1)
    envs = {"hand": env, "clusterctl": env, "before": dict(env, PYTHONPATH=str(before)) if before else None}
    n, ranks = len(sandbox.nodes), 2 * len(sandbox.nodes)
    inventory = bench_inventory(sandbox)
    plan = the_plan(sandbox, inventory, env)
    ways = {"hand": lambda tag: hand_argvs(sandbox, plan, tag, 0.0),
            "clusterctl": lambda tag: clusterctl_argv("run", "-i", inventory, REPO / "examples" / "prompt.txt", "--json")}
    if before:
        ways["before"] = ways["clusterctl"]
    samples = {way: [] for way in ways}
    for index in range(reps):
        for way, argv_of in ways.items():
            sample = _one(sandbox, way, argv_of, envs[way], ranks)
            sample.pop("window", None), sample.pop("launch_window", None)
            samples[way].append(sample)
            log(f"  {n} nodes, {way} {index + 1}/{reps}: exit {sample['rc']}, first rank {sample.get('first_rank')}s, "
                f"last rank {sample.get('last_rank')}s, init {sample.get('last_init')}s, end {sample.get('last_end')}s, "
                f"returned {sample['wall']:.2f}s" + (f" phases {sample.get('phases')}" if way != "hand" else "")
                + (f": {sample.get('err', '')[-300:]}" if sample["rc"] else ""))
    cpu = {}
    held = bench_inventory(sandbox, HOLD_S)
    held_ways = {"hand": lambda tag: hand_argvs(sandbox, plan, tag, HOLD_S),
                 "clusterctl": lambda tag: clusterctl_argv("run", "-i", held, REPO / "examples" / "prompt.txt", "--json")}
    if before:
        held_ways["before"] = held_ways["clusterctl"]
    for way, argv_of in held_ways.items():
        with Sampler(sandbox) as sampler:
            sample = _one(sandbox, way, argv_of, envs[way], ranks)
        cpu[way] = sampler.rate(sample["window"]) if "window" in sample else {"err": sample.get("err")}
        if "launch_window" in sample:  # issue 52: what the launch costs a node beside its ranks
            cpu[way]["launch"] = sampler.spent(sample["launch_window"])
        log(f"  {n} nodes, {way} holding {HOLD_S:g}s: node-side CPU {cpu[way]}")
    profile = controller_profile(ways["clusterctl"](None), env)
    log(f"  {n} nodes, the controller's busiest functions (py-spy, samples while on CPU): {profile[:5]}")
    return {"nodes": n, "ranks_per_node": 2, "samples": samples, "node_cpu": cpu, "controller_profile": profile,
            **summarize(samples)}


def controller_profile(argv: list, env: dict, top: int = 15) -> list:
    """One `clusterctl run` under py-spy (100 Hz, every thread, on-CPU samples only): the functions
    it spent its CPU in, [(file:function, samples as leaf, samples inclusive)]."""
    raw = WORK / "launch-vs-hand-profile.txt"
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        return []
    timed([spy, "record", "-r", "100", "-f", "raw", "-o", raw, "--", *argv], env=env, timeout=600)
    leaf, inclusive = {}, {}
    for line in raw.read_text().splitlines() if raw.exists() else []:
        stack, _, count = line.rpartition(" ")
        frames = [f.split(" (")[0] + " " + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] for f in stack.split(";")]
        leaf[frames[-1]] = leaf.get(frames[-1], 0) + int(count)
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + int(count)
    return [(frame, samples, inclusive[frame]) for frame, samples in sorted(leaf.items(), key=lambda kv: -kv[1])[:top]]


def summarize(samples: dict) -> dict:
    out = {}
    for way, runs in samples.items():
        good = [s for s in runs if s["rc"] == 0 and "first_rank" in s]
        out[way] = {"first_rank": statistics.median(s["first_rank"] for s in good) if good else None,
                    "returned": statistics.median(s["wall"] for s in good) if good else None, "runs": len(good)}
    phases = [s["phases"] for s in samples.get("clusterctl", []) if s["rc"] == 0 and s.get("phases")]
    if phases:
        out["clusterctl"]["phases"] = {k: statistics.median(p[k] for p in phases if k in p) for k in phases[0]}
    hand = out["hand"]
    for way in ("clusterctl", "before"):
        ours = out.get(way)
        if ours and hand["first_rank"] and ours["first_rank"]:
            out.setdefault("ratio", {})[way] = {"first_rank": round(ours["first_rank"] / hand["first_rank"], 2),
                                                "returned": round(ours["returned"] / hand["returned"], 2)}
    return out


def measure_at(n: int, reps: int, before: Optional[Path] = None) -> dict:
    """`measure` on a Docker sandbox of its own of `n` nodes (up first, down after)."""
    from clusterctl.sandbox import down, up

    sandbox = up(n, docker=True)
    try:
        state = fresh_dir(WORK / f"launch-vs-hand-{n}-state")
        converged = timed(clusterctl_argv("up", sandbox.inventory_path), env=clusterctl_env(state), timeout=900)
        if converged["rc"] != 0:
            raise RuntimeError(f"`clusterctl up` on {n} nodes failed: {converged.get('err', '')[-300:]}")
        return measure(sandbox, state, reps, before)
    finally:
        down(sandbox.state_dir)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="clusterctl run beside torchrun typed by hand")
    parser.add_argument("--nodes", default="2,8")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--label", default="", help="where in bench/results.json (launch_vs_hand.LABEL)")
    parser.add_argument("--before", type=Path, default=None,
                        help="a directory holding clusterctl/ from before (git archive BASE clusterctl | tar -x -C DIR)")
    parser.add_argument("--before-label", default="", help="what the `before` way is before, in the tables "
                                                               "(e.g. 'before issue 52's launch in one start')")
    args = parser.parse_args(argv)
    for n in (int(x) for x in args.nodes.split(",")):
        result = dict(measure_at(n, args.reps, args.before), measured=time.strftime("%Y-%m-%d %H:%M"), label=args.label,
                      **({"before_label": args.before_label} if args.before_label else {}))
        results = load()  # read again: another measurement may have saved meanwhile
        results.setdefault("launch_vs_hand", {}).setdefault(args.label or "latest", {})[str(n)] = result
        save(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
