"""Launch latency: from the moment `clusterctl run` starts to every rank past its first
collective, on the Docker sandbox (nodes x 2 CPU ranks, gloo).

The example job (examples/generate.py) writes one JSON record per rank with wall-clock
timestamps: process start (before `import torch`), after init_process_group, after the
first collective, end. Each is reported relative to the wall time just before the
`clusterctl run` process was started; the launch figure is the slowest rank's first
collective. `python3 bench/launch.py --nodes 8` (as root) measures it on a sandbox of its own
(bench/results.json "launch_by_nodes"); `make bench` runs the 4-node measurement of §4 and this
one at 8 nodes.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (REPO, WORK, clusterctl_argv, clusterctl_env, fresh_dir, load, log, save, timed,  # noqa: E402
                    timed_parallel, write_ssh_config)

STAGES = ("t_start", "t_init", "t_first_collective", "t_end")


def one_run(sandbox, env: dict) -> dict:
    started = time.time()
    sample = timed(clusterctl_argv("run", "-i", sandbox.inventory_path, REPO / "examples" / "prompt.txt", "--json"),
                   env=env, timeout=600)
    stdout = sample.pop("_stdout", b"")
    try:
        document = json.loads(stdout.decode() or "{}")
    except ValueError:
        document = {}
    run_id = document.get("run_id")
    sample["run_id"] = run_id
    ranks = _rank_records(Path(sandbox.shared_outputs), run_id)
    sample["ranks"] = len(ranks)
    for stage in STAGES:
        values = [r[stage] - started for r in ranks if isinstance(r.get(stage), (int, float))]
        if values and len(values) == len(ranks):
            sample[stage] = {"max": round(max(values), 3), "min": round(min(values), 3)}
    if sample["rc"] == 0 and "t_first_collective" not in sample:
        sample["rc"], sample["err"] = 1, f"no complete rank records for run {run_id}"
    return sample


def _rank_records(outputs: Path, run_id) -> list[dict]:
    if not run_id:
        return []
    records = []
    for path in sorted((outputs / "ranks" / run_id).glob("rank*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def floor_argvs(sandbox) -> list[list[str]]:
    """What torchrun itself must do first on every node, from here: `ssh NODE docker exec CONTAINER
    python3 -c 'import torch.distributed.run'`, one OpenSSH client per node, all at once."""
    import yaml

    config = write_ssh_config(sandbox, WORK / "launch-ssh-config")
    container = yaml.safe_load(Path(sandbox.inventory_path).read_text())["container"]["name"]
    remote = shlex.join(["docker", "exec", container, "python3", "-c", "import torch.distributed.run"])
    return [["ssh", "-F", str(config), node.name, remote] for node in sandbox.nodes]


def measure(sandbox, state_dir: Path, reps: int) -> dict:
    n = len(sandbox.nodes)
    env = clusterctl_env(state_dir)
    log(f"launch: clusterctl run on {n} nodes x 2 ranks, {reps} runs")
    samples = []
    for index in range(reps):
        sample = one_run(sandbox, env)
        samples.append(sample)
        first = sample.get("t_first_collective", {}).get("max")
        log(f"  run {index + 1}/{reps}: {sample['run_id']} exit {sample['rc']}, all ranks past the first collective "
            f"at {first if first is not None else '?'}s, command {sample['wall']:.2f}s"
            + (f": {sample.get('err', '')[-300:]}" if sample["rc"] else ""))
    floors = [timed_parallel(floor_argvs(sandbox), timeout=300) for _ in range(reps)]
    good_floors = [f["wall"] for f in floors if f["rc"] == 0]
    log(f"  floor (parallel ssh + docker exec + import torch.distributed.run): "
        f"{statistics.median(good_floors) if good_floors else '?'}s")
    good = [s for s in samples if s["rc"] == 0]
    return {"nodes": n, "ranks_per_node": 2, "samples": {"clusterctl run": samples, "floor": floors},
            "last_run_id": good[-1]["run_id"] if good else None,
            "median_first_collective": statistics.median(s["t_first_collective"]["max"] for s in good) if good else None}


def measure_at(n: int, reps: int) -> dict:
    """`measure` on a Docker sandbox of its own of `n` nodes (up first, down after)."""
    from clusterctl.sandbox import down, up

    sandbox = up(n, docker=True)
    try:
        state = fresh_dir(WORK / f"launch-{n}-state")
        converged = timed(clusterctl_argv("up", sandbox.inventory_path), env=clusterctl_env(state), timeout=900)
        if converged["rc"] != 0:
            raise RuntimeError(f"`clusterctl up` on {n} nodes failed: {converged.get('err', '')[-300:]}")
        result = measure(sandbox, state, reps)
        result.pop("last_run_id", None)
        return result
    finally:
        down(sandbox.state_dir)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="launch latency on a Docker sandbox of N nodes")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    results = load()
    results.setdefault("launch_by_nodes", {})[str(args.nodes)] = dict(measure_at(args.nodes, args.reps),
                                                                      measured=time.strftime("%Y-%m-%d %H:%M"))
    save(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
